"""``rllog serve``'s JSON API, the run status marker, downsampling, ``rllog grep`` and ``index_every``."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from rllog import RunLogger
from rllog._format.layout import STATUS_FILE
from rllog._read.status import run_status
from rllog.cli import main
from rllog.storage import LocalStorage

pytest.importorskip("starlette")
pytest.importorskip("plotly")
from starlette.testclient import TestClient  # after the skips

from rllog.serve import create_app, is_loopback
from rllog.serve._catalog import downsample


def _run(path: Path, n: int = 5, **kw) -> None:
    with RunLogger(path, code_diff=False, index=False, **kw) as lg:
        for i in range(n):
            lg.log_metrics(i, {"loss": 1.0 / (i + 1), "env/all/reward/total": 0.1 * i})


def test_status_finished_running_crashed_resumed_unknown(tmp_path):
    _run(tmp_path / "done")
    st = run_status(LocalStorage(tmp_path / "done"))
    assert st["state"] == "finished" and st["resumes"] == 0 and st["ended_at"]
    live = RunLogger(tmp_path / "live", code_diff=False, index=False)
    assert run_status(LocalStorage(tmp_path / "live"))["state"] == "running"
    assert run_status(LocalStorage(tmp_path / "live"))["live"] is True
    live.close()
    assert run_status(LocalStorage(tmp_path / "live"))["state"] == "finished"
    # a writer that died: its marker says running, nobody holds the lock
    (tmp_path / "dead").mkdir()
    (tmp_path / "dead" / STATUS_FILE).write_text(json.dumps({"state": "running", "starts": 1}))
    (tmp_path / "dead" / ".rllog.lock").write_text("12345\n")
    assert run_status(LocalStorage(tmp_path / "dead"))["state"] == "crashed"
    _run(tmp_path / "done", resume=True)
    _run(tmp_path / "done", resume=True)
    assert run_status(LocalStorage(tmp_path / "done"))["resumes"] == 2
    (tmp_path / "old").mkdir()
    assert run_status(LocalStorage(tmp_path / "old"))["state"] == "unknown"


def test_status_failed_when_the_block_raises(tmp_path):
    with pytest.raises(ZeroDivisionError), RunLogger(tmp_path / "r", code_diff=False, index=False) as lg:
        lg.log_metrics(0, {"loss": 1.0})
        1 / 0  # noqa: B018  # the loop's own error
    assert json.loads((tmp_path / "r" / STATUS_FILE).read_text())["state"] == "failed"


def test_downsample_keeps_every_extreme():
    rng = np.random.default_rng(0)
    x = np.arange(100_000, dtype=float)
    y = rng.normal(size=100_000)
    y[31_337] = 50.0
    y[77_001] = -40.0
    dx, dy = downsample(x, y, 2000)
    assert len(dx) <= 2000 and np.all(np.diff(dx) > 0)
    assert 50.0 in dy and -40.0 in dy and 31_337 in dx
    assert dx[0] == 0 and dx[-1] == 99_999 and dy[-1] == y[-1]  # the line ends where the run does
    sx, sy = downsample(x[:100], y[:100], 2000)
    assert len(sx) == 100


@pytest.fixture
def client(tmp_path):
    _run(tmp_path / "runs" / "a")
    _run(tmp_path / "runs" / "deep" / "b", n=3)
    return TestClient(create_app([str(tmp_path / "runs")]), base_url="http://127.0.0.1")


def test_api_runs_series_and_detail(client):
    runs = client.get("/api/runs").json()["runs"]
    assert sorted(r["name"] for r in runs) == ["runs/a", "runs/deep/b"]
    a = next(r for r in runs if r["name"] == "runs/a")
    assert a["status"]["state"] == "finished" and a["rows"] == 5 and a["last_step"] == 4
    s = client.get(f"/api/runs/{a['id']}/series", params={"key": "loss"}).json()
    assert s["x"] == [0, 1, 2, 3, 4] and s["y"] == [1.0, 0.5, 1 / 3, 0.25, 0.2]
    s = client.get(f"/api/runs/{a['id']}/series", params={"key": "loss", "x0": 1, "x1": 2}).json()
    assert s["x"] == [1, 2]
    d = client.get(f"/api/runs/{a['id']}/detail").json()
    assert d["status"]["state"] == "finished" and d["config_tree"] is None


def test_api_long_series_is_downsampled_and_refined(tmp_path):
    path = tmp_path / "long"
    path.mkdir()
    vals = [math.sin(i / 100) for i in range(50_000)]
    vals[12_345] = 9.0
    (path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "m": v}) + "\n" for i, v in enumerate(vals))
    )
    c = TestClient(create_app([str(path)]), base_url="http://127.0.0.1")
    rid = c.get("/api/runs").json()["runs"][0]["id"]
    s = c.get(f"/api/runs/{rid}/series", params={"key": "m", "points": 1000}).json()
    assert s["downsampled"] and len(s["x"]) <= 1000 and 9.0 in s["y"] and s["n"] == 50_000
    s = c.get(
        f"/api/runs/{rid}/series", params={"key": "m", "points": 1000, "x0": 12_000, "x1": 12_400}
    ).json()
    assert not s["downsampled"] and len(s["x"]) == 401


def test_api_safety(client, tmp_path):
    rid = client.get("/api/runs").json()["runs"][0]["id"]
    assert client.post("/api/runs").status_code == 405
    assert client.delete(f"/api/runs/{rid}/detail").status_code == 405
    assert client.get("/api/runs/nope/detail").status_code == 404
    assert client.get("/static/../../../etc/passwd").status_code == 404
    assert client.get(f"/api/runs/{rid}/series", params={"key": "../../etc/passwd"}).status_code == 404
    assert client.get(f"/api/runs/{rid}/report", params={"iteration": "x"}).status_code == 400
    series = f"/api/runs/{rid}/series"
    assert client.get(series, params={"key": "loss", "x0": 3, "x1": 1}).status_code == 400
    assert client.get(series, params={"key": "loss", "x0": 1, "x1": 3}).status_code == 200
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400  # DNS rebinding
    csp = client.get("/").headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe-eval" not in csp and "default-src 'none'" in csp
    guarded = TestClient(create_app([str(tmp_path / "runs")], token="s3cret"), base_url="http://127.0.0.1")
    assert guarded.get("/api/runs").status_code == 403
    assert guarded.get("/api/runs", params={"token": "wrong"}).status_code == 403
    assert guarded.get("/api/runs", params={"token": "s3cret"}).status_code == 200
    assert guarded.get("/api/runs").status_code == 200  # the cookie set by the first good request


def test_non_loopback_host_needs_a_token():
    from rllog.serve import serve

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    with pytest.raises(ValueError, match="not a loopback"):
        serve(["."], host="0.0.0.0", port=0)


def test_grep_finds_completions(tmp_path):
    with RunLogger(tmp_path / "r", code_diff=False, index=False) as lg:
        group = [
            {
                "steps": [
                    {
                        "ob_len": 1,
                        "ac_len": 2,
                        "reward": 1.0,
                        "logs": {"prompt": "2+2?", "answer": "it is 4, needle"},
                    }
                ]
            }
        ]
        lg.log_rollouts(3, [group])
        lg.log_rollouts(3, [group], eval_name="held out")
    out = CliRunner().invoke(main, ["grep", "needle", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert (
        len(lines) == 2
        and "train_iteration_000003_rollout_summaries.jsonl:group 0:traj 0:answer: it is 4, needle" in lines
    )
    out = CliRunner().invoke(main, ["grep", "-E", r"it is \d, n", str(tmp_path / "r"), "--json"])
    assert json.loads(out.output.splitlines()[0])["match"] == "it is 4, n"
    assert CliRunner().invoke(main, ["grep", "absent", str(tmp_path / "r")]).exit_code == 1
    assert CliRunner().invoke(main, ["grep", "-E", "(", str(tmp_path / "r")]).exit_code == 2


def test_index_every_rewrites_index_during_the_run(tmp_path):
    with pytest.raises(ValueError, match="index_every"):
        RunLogger(tmp_path / "bad", index_every=0)
    lg = RunLogger(tmp_path / "r", code_diff=False, index_every=0.2)
    lg.log_metrics(0, {"loss": 1.0})
    deadline = time.monotonic() + 10
    while not (tmp_path / "r" / "index.html").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "r" / "index.html").exists()  # before close
    lg.close()


def test_runs_table_answers_before_a_big_run_is_read_and_the_doctor_matches(tmp_path, monkeypatch):
    from rllog.doctor import diagnose
    from rllog.serve import _catalog

    with RunLogger(tmp_path / "big", code_diff=False, index=False) as lg:
        for i in range(40):
            lg.log_metrics(i, {"val/ratio": 5.0 if i > 20 else 1.0, "loss": float("nan") if i == 7 else 1.0})
    monkeypatch.setattr(_catalog, "INLINE_LOAD_BYTES", 10)  # every run is "big"
    cat = _catalog.Catalog([str(tmp_path)])
    gate = threading.Lock()
    gate.acquire()  # hold the worker off reading, as if the run took minutes
    real_load = _catalog.RunEntry.load

    def slow_load(self):
        with gate:
            return real_load(self)

    monkeypatch.setattr(_catalog.RunEntry, "load", slow_load)
    c = TestClient(_create_app_for(cat), base_url="http://127.0.0.1")
    t = time.monotonic()
    row = c.get("/api/runs").json()["runs"][0]
    assert time.monotonic() - t < 2 and row["loading"] and row["status"]["state"] == "loading"
    gate.release()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = c.get("/api/runs").json()["runs"][0]
        if not row["loading"] and not row["doctor"]["pending"]:
            break
        time.sleep(0.05)
    assert row["rows"] == 40 and row["doctor"]["error"] >= 1
    entry = cat.runs()[0]
    want = [f.to_dict() for f in diagnose(entry.require())]
    assert entry.findings() == want and any(f["check"] == "nonfinite" for f in want)
    cat.close()


def _create_app_for(catalog):
    from rllog.serve._app import create_app as create

    return create(catalog)


@pytest.mark.slow  # starts real detached jobs (a few seconds)
def test_index_every_never_overlaps_detached_index_jobs(tmp_path, monkeypatch):
    import subprocess

    import rllog._run as run_mod

    monkeypatch.setattr(run_mod, "INLINE_INDEX_BYTES", 0)  # every page is written by a detached job
    started: list[float] = []
    real_run = subprocess.run

    def spy(args, **kw):
        if "rllog._indexjob" in args:
            started.append(time.monotonic())
        return real_run(args, **kw)

    monkeypatch.setattr(subprocess, "run", spy)
    lg = RunLogger(tmp_path / "r", code_diff=False, index_every=0.05)
    for i in range(20):
        lg.log_metrics(i, {"loss": 1.0})
    time.sleep(1.0)  # 20 periods; one job (a fresh python importing rllog) takes longer than that
    during = len(started)
    lg.close()
    assert 1 <= during <= 3, during  # was one job per period
    deadline = time.monotonic() + 60
    while not (tmp_path / "r" / "index.html").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (tmp_path / "r" / "index.html").exists()


def test_a_served_run_holds_columns_not_a_dict_per_row(tmp_path):
    """Runs table row, a chart and the doctor of a 20k-row x 50-metric run: what the server
    keeps is ~8 bytes a cell (the columns), not the rows as dicts (~9x that)."""
    import tracemalloc

    from rllog.serve._catalog import Catalog

    keys = [f"m{j}" for j in range(50)]
    (tmp_path / "r").mkdir()
    with open(tmp_path / "r" / "metrics.jsonl", "w") as f:
        for s in range(20_000):
            f.write(json.dumps({"step": s, **{k: math.sin(s + j) for j, k in enumerate(keys)}}) + "\n")
    tracemalloc.start()
    cat = Catalog([str(tmp_path / "r")])
    try:
        entry = cat.get(cat.runs()[0].id)
        row = entry.summary()
        s = entry.series("m3", "step", 2000, None, None, smooth=0.6)
        entry.compute_findings()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        cat.close()
    assert row["rows"] == 20_000 and s["total"] == 20_000 and entry.column("m3")[7] == math.sin(10)
    cells = 20_000 * 51 * 8
    assert held < cells * 1.6 + 6e6, f"{held / 1e6:.0f} MB held for {cells / 1e6:.0f} MB of cells"
