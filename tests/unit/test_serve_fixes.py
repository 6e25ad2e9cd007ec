"""Fixes from a review of ``rllog serve`` and ``rllog grep``: terminal escapes, refresh after
a rewrite or a resume, deleted runs, smoothing on full-resolution series, split names,
report links, host checks, durations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rllog import RunLogger
from rllog._format.terminal import escape_controls
from rllog.cli import main

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"  # writes "rm -rf ~" to the clipboard
OSC8 = "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # a hidden link
OSC0 = "\x1b]0;pwned\x07"  # the window title
CSI = "\x1b[2J\x9b2J\x7f"  # erase the screen (7-bit and C1 forms), DEL


def test_escape_controls_shows_every_control_and_keeps_text():
    assert escape_controls(OSC52) == "\\u001b]52;c;cm0gLXJmIH4=\\u0007"
    assert escape_controls(CSI) == "\\u001b[2J\\u009b2J\\u007f"
    assert escape_controls("a\tb\nc é 中 \u00a0") == "a\tb\nc é 中 \u00a0"
    assert escape_controls("\x00\r\x08") == "\\u0000\\u000d\\u0008"
    assert escape_controls("a\u202eb") == "a\\u202eb"  # a bidi override reorders what is shown
    every = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) < 0xA0 for c in escape_controls(every))


def _rollouts(path: Path, text: str, key: str = "answer") -> None:
    with RunLogger(path, code_diff=False, index=False) as lg:
        group = [{"steps": [{"ob_len": 1, "ac_len": 2, "reward": 1.0, "logs": {"prompt": "p", key: text}}]}]
        lg.log_rollouts(0, [group])


def test_grep_prints_no_terminal_escape_raw(tmp_path):
    payload = f"needle {OSC52}{OSC8}{OSC0}{CSI} end"
    _rollouts(tmp_path / "r", payload, key=f"ans{OSC0}wer")
    out = CliRunner().invoke(main, ["grep", "needle", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    assert not any(c in out.output for c in "\x1b\x07\x9b\x7f")
    assert "\\u001b]52;c;cm0gLXJmIH4=\\u0007" in out.output and "\\u001b]0;pwned\\u0007" in out.output
    out = CliRunner().invoke(main, ["grep", "needle", str(tmp_path / "r"), "--json"])
    assert out.exit_code == 0 and not any(c in out.output for c in "\x1b\x07\x9b\x7f")
    hit = json.loads(out.output)
    assert payload.startswith(hit["match"]) and hit["after"] == payload[len("needle") :][:60]


def test_grep_on_a_folder_that_is_no_run_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(main, ["grep", "x", str(tmp_path / "empty")])
    assert out.exit_code == 2 and "no run at" in out.output, out.output
    _rollouts(tmp_path / "r", "nothing here")
    out = CliRunner().invoke(main, ["grep", "absent", str(tmp_path / "r")])
    assert out.exit_code == 1 and "no match in 1 rollout summaries files" in out.output


pytest.importorskip("starlette")
pytest.importorskip("plotly")
from starlette.testclient import TestClient  # noqa: E402  # after the skips

from rllog.serve import create_app, serve  # noqa: E402


def _run(path: Path, n: int = 5, **kw) -> None:
    with RunLogger(path, code_diff=False, index=False, **kw) as lg:
        for i in range(n):
            lg.log_metrics(i, {"loss": 1.0 / (i + 1)})


@pytest.mark.parametrize(
    ("host", "url", "header"),
    [("127.0.0.2", "http://127.0.0.2:8799/", "127.0.0.2:8799"), ("::1", "http://[::1]:8799/", "[::1]:8799")],
)
def test_serve_other_loopback_hosts_answer_and_print_a_valid_url(tmp_path, monkeypatch, host, url, header):
    import uvicorn

    _run(tmp_path / "r")
    got: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: got.update(app=app, **kw))
    printed: list[str] = []
    serve([str(tmp_path / "r")], host=host, port=8799, echo=printed.append)
    assert printed == [f"rllog serve: {url}  (Ctrl-C to stop)"] and got["host"] == host
    client = TestClient(got["app"], base_url=f"http://{header}")
    assert client.get("/api/runs").status_code == 200
    assert client.get("/api/runs", headers={"host": "evil.example"}).status_code == 400


@pytest.fixture
def fast_refresh(monkeypatch):
    from rllog.serve import _catalog

    monkeypatch.setattr(_catalog, "REFRESH_EVERY", 0.0)
    monkeypatch.setattr(_catalog, "DISCOVER_EVERY", 0.0)


def _fresh_series(path: Path, key: str) -> tuple[list, list]:
    from rllog import read_run

    rows = [r for r in read_run(path).rows if isinstance(r.get(key), float)]
    return [r["step"] for r in rows], [r[key] for r in rows]


def _series(client: TestClient, rid: str, key: str = "reward") -> dict:
    out = client.get(f"/api/runs/{rid}/series", params={"key": key})
    assert out.status_code == 200, out.text
    return out.json()


#: metrics that make each row long, so the file is longer than the head a tail compares
PAD = {f"pad/metric_{i:02d}": 0.5 for i in range(12)}


def test_series_after_resume_and_replace_while_served_equals_a_fresh_read(tmp_path, fast_refresh):
    import shutil

    path = tmp_path / "runs" / "r"
    with RunLogger(path, code_diff=False, index=False) as lg:
        for s in range(6):
            lg.log_metrics(s, {"reward": float(s), **PAD})
            if s == 2:
                lg.log_checkpoint("000002", batch=3, state_path="ck/2")
    client = TestClient(create_app([str(tmp_path / "runs")]), base_url="http://127.0.0.1")
    rid = client.get("/api/runs").json()["runs"][0]["id"]
    before = _series(client, rid)
    assert before["x"] == [0, 1, 2, 3, 4, 5] and before["resumes"] == [] and before["superseded"]["x"] == []
    # resumed while served: rows >= 3 moved aside, the file regrows past the old offset
    with RunLogger(path, resume=True, code_diff=False, index=False) as lg:
        for s in range(3, 10):
            lg.log_metrics(s, {"reward": 10.0 + s, **PAD})
    after = _series(client, rid)
    assert (after["x"], after["y"]) == _fresh_series(path, "reward")
    assert after["y"] == [0.0, 1.0, 2.0, *(10.0 + s for s in range(3, 10))]
    assert after["superseded"] == {"x": [3, 4, 5], "y": [3.0, 4.0, 5.0]} and after["resumes"] == [3]
    summary = client.get("/api/runs").json()["runs"][0]
    assert summary["status"]["resumes"] == 1 and summary["last_step"] == 9
    # the folder replaced by another run with as many rows, while served
    shutil.rmtree(path)
    with RunLogger(path, code_diff=False, index=False) as lg:
        for s in range(10):
            lg.log_metrics(s, {"reward": -float(s), **PAD})
    after = _series(client, rid)
    assert (
        (after["x"], after["y"])
        == _fresh_series(path, "reward")
        == (list(range(10)), [-float(s) for s in range(10)])
    )
    assert after["superseded"]["x"] == [] and after["resumes"] == []


def test_refresh_reads_rows_moved_aside_while_open(tmp_path):
    """A resume appends to metrics.superseded.jsonl before it cuts metrics.jsonl: an open
    run shows those rows (the resume markers) at its next refresh, not after a restart."""
    from rllog import read_run

    _run(tmp_path, n=4)
    run = read_run(tmp_path)
    assert run.superseded_rows == []
    (tmp_path / "metrics.superseded.jsonl").write_text('{"step": 2, "loss": 9.0}\n{"step": 3, "loss": 8.0}\n')
    run.refresh()
    assert [(r["step"], r["loss"]) for r in run.superseded_rows] == [(2, 9.0), (3, 8.0)]
    assert run.superseded["step"].tolist() == [2, 3]
    with open(tmp_path / "metrics.superseded.jsonl", "a") as f:
        f.write('{"step": 4, "loss": 7.0}\n')
    run.refresh()
    assert [r["step"] for r in run.superseded_rows] == [2, 3, 4]


def test_tail_notices_a_file_cut_and_grown_past_the_old_offset(tmp_path):
    """The first bytes are the same (the kept rows), the bytes before the old offset are not."""
    from rllog._read.run import MetricsTail
    from rllog.storage import LocalStorage

    rows = [json.dumps({"step": s, "v": float(s), "pad": "x" * 80}) + "\n" for s in range(8)]
    (tmp_path / "m.jsonl").write_text("".join(rows))
    tail = MetricsTail(LocalStorage(tmp_path), "m.jsonl")
    assert len(tail.poll()) == 8
    again = [json.dumps({"step": s, "v": -float(s), "pad": "y" * 80}) + "\n" for s in range(4, 12)]
    (tmp_path / "m.jsonl").write_text("".join(rows[:4] + again))  # cut at step 4, grown past
    got = tail.poll()
    assert tail.rewritten and [r["v"] for _, r in got] == [0.0, 1.0, 2.0, 3.0] + [
        -float(s) for s in range(4, 12)
    ]
    with open(tmp_path / "m.jsonl", "a") as f:
        f.write(json.dumps({"step": 12, "v": 5.0}) + "\n")
    assert [r for _, r in tail.poll()] == [{"step": 12, "v": 5.0}] and not tail.rewritten


def test_a_deleted_run_is_dropped_and_its_data_not_served(tmp_path, fast_refresh):
    import shutil

    _run(tmp_path / "runs" / "keep")
    _run(tmp_path / "runs" / "gone")
    client = TestClient(create_app([str(tmp_path / "runs")]), base_url="http://127.0.0.1")
    runs = {r["name"]: r["id"] for r in client.get("/api/runs").json()["runs"]}
    assert set(runs) == {"runs/keep", "runs/gone"}
    assert _series(client, runs["runs/gone"], "loss")["y"][0] == 1.0
    shutil.rmtree(tmp_path / "runs" / "gone")
    assert client.get(f"/api/runs/{runs['runs/gone']}/series", params={"key": "loss"}).status_code == 404
    assert [r["name"] for r in client.get("/api/runs").json()["runs"]] == ["runs/keep"]
    assert client.get(f"/api/runs/{runs['runs/gone']}/detail").status_code == 404


def test_duration_from_the_status_marker_without_time_metrics(tmp_path):
    import datetime as dt

    _run(tmp_path / "r")  # logs no time/* metric
    marker = json.loads((tmp_path / "r" / "run_status.json").read_text())
    start = dt.datetime.fromisoformat(marker["first_started_at"]).timestamp()
    end = dt.datetime.fromisoformat(marker["ended_at"]).timestamp()
    client = TestClient(create_app([str(tmp_path / "r")]), base_url="http://127.0.0.1")
    row = client.get("/api/runs").json()["runs"][0]
    assert row["status"]["state"] == "finished" and row["duration"] == pytest.approx(end - start)
    live = RunLogger(tmp_path / "live", code_diff=False, index=False)
    try:
        live.log_metrics(0, {"loss": 1.0})
        live.flush()
        client = TestClient(create_app([str(tmp_path / "live")]), base_url="http://127.0.0.1")
        row = client.get("/api/runs").json()["runs"][0]
        assert row["status"]["state"] == "running" and row["duration"] is not None and row["duration"] >= 0
    finally:
        live.close()


def test_smoothing_is_computed_on_the_full_series_then_downsampled(tmp_path):
    import math

    import numpy as np

    path = tmp_path / "long"
    path.mkdir()
    rng = np.random.default_rng(1)
    vals = rng.normal(size=20_000).tolist()
    vals[5] = math.nan
    (path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "m": v}) + "\n" for i, v in enumerate(vals))
    )
    client = TestClient(create_app([str(path)]), base_url="http://127.0.0.1")
    rid = client.get("/api/runs").json()["runs"][0]["id"]
    w = 0.99
    s = client.get(f"/api/runs/{rid}/series", params={"key": "m", "points": 500, "smooth": w}).json()
    # TensorBoard's debiased EMA over every finite logged value, in step order
    last = debias = 0.0
    want = {}
    for i, v in enumerate(vals):
        if math.isfinite(v):
            last, debias = last * w + (1 - w) * v, debias * w + (1 - w)
            want[i] = last / debias
    assert s["downsampled"] and 0 < len(s["smoothed"]["x"]) <= 500
    for x, y in zip(s["smoothed"]["x"], s["smoothed"]["y"], strict=True):
        assert y == pytest.approx(want[int(x)], abs=1e-12), (x, s["smoothed"]["x"][:5])
    # a zoomed range keeps the EMA of the whole series (not restarted at x0)
    z = client.get(
        f"/api/runs/{rid}/series", params={"key": "m", "x0": 10_000, "x1": 10_100, "smooth": w}
    ).json()
    assert z["smoothed"]["x"][0] == 10_000 and z["smoothed"]["y"][0] == pytest.approx(want[10_000], abs=1e-12)
    assert z["nonfinite"] == [] and s["nonfinite"] == [[5, "NaN"]]
    assert client.get(f"/api/runs/{rid}/series", params={"key": "m", "smooth": 1}).status_code == 400
    assert client.get(f"/api/runs/{rid}/series", params={"key": "m"}).json()["smoothed"] == {"x": [], "y": []}


def test_links_inside_an_iteration_report_open_the_run_pages(tmp_path):
    import re

    from rllog._demo import DemoConfig, run_demo

    run_demo(DemoConfig(log_path=str(tmp_path / "demo"), n_batches=3, seed=0, save_every=2), quiet=True)
    client = TestClient(create_app([str(tmp_path / "demo")]), base_url="http://127.0.0.1")
    rid = client.get("/api/runs").json()["runs"][0]["id"]
    its = client.get(f"/api/runs/{rid}/iterations").json()["iterations"]
    report = its[1]["splits"][0]["report"]
    assert report == "train_iteration_000001.html"
    page = client.get(f"/api/runs/{rid}/files/{report}")
    assert page.status_code == 200 and "sandbox" in page.headers["content-security-policy"]
    links = {h for h in re.findall(r'href="([^"#][^"]*)"', page.text)}
    assert {"index.html", "train_iteration_000000.html", "train_iteration_000002.html"} <= links
    for href in links:  # resolved against the report's URL, as the browser does in the frame
        got = client.get(f"/api/runs/{rid}/files/{href.removeprefix('./')}")
        assert got.status_code == 200 and got.text.lstrip().lower().startswith("<!doctype html"), href
    index = client.get(f"/api/runs/{rid}/files/index.html").text
    for href in set(re.findall(r'href="\./([^"#]+\.html)"', index)):
        assert client.get(f"/api/runs/{rid}/files/{href}").status_code == 200, href
    for bad in ("metrics.jsonl", "config.json", "../demo/index.html", "nope.html", "%2e%2e/index.html"):
        assert client.get(f"/api/runs/{rid}/files/{bad}").status_code == 404, bad


def test_no_favicon_404(tmp_path):
    _run(tmp_path / "r")
    client = TestClient(create_app([str(tmp_path / "r")]), base_url="http://127.0.0.1")
    assert client.get("/favicon.ico").status_code == 204
    assert '<link rel="icon" href="data:,">' in client.get("/").text  # the page asks for none
