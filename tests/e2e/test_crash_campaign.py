"""A slice of the kill -9 campaign (benchmarks/bench_crash.py): a few random SIGKILLs
across every kind of write, each followed by a same-machine resume, locally, on the GCS
emulator and on moto S3. Every count the campaign reports must be 0."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_crash", REPO / "benchmarks" / "bench_crash.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("kind,trials", [("local", 6), ("gcs", 3), ("s3", 3)])
def test_kill_9_then_resume_loses_nothing(request, kind, trials):
    bench = _bench()
    server = None if kind == "local" else request.getfixturevalue(f"{kind}_server")
    result = bench.campaign(kind, trials, random.Random(14), server, runs_of=trials)
    assert result["trials"] == trials
    counts = {
        k: result.get(k, 0)
        for k in ("unreadable", "lost_rows", "early_records", "lost_records", "duplicates")
    }
    assert counts == dict.fromkeys(counts, 0), result


RESUMER = r"""
import os, sys
from rllog import RunLogger
os.write(1, b"READY\n")
RunLogger(sys.argv[1], resume=True, code_diff=False, index=False).close()
os.write(1, b"DONE\n")
"""


def _resume_template(path: Path, kind: str) -> tuple[set[int], set[int]]:
    """A ~30 MB run whose resume moves its last half: rows logged by RunLogger (the record
    says where the file stood), by another tool (the whole file is read), or by RunLogger
    with a late row for an earlier step after the moved ones (the file is rewritten).
    Returns (steps kept, steps moved)."""
    import json

    from rllog import RunLogger

    rows, batch = 20_000, 10_000
    keys = {f"k/{i}": i * 0.5 for i in range(80)}
    if kind == "foreign":
        path.mkdir(parents=True)
        with open(path / "metrics.jsonl", "w") as f:
            f.writelines(json.dumps({"step": s, "progress/batch": s, **keys}) + "\n" for s in range(rows))
        (path / "checkpoints.jsonl").write_text(
            json.dumps({"name": "c", "batch": batch, "state_path": "/c"}) + "\n"
        )
    else:
        with RunLogger(path, code_diff=False, index=False) as logger:
            for s in range(rows):
                logger.log_metrics(s, {"progress/batch": s, **keys})
                if s == batch - 1:
                    logger.log_checkpoint("c", batch=batch, state_path="/c")
            if kind == "late":
                logger.log_metrics(rows + 1, {"progress/batch": 7, "eval/x": 1.0})
    kept = set(range(batch)) | ({rows + 1} if kind == "late" else set())
    return kept, set(range(batch, rows))


def _steps(path: Path) -> list[int]:
    """Steps of the file's rows; every line must parse (a torn line fails the test)."""
    import json

    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_bytes().splitlines() if line.strip()]


@pytest.mark.parametrize("kind", ["rllog", "foreign", "late"])
def test_kill_9_during_a_resume_loses_no_row_and_tears_no_line(tmp_path, kind):
    """SIGKILL at random instants of a resume that moves half of a ~30 MB file (scan, kernel
    copies, fsync, the cut or the rewrite): every row is in metrics.jsonl or
    metrics.superseded.jsonl, every line of both parses, and the next resume ends with
    exactly the kept rows in metrics.jsonl and no temp file left."""
    import shutil
    import signal
    import subprocess
    import sys
    import time

    from rllog import RunLogger

    template = tmp_path / "template"
    kept, moved = _resume_template(template, kind)
    env = dict(__import__("os").environ, PYTHONPATH=str(REPO))
    rng = random.Random(15)

    def start(run: Path) -> tuple[subprocess.Popen, float]:
        proc = subprocess.Popen([sys.executable, "-c", RESUMER, str(run)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None and proc.stdout.readline() == b"READY\n"
        return proc, time.monotonic()

    shutil.copytree(template, tmp_path / "timing")
    proc, began = start(tmp_path / "timing")
    assert proc.stdout is not None and proc.stdout.readline() == b"DONE\n"
    took = time.monotonic() - began
    proc.wait()
    for trial in range(8):
        run = tmp_path / f"run{trial}"
        shutil.copytree(template, run)
        proc, began = start(run)
        time.sleep(rng.uniform(0.0, took))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left = _steps(run / "metrics.jsonl")
        aside = _steps(run / "metrics.superseded.jsonl")
        assert set(left) | set(aside) == kept | moved, f"trial {trial}: rows lost"
        with RunLogger(run, resume=True, code_diff=False, index=False):
            pass
        assert sorted(_steps(run / "metrics.jsonl")) == sorted(kept), f"trial {trial}"
        assert set(_steps(run / "metrics.superseded.jsonl")) == moved, f"trial {trial}"
        assert not list(run.glob(".*.tmp")), f"trial {trial}: a temp file was left"
        shutil.rmtree(run)
