"""Buckets that end badly: exit without close, dead buckets, write-denied credentials.

Against the GCS emulator and moto S3, through :class:`servers.FaultProxy` where the
bucket must misbehave. Each case asserts what reached the bucket and what was left where.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import FaultProxy, unique

from rllog import RunLogger
from rllog.errors import StoragePermanentError
from rllog.storage import open_storage

REPO = Path(__file__).resolve().parents[2]


def _server(request: pytest.FixtureRequest, kind: str):
    return request.getfixturevalue(f"{kind}_server")


def _rows(url: str, options: dict) -> list[dict]:
    reader = open_storage(url, "r", **options)
    try:
        data = reader.read("metrics.jsonl")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data.splitlines()]


EXIT_CHILD = r"""
import json, sys
from rllog import RunLogger
url, options = sys.argv[1], json.loads(sys.argv[2])
logger = RunLogger(url, code_diff=False, index=False, flush_interval=30, **options)
for i in range(50):
    logger.log_metrics(i, {"x": float(i)})
logger.log_checkpoint("000050", batch=50)
raise RuntimeError("the loop crashed")  # no with, no close
"""


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_uncaught_exception_without_close_uploads_at_exit(request, kind, tmp_path):
    """S3 said "cannot schedule new futures after shutdown", GCS "Session is closed": 0 of 50 rows."""
    server = _server(request, kind)
    url = f"{server.scheme}://{server.new_bucket()}/run"
    options = server.storage_options()
    env = dict(os.environ, PYTHONPATH=str(REPO), RLLOG_SPILL_DIR=str(tmp_path / "spill"))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_CHILD, url, json.dumps(options)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1 and "the loop crashed" in proc.stderr
    assert time.monotonic() - started < 30, proc.stderr
    assert "not uploaded" not in proc.stderr, proc.stderr
    assert [r["x"] for r in _rows(url, options)] == [float(i) for i in range(50)]
    reader = open_storage(url, "r", **options)
    assert json.loads(reader.read("checkpoints.jsonl"))["batch"] == 50


def _checkpoints(url: str, options: dict) -> list[int]:
    reader = open_storage(url, "r", **options)
    try:
        return [json.loads(line)["batch"] for line in reader.read("checkpoints.jsonl").splitlines()]
    except FileNotFoundError:
        return []


def _proxied(request, kind: str, schedule) -> tuple[str, dict, FaultProxy]:
    server = _server(request, kind)
    proxy = FaultProxy(server.endpoint, schedule)
    request.addfinalizer(proxy.stop)
    url = f"{server.scheme}://{server.new_bucket()}/runs/{unique('run')}"
    return url, server.storage_options(proxy.endpoint), proxy


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_dead_bucket_flush_and_close_keep_their_timeouts(request, kind):
    """A bucket that dies mid-run (every request answered 503 or dropped): flush returns
    within flush_timeout, close within close_timeout, and the warning names what was left
    and where; the next writer on this machine uploads it."""
    dead = {"on": False}

    def schedule(n: int, method: str, path: str):
        if not dead["on"]:
            return None
        return ("drop",) if n % 2 else ("status", 503)

    url, options, _proxy = _proxied(request, kind, schedule)
    logger = RunLogger(
        url, code_diff=False, index=False, flush_interval=0.5, flush_timeout=3, close_timeout=6, **options
    )
    for i in range(20):
        logger.log_metrics(i, {"x": float(i)})
    logger.log_checkpoint("000020", batch=20)
    logger.flush(durable=True)
    assert _checkpoints(url, options) == [20]  # the record is uploaded when flush returns
    dead["on"] = True
    for i in range(20, 40):
        logger.log_metrics(i, {"x": float(i)})
    logger.log_checkpoint("000040", batch=40)
    started = time.monotonic()
    logger.flush(durable=True)  # warns once per kind of failure (maybe already did, from the thread)
    assert time.monotonic() - started <= 3 + 1.5
    started = time.monotonic()
    with pytest.warns(RuntimeWarning) as caught:
        logger.close()
    assert time.monotonic() - started <= 6 + 2
    said = "\n".join(str(w.message) for w in caught) + "\n".join(logger.warnings)
    assert "metrics.jsonl" in said and "spill journal" in said, said
    assert "000040" in said, said  # the held record is named
    dead["on"] = False
    again = open_storage(url, **options)  # the next writer of the run adopts the journal
    again.close()
    assert [r["x"] for r in _rows(url, options)] == [float(i) for i in range(40)]
    assert _checkpoints(url, options) == [20, 40]  # the held record was spilled after its rows, not dropped


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_write_denied_credentials_fail_at_open(request, kind):
    """Credentials that may list but not write: found at open by the write probe, not
    after the first upload lost every row."""

    def schedule(n: int, method: str, path: str):
        return ("status", 403) if method in ("PUT", "POST", "DELETE") else None

    url, options, proxy = _proxied(request, kind, schedule)
    with pytest.raises(StoragePermanentError, match="create and delete objects"):
        RunLogger(url, code_diff=False, index=False, **options)
    assert any(method in ("PUT", "POST") for method, _, _ in proxy.stats.log)


HOT_ROLLOUTS = "train_iteration_000010_rollout_summaries.jsonl"


@pytest.mark.parametrize("kind", ["gcs", "s3"])
def test_429_storm_drains_and_keeps_every_record(request, kind):
    """A 429 storm: 3 in 10 requests throttled, and one rollout file, logged after the
    last checkpoint, throttled on every request. The other files still drain while it
    fails (uploads were one at a time and a cycle stopped at the first failure: 0/200
    checkpoint records reached the bucket), and after the storm everything does."""
    storm = {"on": True}

    def schedule(n: int, method: str, path: str):
        if not storm["on"]:
            return None
        if HOT_ROLLOUTS in path or (n * 2654435761) % 10 < 3:
            return ("status", 429)
        return None

    url, options, proxy = _proxied(request, kind, schedule)
    direct = _server(request, kind).storage_options()  # the test reads the bucket around the proxy
    storm["on"] = False  # the write probe at open is not the subject
    logger = RunLogger(url, code_diff=False, index=False, flush_interval=0.2, flush_timeout=20, **options)
    logger.storage.backoff_initial, logger.storage.backoff_max = 0.05, 0.5
    storm["on"] = True
    group = [[{"steps": [{"reward": 1.0}]}]]
    for it in range(10):
        for step in range(it * 20, it * 20 + 20):
            logger.log_metrics(step, {"x": float(step)})
        logger.log_rollouts(it, group)
        logger.log_checkpoint(f"{it * 20 + 20:06d}", batch=it * 20 + 20)
    logger.log_rollouts(10, group)  # the hot file: throttled as long as the storm lasts
    deadline = time.monotonic() + 60  # ends as soon as they are there (~3 s alone; 2 cores shared in CI)
    while _checkpoints(url, direct) != list(range(20, 201, 20)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _checkpoints(url, direct) == list(range(20, 201, 20))  # not held behind the hot file
    assert [r["x"] for r in _rows(url, direct)] == [float(i) for i in range(200)]
    reader = open_storage(url, "r", **direct)
    assert not reader.exists(HOT_ROLLOUTS)  # the storm still holds it
    storm["on"] = False
    logger.close()
    assert proxy.stats.faults > 0
    reader = open_storage(url, "r", **direct)
    assert all(reader.exists(f"train_iteration_{it:06d}_rollout_summaries.jsonl") for it in range(11))
    assert [r["x"] for r in _rows(url, direct)] == [float(i) for i in range(200)]
    assert _checkpoints(url, direct) == list(range(20, 201, 20))
