"""report_to="trackio": rows, config and findings read back from trackio's local store,
and not one connection or name lookup off the machine (an audit hook watches every
socket in the logging process, with a Hugging Face token set, which would make
``trackio.init`` call huggingface.co)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("trackio")

CHILD = textwrap.dedent(
    """
    import json, math, socket, sys

    seen = []

    def hook(event, args):  # records every connection and lookup; stops any off this machine
        if event in ("socket.connect", "socket.getaddrinfo"):
            where = repr(args[1] if event == "socket.connect" else args[0])
            seen.append([event, where])
            if "127.0.0.1" not in where and "localhost" not in where:
                raise PermissionError(f"network access to {where} in a test")

    sys.addaudithook(hook)

    from rllog import RunLogger, logtree
    from rllog.sinks import Trackio

    run = sys.argv[1]
    with RunLogger(run, report_to=Trackio(project="proj"), config={"lr": 0.01, "model": "tiny"},
                   doctor=True, code_diff=False, index=False) as lg:
        for i in range(10):
            if i < 2:
                with lg.iteration(i):
                    logtree.text(f"iteration <b>{i}</b>")
                traj = {"steps": [{"ob_len": 5, "ac_len": 2, "reward": 1.0, "episode_done": True}], "final_reward": 0.0}
                lg.log_rollouts(i, [[traj, traj]], tags=["math"])
            lg.log_metrics(i, {"loss": math.nan if i >= 8 else 1.0 / (i + 1), "tag": "a", "big": math.inf,
                               "timestamp": 1000.0 + i})
            if i == 5:
                lg.log_checkpoint("000006", batch=6)
    with RunLogger(run, report_to=Trackio(project="proj"), resume=True, code_diff=False, index=False) as lg:
        for i in range(6, 9):
            lg.log_metrics(i, {"loss": 10.0 + i, "tag": "b", "big": 1.0})

    # the hook sees a loopback connection (so an empty list below means something)
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
    socket.create_connection(srv.getsockname()).close(); srv.close()

    from trackio.sqlite_storage import SQLiteStorage
    from trackio.utils import MEDIA_DIR

    state = json.load(open(run + "/trackers.json"))["trackio"]
    print(json.dumps({
        "seen": seen,
        "media": str(MEDIA_DIR),
        "state": state,
        "logs": SQLiteStorage.get_logs("proj", run_id=state["id"]),
        "config": SQLiteStorage.get_run_config("proj", run_id=state["id"]),
        "alerts": SQLiteStorage.get_alerts("proj", run_id=state["id"]),
    }, default=str))
    """
)


def test_rows_config_and_findings_reach_trackio_and_nothing_leaves_the_machine(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACKIO_", "WANDB_"))}
    env.update(TRACKIO_DIR=str(tmp_path / "trackio"), HF_HOME=str(tmp_path / "hf"), HF_TOKEN="hf_" + "x" * 34)
    run = str(tmp_path / "run")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, run], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # the only socket traffic is the hook's own loopback check (sqlite and the sink thread use none)
    assert got["seen"] and all("127.0.0.1" in addr for _, addr in got["seen"]), got["seen"]
    assert os.listdir(tmp_path / "trackio")  # the project's SQLite file is in TRACKIO_DIR

    extra = [r for r in got["logs"] if any(k.startswith(("reports/", "rollouts/", "checkpoint")) for k in r)]
    got["logs"] = [r for r in got["logs"] if r not in extra]
    # each iteration's report as a trackio Html (its file in trackio's media folder, byte for byte)
    reports = [r for r in extra if "reports/train" in r]
    assert [r["step"] for r in reports] == [0, 1]
    for r in reports:
        html = r["reports/train"]
        assert html["_type"] == "trackio.html"
        with open(os.path.join(got["media"], html["file_path"])) as f, open(f"{run}/{html['caption']}") as g:
            assert f.read() == g.read() and html["caption"] == f"train_iteration_{r['step']:06d}.html"
    # the trajectories as a trackio Table, one row per rollout summary
    tables = [r for r in extra if "rollouts/train" in r]
    assert [r["step"] for r in tables] == [0, 1]
    for r in tables:
        summaries = [
            json.loads(x) for x in open(f"{run}/train_iteration_{r['step']:06d}_rollout_summaries.jsonl")
        ]
        value = r["rollouts/train"]["_value"]
        assert [
            (v["iteration"], v["traj_idx"], v["tags"], v["total_reward"], v["ob_tokens"]) for v in value
        ] == [(s["iteration"], s["traj_idx"], "math", s["total_reward"], 5) for s in summaries]
    # every checkpoint record (both processes'), as markdown JSON at its batch
    ckpts = [
        (r["step"], json.loads(r["checkpoint"]["_value"].strip("`json\n")))
        for r in extra
        if "checkpoint" in r
    ]
    # the trackers get each record without rllog's own bookkeeping (metrics_at)
    assert ckpts == [
        (r["batch"], {k: v for k, v in r.items() if k != "metrics_at"})
        for r in map(json.loads, open(f"{run}/checkpoints.jsonl"))
    ]
    standing = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
    superseded = [json.loads(x) for x in open(f"{run}/metrics.superseded.jsonl")]
    logs = sorted(got["logs"], key=lambda r: (r.get("rllog/segment", 0), r["step"]))
    first = [r for r in logs if "rllog/segment" not in r]
    resumed = [r for r in logs if r.get("rllog/segment") == 1]
    # the first process's rows: metrics.jsonl's rows before the resume point and the superseded ones
    want_first = sorted([r for r in standing if r["tag"] == "a"] + superseded, key=lambda r: r["step"])
    assert [r["step"] for r in first] == [r["step"] for r in want_first] == list(range(10))
    for a, b in zip(first, want_first, strict=True):
        for k in ("loss", "big", "tag"):
            assert a[k] == b[k] or (math.isnan(a[k]) and math.isnan(b[k])), (k, a, b)
    assert first[0]["big"] == math.inf
    # trackio puts its own time under "timestamp": the row's own arrives as "rllog/timestamp"
    assert [r["rllog/timestamp"] for r in first] == [1000.0 + i for i in range(10)]
    assert all(isinstance(r["timestamp"], str) for r in first)
    # the resumed rows, labelled: a re-run step stands as a second point, never as a silent duplicate
    assert [(r["step"], r["loss"], r["tag"]) for r in resumed] == [
        (6, 16.0, "b"),
        (7, 17.0, "b"),
        (8, 18.0, "b"),
    ]
    assert got["state"]["segments"] == 1 and got["state"]["run"] == "run"
    assert got["config"]["lr"] == 0.01 and got["config"]["model"] == "tiny"
    # the live doctor's NaN-loss finding, as a trackio alert at the step it fired
    nan = [a for a in got["alerts"] if "loss" in a["title"]]
    assert len(nan) == 1 and nan[0]["level"] == "error" and nan[0]["step"] == 8, got["alerts"]
