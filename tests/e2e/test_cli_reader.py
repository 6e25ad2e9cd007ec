"""rllog summary / tail / diff / import through click's CliRunner, and tail -f in a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from realdata import FULL, REALDATA, SKIP_PREFIX

from rllog import RunLogger
from rllog.cli import main

REPO = Path(__file__).resolve().parents[2]


def make_run(path, lr: float, n: int = 5) -> None:
    with RunLogger(
        path, config={"learning_rate": lr, "model_name": "tiny", "group_size": 4}, code_diff=False
    ) as logger:
        for s in range(n):
            logger.log_metrics(
                s, {"env/all/reward/total": s / 10, "optim/entropy": 1.0 - s / 10, "time/total": 2.0}
            )
        logger.log_checkpoint(f"{n:06d}", batch=n, final=True)


def invoke(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize(
    "cmd", [["summary"], ["tail"], ["diff"], ["import"], ["import", "trl"], ["import", "tensorboard"]]
)
def test_help(cmd):
    out = invoke(*cmd, "--help")
    assert out.startswith(f"Usage: main {' '.join(cmd)} ") and "--help" in out


def test_summary_of_a_run(tmp_path):
    make_run(tmp_path / "run", 3e-4)
    (tmp_path / "run/train_iteration_000004.html").write_text("<html></html>")
    out = invoke("summary", str(tmp_path / "run"))
    assert "metrics.jsonl: 5 rows read, 5 standing, step 0..4" in out
    assert "env/all/reward/total" in out and "0.4  (4)" in out
    assert "time/iter    2 s mean" in out
    assert "iterations   1 (4..4): train html 1" in out
    assert "checkpoints  1, last: name=000005, batch=5, final=True" in out
    assert "learning_rate=0.0003" in out and "warnings" not in out
    info = json.loads(invoke("summary", "--json", "-k", "optim/entropy", str(tmp_path / "run")))
    assert info["last"] == [{"key": "optim/entropy", "value": 0.6, "step": 4}] and info["missing_keys"] == []
    unknown = CliRunner().invoke(main, ["summary", "-k", "optim/entropi", str(tmp_path / "run")])
    assert unknown.exit_code == 2 and "closest: optim/entropy" in unknown.output  # unknown keys are errors
    assert info["rows"] == 5 and {f["name"] for f in info["files"]} >= {"metrics.jsonl", "config.json"}


def test_summary_of_a_memory_run():
    url = f"memory://rllog-cli-{uuid.uuid4().hex}/run"
    make_run(url, 1e-3)
    out = invoke("summary", url)
    assert f"run          {url}" in out and "5 standing" in out


def test_diff(tmp_path):
    make_run(tmp_path / "a", 3e-4)
    make_run(tmp_path / "b", 1e-3, n=3)
    out = invoke("diff", str(tmp_path / "a"), str(tmp_path / "b"))
    assert "config: 1 differ, 0 only in A, 0 only in B" in out
    assert "learning_rate" in out and "A=0.0003  B=0.001" in out
    line = next(x for x in out.splitlines() if x.strip().startswith("env/all/reward/total"))
    assert "0.4 (4)" in line and "0.2 (2)" in line


def test_tail_prints_the_last_rows(tmp_path):
    make_run(tmp_path / "run", 3e-4)
    out = invoke("tail", "-n", "2", str(tmp_path / "run"))
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["step"] for r in rows] == [3, 4] and rows[1]["env/all/reward/total"] == 0.4
    out = invoke("tail", "-n", "1", "-k", "optim/entropy", str(tmp_path / "run/metrics.jsonl"))
    assert out.strip() == "step=4  optim/entropy=0.6"
    unknown = CliRunner().invoke(main, ["tail", "-k", "missing", str(tmp_path / "run/metrics.jsonl")])
    assert unknown.exit_code == 2 and "'missing' is not a metric" in unknown.output  # not "-" forever
    result = CliRunner().invoke(main, ["tail", str(tmp_path / "missing")])
    assert (
        result.exit_code == 2 and "no run folder at" in result.output and not (tmp_path / "missing").exists()
    )


def test_import_commands_then_summary(tmp_path):
    if not FULL:
        pytest.skip(f"{SKIP_PREFIX} {REALDATA} is missing; this test imports files not in the small copy")
    state = next(REALDATA.rglob("checkpoint-160/trainer_state.json"))
    out = invoke("import", "trl", str(state), str(tmp_path / "trl"))
    assert "168 rows, steps 1..160; config.json written" in out
    result = CliRunner().invoke(main, ["import", "trl", str(state), str(tmp_path / "trl")])
    assert result.exit_code == 2 and "already exists" in result.output
    invoke("import", "trl", "--force", str(state), str(tmp_path / "trl"))
    events = next(REALDATA.rglob("events.out.tfevents.1766306229*")).parent
    out = invoke("import", "tensorboard", str(events), str(tmp_path / "tb"))
    assert "17 superseded rows in metrics.superseded.jsonl" in out
    out = invoke("diff", str(tmp_path / "trl"), str(tmp_path / "tb"))
    assert "eval_reward" in out
    for run in ("trl", "tb"):
        assert "160 standing" in invoke("summary", str(tmp_path / run))


def test_tail_follow_shows_a_new_row_within_a_second(tmp_path):
    run = tmp_path / "run"
    make_run(run, 3e-4, n=1)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rllog", "tail", "-f", "-n", "1", str(run)],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(
        target=lambda: [lines.append((time.monotonic(), x)) for x in proc.stdout], daemon=True
    )
    reader.start()
    try:
        deadline = time.monotonic() + 30
        while not lines and time.monotonic() < deadline:  # the first row: the process is up
            time.sleep(0.01)
        assert lines and json.loads(lines[0][1])["step"] == 0
        with RunLogger(run, resume=True, code_diff=False) as logger:  # resumes at batch 1: nothing moved
            delays = []
            for step in (1, 2, 3):
                written = time.monotonic()
                logger.log_metrics(step, {"env/all/reward/total": 0.5})
                while len(lines) < step + 1 and time.monotonic() < written + 5:
                    time.sleep(0.005)
                assert len(lines) == step + 1 and json.loads(lines[step][1])["step"] == step
                delays.append(lines[step][0] - written)
        assert max(delays) < 1.0, delays
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "args",
    [
        ["summary", "{missing}"],
        ["summary", "memory://rllog-cli-nothing-here"],
        ["tail", "{missing}"],
        ["tail", "memory://rllog-cli-nothing-here"],
        ["diff", "{run}", "{missing}"],
        ["diff", "{missing}", "{run}"],
        ["doctor", "{missing}"],
        ["index", "{missing}"],
        ["plot", "{missing}", "-k", "optim/entropy", "-o", "{tmp}/p.svg"],
        ["import", "trl", "{missing}/trainer_state.json", "{tmp}/out"],
        ["import", "tensorboard", "{missing}", "{tmp}/out"],
    ],
)
def test_every_command_with_a_missing_path_prints_a_clean_error(tmp_path, args):
    make_run(tmp_path / "run", 1e-3)
    paths = {"missing": str(tmp_path / "missing"), "run": str(tmp_path / "run"), "tmp": str(tmp_path)}
    result = CliRunner().invoke(main, [a.format(**paths) for a in args])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("Error: ") and "Traceback" not in result.output
    assert "expected" in result.output  # what was expected, not only what was found
    assert not (tmp_path / "missing").exists() and not (tmp_path / "out").exists()


def test_summary_and_index_count_the_same_metrics(tmp_path):
    with RunLogger(tmp_path / "run", code_diff=False) as logger:
        for s in range(3):
            logger.log_metrics(s, {"loss": 1.0 / (s + 1), "phase": "warmup", "test/reward": 0.5})
    info = json.loads(invoke("summary", "--json", str(tmp_path / "run")))
    assert info["metrics"] == 3 and info["columns"] == 4  # loss, phase, test/reward + the step column
    assert "columns      the step column + 3 metrics (1 eval)" in invoke("summary", str(tmp_path / "run"))
    invoke("index", str(tmp_path / "run"))
    assert "<li>3 metrics</li>" in (tmp_path / "run" / "index.html").read_text()
