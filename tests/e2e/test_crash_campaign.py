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
