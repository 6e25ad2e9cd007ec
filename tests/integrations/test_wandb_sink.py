"""report_to="wandb" in offline mode, read back from the .wandb file with wandb's protobuf classes.

The .wandb file is a LevelDB log (32 KiB blocks of records: CRC32C, length, type) after a
7-byte W&B header; each record holds one ``wandb_internal_pb2.Record``. wandb 0.31 has no
Python reader any more, so :func:`records` undoes the framing (no protobuf parsing by hand).
"""

from __future__ import annotations

import json
import math
import struct

import pytest

pytest.importorskip("wandb")

import wandb
from wandb.proto import wandb_internal_pb2

from rllog import RunLogger
from rllog.sinks import Wandb

_BLOCK = 32768


def records(path):
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, chunk, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(chunk)
            out.append(rec)
            chunk = b""
        elif kind == 2:  # FIRST
            chunk = data[pos - length : pos]
    return out


@pytest.fixture
def offline(tmp_path, monkeypatch):
    for k, v in {"WANDB_MODE": "offline", "WANDB_DIR": tmp_path / "wandb", "WANDB_CACHE_DIR": tmp_path / "cache",
                 "WANDB_CONFIG_DIR": tmp_path / "config", "WANDB_DATA_DIR": tmp_path / "data", "WANDB_SILENT": "true",
                 "WANDB_DISABLE_GIT": "true"}.items():  # fmt: skip
        monkeypatch.setenv(k, str(v))
    (tmp_path / "wandb").mkdir()
    # wandb reads the WANDB_* variables once per process (its wandb.setup() singleton): without a
    # teardown a second test's runs land in the first test's WANDB_DIR
    wandb.teardown()
    yield tmp_path
    wandb.teardown()


def _sink():
    # no system metrics, no machine info: nothing that could reach a metadata server
    return Wandb(
        project="rllog-test",
        mode="offline",
        settings={"x_disable_stats": True, "x_disable_meta": True, "x_disable_machine_info": True},
    )


def _nested(items):
    """A history/summary record's items as a dict; ``nested_key`` paths become nested dicts."""
    out = {}
    for i in items:
        *path, last = list(i.nested_key) or [i.key]
        where = out
        for k in path:
            where = where.setdefault(k, {})
        where[last] = json.loads(i.value_json)
    return out


def _history_rows(files):
    return [
        _nested(rec.history.item)
        for f in files
        for rec in records(f)
        if rec.WhichOneof("record_type") == "history"
    ]


def _metric_rows(rows):
    """The history rows that are metrics rows (not a report, rollout table or checkpoint)."""
    return [r for r in rows if not any(k.startswith(("reports/", "rollouts/", "checkpoint")) for k in r)]


def _run_files(offline):
    return sorted(offline.glob("wandb/wandb/offline-run-*/run-*.wandb"))


def _jsonl(path):
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def _same_rows(got, want, segment=None):
    """wandb history rows equal metrics.jsonl rows: same keys and values (NaN as NaN), plus the label."""
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want, strict=True):
        g = {k: v for k, v in g.items() if not k.startswith("_")}
        w = dict(w) if segment is None else {**w, "rllog/segment": segment}
        assert set(g) == set(w), (g, w)
        for k, v in w.items():
            assert g[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(g[k])), (k, g, w)


def test_rows_config_and_a_resume_continue_one_wandb_run(offline):
    run = offline / "run"
    with RunLogger(
        run, report_to=_sink(), config={"lr": 0.01, "model": "tiny"}, code_diff=False, index=False
    ) as lg:
        for i in range(6):
            lg.log_metrics(i, {"loss": math.nan if i == 2 else 1.0 / (i + 1), "tag": "a"})
            if i == 3:
                lg.log_checkpoint("000004", batch=4)
    assert lg.warnings == []
    state = json.loads((run / "trackers.json").read_text())["wandb"]
    with RunLogger(run, report_to=_sink(), resume=True, code_diff=False, index=False) as lg2:
        for i in range(4, 7):
            lg2.log_metrics(i, {"loss": 10.0 + i, "tag": "b"})
    assert json.loads((run / "trackers.json").read_text())["wandb"]["id"] == state["id"]
    files = _run_files(offline)
    assert len(files) == 2 and all(state["id"] in f.name for f in files)  # the same wandb run, continued
    rows = _history_rows(files)
    metrics = _metric_rows(rows)
    standing, superseded = _jsonl(run / "metrics.jsonl"), _jsonl(run / "metrics.superseded.jsonl")
    # the first process's rows: metrics.jsonl's rows before the resume and the superseded ones
    _same_rows(
        [r for r in metrics if "rllog/segment" not in r], [r for r in standing if r["step"] < 4] + superseded
    )
    # the re-run steps stand as labelled points
    _same_rows(
        [r for r in metrics if "rllog/segment" in r], [r for r in standing if r["step"] >= 4], segment=1
    )
    assert [r["_step"] for r in rows] == list(range(10))  # wandb's own step only grows: nothing dropped
    configs = [rec.config for f in files for rec in records(f) if rec.WhichOneof("record_type") == "config"]
    keys = {i.key: json.loads(i.value_json) for c in configs for i in c.update}
    assert keys["lr"] == 0.01 and keys["model"] == "tiny"


def test_config_checkpoints_reports_rollouts_and_findings_reach_wandb(offline):
    from rllog import logtree

    run = offline / "run"
    group = [
        {"steps": [{"ob_len": 10 + t, "ac_len": 5, "reward": 1.0, "episode_done": True}], "final_reward": 0.5,
         "trajectory_metrics": {"correct": float(t)}}
        for t in range(3)
    ]  # fmt: skip
    cfg = {"lr": 0.01, "optim": {"beta": 0.9}, "api_key": "sk-" + "a" * 40}
    with RunLogger(run, report_to=_sink(), doctor=True, config=cfg, code_diff=False, index=False) as lg:
        for i in range(3):
            with lg.iteration(i):
                logtree.text(f"iteration <b>{i}</b> said <script>x</script>")
            lg.log_rollouts(i, [group, group[:1]], tags=["math"])
            lg.log_metrics(i, {"loss": math.nan if i == 2 else 1.0, "reward": 0.1 * i})
            lg.log_checkpoint(f"{i + 1:06d}", batch=i + 1, state_path=f"/ckpt/{i + 1}", seed=7)
    (folder,) = {f.parent for f in _run_files(offline)}
    recs = [r for f in _run_files(offline) for r in records(f)]
    # config, redacted as in config.json
    update = {i.key: json.loads(i.value_json) for r in recs if r.WhichOneof("record_type") == "config" for i in r.config.update}  # fmt: skip
    saved = json.loads((run / "config.json").read_text())
    assert {k: update[k] for k in saved} == saved and "sk-" not in json.dumps(update)
    rows = _history_rows(_run_files(offline))
    _same_rows(_metric_rows(rows), _jsonl(run / "metrics.jsonl"))
    # every checkpoint record, in order, at its batch
    # the trackers get each record without rllog's own bookkeeping (metrics_at)
    assert [r["checkpoint"] for r in rows if "checkpoint" in r] == [
        {k: v for k, v in r.items() if k != "metrics_at"} for r in _jsonl(run / "checkpoints.jsonl")
    ]
    assert [r["step"] for r in rows if "checkpoint" in r] == [1, 2, 3]
    # per iteration: the report file as an HTML panel, byte for byte (no stylesheet injected)
    reports = [r for r in rows if "reports/train" in r]
    assert [r["step"] for r in reports] == [0, 1, 2]
    for i, r in enumerate(reports):
        assert r["reports/train"]["_type"] == "html-file"
        panel = (folder / "files" / r["reports/train"]["path"]).read_text()
        assert panel == (run / f"train_iteration_{i:06d}.html").read_text()
        assert "&lt;script&gt;" in panel and "<script>" not in panel
    # per iteration: a Table of the trajectories equal to the rollout summaries
    tables = [r for r in rows if "rollouts/train" in r]
    assert [r["step"] for r in tables] == [0, 1, 2]
    for i, r in enumerate(tables):
        table = json.loads((folder / "files" / r["rollouts/train"]["path"]).read_text())
        summaries = _jsonl(run / f"train_iteration_{i:06d}_rollout_summaries.jsonl")
        assert len(summaries) == 4 and table["columns"][:4] == ["iteration", "group_idx", "traj_idx", "tags"]
        got = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
        assert [(g["iteration"], g["group_idx"], g["traj_idx"], g["tags"], g["total_reward"], g["ob_tokens"],
                 json.loads(g["trajectory_metrics"])) for g in got] == [
            (i, s["group_idx"], s["traj_idx"], "math", s["total_reward"], s["steps"][0]["ob_len"], s["trajectory_metrics"])
            for s in summaries
        ]  # fmt: skip
    # the doctor's finding as a wandb alert
    alerts = [r.alert for r in recs if r.WhichOneof("record_type") == "alert"]
    (finding,) = _jsonl(run / "doctor.jsonl")
    assert [(a.title, a.level) for a in alerts] == [("rllog doctor: nonfinite on loss", "ERROR")]
    assert alerts[0].text == f"{finding['message']}. {finding['advice']}"
    assert lg.warnings == [f"doctor (error): {finding['message']}. {finding['advice']}"]


KILLED = """
import os, signal, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from test_wandb_sink import _history_rows, _run_files
from pathlib import Path
from rllog import RunLogger
from rllog.sinks import Wandb

sink = Wandb(project="rllog-test", mode="offline", id="killed01",
             settings={"x_disable_stats": True, "x_disable_meta": True, "x_disable_machine_info": True})
lg = RunLogger(sys.argv[1], report_to=sink, code_diff=False, index=False)
for i in range(10):
    lg.log_metrics(i, {"loss": 1.0 / (i + 1), "tag": "a"})
    if i == 5:
        lg.log_checkpoint("000006", batch=6)
lg.flush(durable=True)
assert lg._sinks.flush(60)  # every row reached wandb.log
# wandb-core writes the .wandb file every FLUSH_INTERVAL (1 s): kill once the 11 rows are in it
for _ in range(100):  # 5 s
    if len(_history_rows(_run_files(Path(os.environ["WANDB_DIR"]).parent))) == 11:
        break
    time.sleep(0.05)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_kill_and_resume_leave_every_row_in_wandb_and_never_reuse_a_step(offline):
    import os
    import subprocess
    import sys

    run = offline / "run"
    # the child starts its own wandb service, as a requeued job does (not this process's)
    env = {k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}
    child = subprocess.run([sys.executable, "-c", KILLED, str(run), __file__], env=env, timeout=180)
    assert child.returncode == -9
    with RunLogger(run, report_to=_sink(), resume=True, code_diff=False, index=False) as lg:
        assert lg.resume_state.batch == 6
        for i in range(6, 12):
            lg.log_metrics(i, {"loss": 10.0 + i, "tag": "b"})
    assert not [w for w in lg.warnings if "sink" in w], lg.warnings
    killed_file, resumed_file = _run_files(offline)  # two offline runs of the one wandb run id
    assert "killed01" in killed_file.name and "killed01" in resumed_file.name
    killed, resumed = _history_rows([killed_file]), _history_rows([resumed_file])
    standing, superseded = _jsonl(run / "metrics.jsonl"), _jsonl(run / "metrics.superseded.jsonl")
    # the killed process's rows: metrics.jsonl's standing rows before step 6 and the superseded ones
    _same_rows(_metric_rows(killed), [r for r in standing if r["step"] < 6] + superseded)
    # the resumed process's rows: the re-run steps, labelled
    _same_rows(_metric_rows(resumed), [r for r in standing if r["step"] >= 6], segment=1)
    # wandb's _step: the killed one used 0-10; the resumed one starts at trackers.json's
    # reserved bound, past every _step the killed one could have used
    from rllog.sinks._wandb import STEP_BLOCK

    assert [r["_step"] for r in killed] == list(range(11))
    assert [r["_step"] for r in resumed] == list(range(STEP_BLOCK, STEP_BLOCK + 6))
    state = json.loads((run / "trackers.json").read_text())["wandb"]
    assert state["segments"] == 1 and state["next_step"] == STEP_BLOCK + 6


def test_tinker_setup_logging_gives_its_wandb_project_and_name_to_the_wandb_sink(offline):
    # tinker-cookbook's loop calls setup_logging(log_dir, wandb_project=cfg.wandb_project,
    # wandb_name=cfg.wandb_name); both were dropped, so use_rllog(report_to=...) logged to
    # wandb's "uncategorized" project under the folder's name
    import dataclasses

    from rllog.integrations.tinker import setup_logging

    sink = dataclasses.replace(_sink(), project=None)
    ml = setup_logging(str(offline / "run"), wandb_project="my-proj", wandb_name="exp-7", report_to=[sink, "console"],
                       code_diff=False, index=False)  # fmt: skip
    ml.log_metrics({"loss": 1.0}, step=0)
    ml.close()
    (run,) = [r.run for f in _run_files(offline) for r in records(f) if r.WhichOneof("record_type") == "run"][
        :1
    ]
    assert (run.project, run.display_name) == ("my-proj", "exp-7")
    assert sink.project is None  # the caller's options object is left as it was


def test_keys_wandb_keeps_for_itself_arrive_renamed_not_overwritten(offline):
    """A row's own ``_step``/``_runtime``/``_timestamp`` would be replaced by wandb's values."""
    run = offline / "run"
    with RunLogger(run, report_to=_sink(), code_diff=False, index=False) as lg:
        for i in range(3):
            lg.log_metrics(i, {"_step": 100 + i, "_runtime": 7.5, "_timestamp": 1.0, "loss": 0.5})
    rows = _metric_rows(_history_rows(_run_files(offline)))
    assert [r["rllog/_step"] for r in rows] == [100, 101, 102]
    assert [r["_step"] for r in rows] == [0, 1, 2]  # wandb's own
    assert all(r["rllog/_runtime"] == 7.5 and r["rllog/_timestamp"] == 1.0 and r["loss"] == 0.5 for r in rows)
    assert [r["_step"] for r in _jsonl(run / "metrics.jsonl")] == [100, 101, 102]  # the file keeps them
    said = [w for w in lg.warnings if "keeps the key" in w]
    assert len(said) == 3 and "'_step'" in said[0] and "rllog/_step" in said[0]
