"""The demo RL run: it learns, it checkpoints, and a SIGKILLed run resumes consistently."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rllog._demo import DemoConfig, run_demo

REPO = Path(__file__).resolve().parents[2]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_demo_learns_and_logs_standard_metrics(tmp_path: Path) -> None:
    last = run_demo(DemoConfig(log_path=str(tmp_path), n_batches=40), quiet=True)
    metrics = rows(tmp_path / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(40))
    for key in (
        "progress/batch",
        "progress/done_frac",
        "env/all/reward/total",
        "env/all/correct",
        "entropy",
        "kl_sample_train_v1",
        "kl_sample_train_v2",
        "optim/lr",
        "time/total",
        "time/sample",
        "time/train",
    ):
        assert key in metrics[0], key
    first = sum(m["env/all/reward/total"] for m in metrics[:5]) / 5
    final = sum(m["env/all/reward/total"] for m in metrics[-5:]) / 5
    assert final > first + 0.25, (first, final)  # reward rises
    assert metrics[-1]["test/env/all/correct"] > metrics[0]["test/env/all/correct"] + 0.2
    assert metrics[-1]["progress/done_frac"] == 1.0 and last == {
        k: v for k, v in metrics[-1].items() if k != "step"
    }
    ckpts = rows(tmp_path / "checkpoints.jsonl")
    assert [c["batch"] for c in ckpts] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert ckpts[-1]["name"] == "final" and ckpts[-1]["final"] is True
    assert all((tmp_path / c["state_path"]).is_file() for c in ckpts)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["n_batches"] == 40 and config["log_path"] == str(tmp_path)


def strip_times(r: dict) -> dict:
    return {k: v for k, v in r.items() if not k.startswith("time/")}


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """An uninterrupted run with the settings of the kill test."""
    path = tmp_path_factory.mktemp("reference")
    run_demo(DemoConfig(log_path=str(path), n_batches=30, save_every=3), quiet=True)
    return [strip_times(r) for r in rows(path / "metrics.jsonl")]


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_mid_run_then_resume_is_consistent(
    tmp_path: Path, trial: int, reference_run: list[dict]
) -> None:
    """Kill -9 at a random moment after the second checkpoint, resume: the run ends as an
    uninterrupted one with the same seed does, and no row written before the kill is lost."""
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "rllog",
        "demo",
        str(run),
        "--iterations",
        "30",
        "--save-every",
        "3",
        "--iteration-delay",
        "0.02",
        "--quiet",
    ]
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 60
    ckpt = run / "checkpoints.jsonl"
    while not (ckpt.exists() and ckpt.read_text().count("\n") >= 2) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(random.Random(trial).uniform(0.0, 0.15))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before_rows = (run / "metrics.jsonl").read_bytes()
    before_ckpts = rows(ckpt)
    resume_batch = before_ckpts[-1]["batch"]
    subprocess.run(cmd[:-3] + ["--quiet", "--resume"], env=env, check=True, timeout=120)
    metrics = rows(run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(30))  # no step twice, none missing
    superseded = (
        (run / "metrics.superseded.jsonl").read_bytes()
        if (run / "metrics.superseded.jsonl").exists()
        else b""
    )
    kept = b"".join(
        line + b"\n" for line in before_rows.splitlines() if json.loads(line)["step"] < resume_batch
    )
    # every row written before the kill is either still in metrics.jsonl or in the side file
    assert sorted(before_rows.splitlines()) == sorted(kept.splitlines() + superseded.splitlines())
    assert (run / "metrics.jsonl").read_bytes().startswith(kept)
    ckpts = rows(ckpt)
    assert ckpts[: len(before_ckpts)] == before_ckpts
    assert [c["batch"] for c in ckpts[len(before_ckpts) :]] == list(range(resume_batch + 3, 30, 3)) + [30]
    assert all((run / c["state_path"]).is_file() for c in ckpts)
    assert [strip_times(m) for m in metrics] == reference_run  # same parameters and RNG state restored
