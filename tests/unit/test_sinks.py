"""The sink dispatcher (fake slow and raising sinks), report_to misuse, the live doctor, timers."""

from __future__ import annotations

import json
import math
import threading
import time
import warnings

import pytest
from _doctor_runs import REALDATA, healthy_rows, planted, real_runs
from click.testing import CliRunner

import rllog.sinks
from rllog import RunLogger, read_run
from rllog.cli import main
from rllog.doctor import check_run
from rllog.sinks import BaseSink


class Recorder(BaseSink):
    def __init__(self, name="rec", sleep=0.0, fail=False):
        self.name, self.sleep, self.fail = name, sleep, fail
        self.rows, self.config, self.checkpoints, self.findings = [], [], [], []

    def log_metrics(self, step, row):
        if self.fail:
            raise ConnectionError("tracker down")
        time.sleep(self.sleep)
        self.rows.append((step, row))

    def log_config(self, config):
        self.config.append(config)

    def log_checkpoint(self, record):
        self.checkpoints.append(record)

    def log_finding(self, finding):
        self.findings.append(finding)


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def test_rows_config_checkpoints_reach_a_sink_with_nan_kept(tmp_path):
    rec = Recorder()
    with RunLogger(tmp_path / "r", report_to=rec, code_diff=False, index=False, config={"lr": 0.1}) as lg:
        for i in range(5):
            lg.log_metrics(i, {"loss": math.nan if i == 2 else float(i), "tag": "a"})
        lg.log_checkpoint("000005", batch=5)
    assert [s for s, _ in rec.rows] == [0, 1, 2, 3, 4]
    assert math.isnan(rec.rows[2][1]["loss"]) and rec.rows[3][1] == {"loss": 3.0, "tag": "a"}
    assert rec.config == [{"lr": 0.1}] and rec.checkpoints[0]["batch"] == 5
    assert lg.warnings == []


def test_slow_and_raising_sinks_never_slow_the_loop(tmp_path):
    slow, bad = Recorder("slow", sleep=1.0), Recorder("bad", fail=True)
    lg = RunLogger(
        tmp_path / "r",
        report_to=[slow, bad],
        code_diff=False,
        index=False,
        sink_queue_size=100,
        sink_timeout=1.5,
    )
    lg._sinks._retrying.wait = lambda state: 0  # no backoff in the test
    times = []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for i in range(2000):
            t0 = time.perf_counter()
            lg.log_metrics(i, {"x": float(i)})
            times.append(time.perf_counter() - t0)
        lg.close()
    times.sort()
    assert times[int(0.99 * len(times))] < 100e-6
    assert [r["step"] for r in _rows(tmp_path / "r")] == list(range(2000))  # metrics.jsonl is complete
    text = "\n".join(lg.warnings)
    assert sum("sink bad failed" in w for w in lg.warnings) == 1 and "ConnectionError: tracker down" in text
    assert "is disabled" in text and "sink queue is full (100 items)" in text
    (slow_msg,) = [w for w in lg.warnings if w.startswith("sink slow received")]
    got = len(slow.rows)
    assert (
        f"sink slow received {got} of 2000 metric rows" in slow_msg
        and "dropped because the sink queue" in slow_msg
    )
    (bad_msg,) = [w for w in lg.warnings if w.startswith("sink bad received")]
    assert "sink bad received 0 of 2000" in bad_msg and "not sent after it failed" in bad_msg


def test_report_to_misuse_fails_at_construction(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown sink 'wandbb'"):
        RunLogger(tmp_path / "a", report_to="wandbb")
    with pytest.raises(TypeError, match="expected a sink name or a sink object"):
        RunLogger(tmp_path / "b", report_to=[3])
    real = rllog.sinks._common.importlib.util.find_spec
    monkeypatch.setattr(
        rllog.sinks._common.importlib.util, "find_spec", lambda n: None if n == "wandb" else real(n)
    )
    with pytest.raises(ImportError, match=r"pip install 'rllog\[wandb\]'"):
        RunLogger(tmp_path / "c", report_to="wandb")
    assert not (tmp_path / "c").exists()  # nothing opened


@pytest.mark.parametrize("var", ["TRACKIO_SPACE_ID", "TRACKIO_SERVER_URL", "TRACKIO_WEBHOOK_URL"])
def test_trackio_refuses_settings_that_would_send_data_off_the_machine(tmp_path, monkeypatch, var):
    real = rllog.sinks._common.importlib.util.find_spec
    monkeypatch.setattr(
        rllog.sinks._common.importlib.util, "find_spec", lambda n: object() if n == "trackio" else real(n)
    )
    monkeypatch.setenv(var, "someone/space")
    with pytest.raises(ValueError, match=f"local store only.*{var}.*trackio.sync"):
        RunLogger(tmp_path / "t", report_to="trackio")
    assert not (tmp_path / "t").exists()  # nothing opened


def _live(tmp_path, rows, name="live"):
    fired, seen = [], threading.Event()

    def on_finding(f):
        fired.append(f)
        seen.set()

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        lg = RunLogger(tmp_path / name, doctor=True, on_finding=on_finding, code_diff=False, index=False)
        for r in rows:
            r = dict(r)
            lg.log_metrics(r.pop("step"), r)
        during = lg._sinks.flush(10) and list(fired)
        lg.close()
    return lg, during, fired


def _cli_findings(run):
    out = CliRunner().invoke(main, ["doctor", "--json", "--fail-on", "never", str(run)])
    assert out.exit_code == 0, out.output
    return json.loads(out.output)["findings"]


#: a planted failure for every rule of rllog/_format/rules.py (and the metric it fires on)
EVERY_RULE = [
    ("ratio", "ratio", "val/ratio"),
    ("clipfrac", "clip_fraction", "policy/clipfrac_avg"),
    ("approxkl", "approx_kl", "policy/approxkl_avg"),
    ("kl_negative", "kl_negative", "kl"),
    ("kl_large", "kl_large", "kl"),
    ("value_spike", "value_loss_spike", "loss/value_avg"),
    ("entropy", "entropy_collapse", "entropy"),
    ("entropy_rise", "entropy_rise", "entropy"),
    ("clipped", "clipped_completions", "completions/clipped_ratio"),
    ("reward_flat_kl_grows", "reward_flat_kl_grows", "objective/kl"),
    ("value_nan", "nonfinite", "loss/value_avg"),
    ("inf_reward", "nonfinite", "reward"),
]


@pytest.mark.parametrize(("problem", "check", "metric"), EVERY_RULE)
def test_live_doctor_fires_every_rule_once_and_agrees_with_rllog_doctor(tmp_path, problem, check, metric):
    lg, during, fired = _live(tmp_path, planted(problem))
    # fired during the run (before close), once; the whole-run trend rule can only fire at close
    live = [(f["check"], f["metric"]) for f in (fired if check == "reward_flat_kl_grows" else during)]
    assert live.count((check, metric)) == 1, live
    assert [(f["check"], f["metric"]) for f in fired].count((check, metric)) == 1
    (f,) = [f for f in fired if (f["check"], f["metric"]) == (check, metric)]
    assert sum(w.startswith("doctor (") and f["message"] in w for w in lg.warnings) == 1
    lines = [json.loads(x) for x in (tmp_path / "live" / "doctor.jsonl").read_text().splitlines()]
    # doctor.jsonl is what `rllog doctor --json` says about the run, and what it says about the planted rows
    assert lines == _cli_findings(tmp_path / "live") == [f.to_dict() for f in check_run(tmp_path / "live")]
    from _doctor_runs import write_run

    assert lines == [f.to_dict() for f in check_run(write_run(tmp_path / "posthoc", planted(problem)))]
    assert (check, metric) in [(x["check"], x["metric"]) for x in lines]


def test_after_a_restart_in_the_file_doctor_jsonl_says_what_rllog_doctor_says(tmp_path):
    # the ratio explodes at steps 20-24, then the job restarts from step 15 (clashing values):
    # those rows no longer stand, so rllog doctor reports nothing; the live doctor fired on them
    rows = planted("ratio")[:30] + healthy_rows(seed=3)[15:]
    lg, during, fired = _live(tmp_path, rows)
    assert [f["check"] for f in during] == ["ratio"]  # announced live, when it fired
    assert any("restart" in w or "step" in w for w in lg.warnings)
    lines = [json.loads(x) for x in (tmp_path / "live" / "doctor.jsonl").read_text().splitlines()]
    assert (
        lines == _cli_findings(tmp_path / "live") == [f.to_dict() for f in check_run(tmp_path / "live")] == []
    )


def test_live_doctor_is_silent_on_a_healthy_run(tmp_path):
    lg, during, fired = _live(tmp_path, healthy_rows())
    assert fired == [] and not any(w.startswith("doctor") for w in lg.warnings)
    lines = [json.loads(x) for x in (tmp_path / "live" / "doctor.jsonl").read_text().splitlines()]
    assert lines == [f.to_dict() for f in check_run(tmp_path / "live")] == []


@pytest.mark.slow
@pytest.mark.skipif(not REALDATA.is_dir(), reason=f"real data folder missing: {REALDATA}")
def test_live_and_post_hoc_doctor_agree_on_every_real_run(tmp_path):
    """Every real run of /work/shared/realdata (tinker and other JSONL logs; TRL and TensorBoard
    logs through rllog's importers), logged row by row with doctor=True."""
    runs = real_runs(tmp_path / "src")
    assert len(runs) >= 25
    fired_somewhere = 0
    for i, (name, src) in enumerate(sorted(runs.items())):
        step_key = read_run(src).step_key  # "global_step" in one of them
        rows = [json.loads(x) for x in (src / "metrics.jsonl").read_text().splitlines() if x.strip()]
        rows = [{"step": r.pop(step_key), **r} for r in rows if isinstance(r.get(step_key), int)]
        assert rows, name
        lg, _, fired = _live(tmp_path, rows, name=f"real{i}")
        lines = [json.loads(x) for x in (tmp_path / f"real{i}" / "doctor.jsonl").read_text().splitlines()]
        # doctor.jsonl == `rllog doctor --json` on the logged run == on the original run
        assert lines == [f.to_dict() for f in check_run(tmp_path / f"real{i}")], name
        assert lines == [f.to_dict() for f in check_run(src)], name
        # what fired live is what the post-hoc doctor reports (the whole-run trend rule fires at close)
        assert {(f["check"], f["metric"], f["fired_at"]) for f in fired} == {
            (f["check"], f["metric"], f["fired_at"]) for f in lines if f["check"] != "no_metrics"
        }, name
        fired_somewhere += bool(fired)
    assert fired_somewhere >= 5  # real findings were compared, not only empty lists
    assert _cli_findings(tmp_path / "real0") == [
        json.loads(x) for x in (tmp_path / "real0" / "doctor.jsonl").read_text().splitlines()
    ]


def test_timers_nest_add_up_and_write_spans(tmp_path):
    with RunLogger(tmp_path / "t", code_diff=False, index=False, timing_spans=True) as lg:

        @lg.timer("sample")
        def sample():
            time.sleep(0.01)

        with lg.timer("step"):
            sample()
            with lg.timer("train"):
                time.sleep(0.02)
        sample()
        lg.log_metrics(0, {"x": 1.0})
        lg.log_metrics(1, {"x": 2.0})
    r0, r1 = _rows(tmp_path / "t")
    assert set(r0) == {"step", "x", "time/step", "time/step/sample", "time/step/train", "time/sample"}
    assert r0["time/step"] >= r0["time/step/sample"] + r0["time/step/train"] >= 0.03
    assert 0.01 <= r0["time/sample"] < 0.05 and "time/sample" not in r1
    spans = [json.loads(x) for x in (tmp_path / "t" / "timing_spans.jsonl").read_text().splitlines()]
    assert {s["name"] for s in spans} == {"step", "step/sample", "step/train", "sample"}
    assert all(s["step"] == 0 and s["end"] > s["start"] for s in spans)
    with pytest.raises(ValueError, match="timer name"):
        lg.timer("/x")


def _ratio_findings(tmp_path, name, **options):
    fired = []
    with RunLogger(tmp_path / name, on_finding=fired.append, code_diff=False, index=False, **options) as lg:
        for i in range(6):
            lg.log_metrics(i, {"val/ratio": 1.5})  # inside the default bounds (0.5, 2.0)
    return [(f["check"], f["threshold"]) for f in fired]


def test_live_doctor_takes_thresholds_from_a_file_or_a_mapping(tmp_path):
    # RunLogger(doctor=...) took only True or a Thresholds: a path or a dict ran the default
    # thresholds without a word, so the alert the user configured never fired
    (tmp_path / "t.toml").write_text("ratio_high = 1.2\n")
    (tmp_path / "t.json").write_text('{"ratio_high": 1.2}')
    assert _ratio_findings(tmp_path, "default", doctor=True) == []
    for name, doctor in [
        ("toml", tmp_path / "t.toml"),
        ("json", str(tmp_path / "t.json")),
        ("map", {"ratio_high": 1.2}),
    ]:
        ((check, threshold),) = _ratio_findings(tmp_path, name, doctor=doctor)
        assert check == "ratio" and "1.2" in threshold, (name, threshold)


def test_live_doctor_misuse_fails_at_construction(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        RunLogger(tmp_path / "a", doctor=tmp_path / "nope.toml")
    with pytest.raises(ValueError, match="ratio_hgh"):
        RunLogger(tmp_path / "b", doctor={"ratio_hgh": 1.2})
    with pytest.raises(TypeError, match="doctor="):
        RunLogger(tmp_path / "c", doctor=3)
    with pytest.raises(ValueError, match="on_finding"):  # it was never called without the doctor
        RunLogger(tmp_path / "d", on_finding=print)
    assert not any((tmp_path / n).exists() for n in "abcd")  # nothing opened


def test_console_lines_show_control_characters_escaped(tmp_path, capsys):
    # logged keys and strings come from the job or the model: printed raw, ESC [2J cleared the
    # user's terminal and OSC 52 could write their clipboard (rllog/_format/terminal.py)
    import io
    import re

    out = io.StringIO()
    sink = rllog.sinks.Console(stream=out)
    with RunLogger(tmp_path / "r", report_to=sink, console=True, code_diff=False, index=False) as lg:
        lg.log_metrics(0, {"we\x1b[2Jird": 1.0, "title": "x\x1b]52;c;aGk=\x07", "bidi\u202e": 2})
        lg.log_checkpoint("c\x1b[31m", batch=1)
    for text in (out.getvalue(), capsys.readouterr().err):
        assert "we\\u001b[2Jird=1" in text and "x\\u001b]52;c;aGk=\\u0007" in text, repr(text)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text), repr(text)
    assert "checkpoint c\\u001b[31m (batch 1)" in out.getvalue()


def test_a_sink_raising_systemexit_is_disabled_and_the_others_go_on(tmp_path):
    # a sink (or a tracker library under it) that calls sys.exit() ended the sink thread:
    # every other sink and the live doctor stopped without a word, and close() blamed its timeout
    class Exits(Recorder):
        def log_metrics(self, step, row):
            if step == 2:
                raise SystemExit("tracker service died")

    good, fired = Recorder("good"), []
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with RunLogger(tmp_path / "r", report_to=[Exits("exits"), good], doctor=True, on_finding=fired.append,
                       code_diff=False, index=False, sink_timeout=5) as lg:  # fmt: skip
            lg._sinks._retrying.wait = lambda state: 0
            for i in range(8):
                lg.log_metrics(i, {"loss": math.nan if i == 5 else 1.0})
    assert [s for s, _ in good.rows] == list(range(8))
    assert [(f["check"], f["metric"]) for f in fired] == [("nonfinite", "loss")]
    text = "\n".join(lg.warnings)
    assert "sink exits failed (log_metrics raised SystemExit: tracker service died)" in text
    assert "sink exits received 2 of 8" in text and "gave up" not in text and "sink good" not in text


def test_close_timeout_bounds_the_wait_for_a_hung_sink(tmp_path):
    # close(timeout=...) is "the seconds the whole close may take at most", but a hung sink
    # held it for sink_timeout (30 s) whatever the timeout given
    hung = threading.Event()

    class Hung(BaseSink):
        name = "hung"

        def log_metrics(self, step, row):
            hung.wait(60)

    lg = RunLogger(tmp_path / "r", report_to=Hung(), code_diff=False, index=False)
    try:
        lg.log_metrics(0, {"x": 1.0})
        t0 = time.monotonic()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            lg.close(timeout=1.0)
        assert time.monotonic() - t0 < 10, "close waited for the sink past its timeout"
        assert any(w.startswith("sink hung received 0 of 1") for w in lg.warnings), lg.warnings
        assert _rows(tmp_path / "r") == [{"step": 0, "x": 1.0}]
    finally:
        hung.set()


@pytest.mark.parametrize("cls", [rllog.sinks.Console, rllog.sinks.TensorBoard, Recorder])
def test_a_sink_class_instead_of_an_instance_fails_at_construction(tmp_path, cls):
    # report_to=rllog.sinks.Console (no parentheses) passed the protocol check: the sink was
    # disabled on the background thread ("open() missing 1 required positional argument"),
    # or construction failed with "check_installed() missing 1 required positional argument"
    with pytest.raises(TypeError, match=rf"{cls.__name__} is a class.*{cls.__name__}\(\)"):
        RunLogger(tmp_path / "r", report_to=[cls])
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("keys", ["loss", [1, 2], ("loss", None)])
def test_console_keys_must_be_metric_names(keys):
    with pytest.raises(TypeError, match="sequence of metric names"):
        rllog.sinks.Console(keys=keys)
    assert rllog.sinks.Console(keys=["loss"]).keys == ("loss",)
