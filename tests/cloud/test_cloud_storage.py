"""FsspecStorage against real servers on 127.0.0.1: upload cost, faults, outages,
permanent errors, kill -9 of the writer, two writers on one object."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from servers import FaultProxy, unique

from rllog.errors import StorageError, StoragePermanentError
from rllog.storage import FsspecStorage

WRITER = str(Path(__file__).parent / "cloud_writer.py")
ROW = (
    b'{"step": %d, "progress/batch": %d, "env/all/reward/total": 0.%06d, "optim/lr": 1e-05, "entropy": 0.5}\n'
)


@pytest.fixture
def gcs_proxy(gcs_server):
    proxy = FaultProxy(gcs_server.endpoint)
    yield proxy
    proxy.stop()


def gcs_storage(gcs_server, proxy, **kwargs) -> FsspecStorage:
    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    storage = FsspecStorage(url, **kwargs, **gcs_server.storage_options(proxy.endpoint))
    storage.backoff_initial, storage.backoff_max = 0.05, 0.5
    return storage


def read_back(storage: FsspecStorage, name: str = "metrics.jsonl") -> bytes:
    """The object as another process would see it (a fresh handle, no staged bytes)."""
    clone = FsspecStorage(storage.url, spill=False, **storage.storage_options)
    try:
        return clone.read(name)
    finally:
        clone.close()


def test_gcs_upload_bytes_stay_within_2x_of_the_file(gcs_server, gcs_proxy):
    storage = gcs_storage(gcs_server, gcs_proxy)
    gcs_proxy.reset()
    for i in range(2000):
        storage.append("metrics.jsonl", ROW % (i, i, i))
        if i % 50 == 49:
            storage.flush(durable=True)
    storage.close()
    final = read_back(storage)
    assert final == b"".join(ROW % (i, i, i) for i in range(2000))
    uploaded = gcs_proxy.stats.upload_bytes
    assert len(final) < uploaded < 2 * len(final), (uploaded, len(final))
    # 2 requests a flush (part upload, compose), the first stat and create, cleanup at close
    assert gcs_proxy.stats.requests <= 2 * 40 + 10


def test_gcs_rebases_before_the_component_limit(gcs_server, gcs_proxy):
    storage = gcs_storage(gcs_server, gcs_proxy)
    storage._ops.max_components = 4
    rows = [ROW % (i, i, i) for i in range(30)]
    for i, row in enumerate(rows):
        storage.append("metrics.jsonl", row)
        if i % 2 == 1:
            storage.flush(durable=True)
    storage.close()
    assert read_back(storage) == b"".join(rows)
    whole = [
        p for m, p, n in gcs_proxy.stats.log if "name=runs/" in p and "metrics.jsonl&ifGenerationMatch=" in p
    ]
    assert len(whole) >= 1 + 15 // 4  # the create, then one re-base every 3 composes
    assert not [p for p in read_back_list(storage) if ".rllog-parts" in p]


def read_back_list(storage: FsspecStorage) -> list[str]:
    return storage.fs.find(storage._root)


def every_nth(n: int, fault):
    return lambda k, method, path: fault if k % n == n - 1 else None


def test_gcs_faults_never_raise_and_every_row_lands_once_in_order(gcs_server, gcs_proxy):
    storage = gcs_storage(gcs_server, gcs_proxy, flush_interval=0.05)
    faults = [("status", 503), ("status", 429), ("drop",), ("drop_after",), ("delay", 0.2), ("status", 500)]
    schedule = random.Random(5)
    gcs_proxy.schedule = lambda k, m, p: (
        schedule.choice(faults) if k < 300 and schedule.random() < 0.3 else None
    )
    rows = [ROW % (i, i, i) for i in range(400)]
    with pytest.warns(RuntimeWarning, match="retrying with backoff"):
        for i, row in enumerate(rows):
            storage.append("metrics.jsonl", row)
            if i % 10 == 9:
                storage.flush()  # never raises: warns once and keeps going
            if i % 50 == 0:
                time.sleep(0.05)
        storage.close()
    assert gcs_proxy.stats.faults > 15
    assert read_back(storage) == b"".join(rows)


def test_outage_keeps_rows_and_uploads_them_after_recovery(gcs_server, gcs_proxy):
    storage = gcs_storage(gcs_server, gcs_proxy, flush_timeout=1.0)
    down = threading.Event()
    gcs_proxy.schedule = lambda k, method, path: ("status", 503) if down.is_set() else None
    storage.append("metrics.jsonl", ROW % (0, 0, 0))
    storage.flush(durable=True)
    down.set()
    with pytest.warns(RuntimeWarning, match="spill journal"):
        for i in range(1, 200):
            storage.append("metrics.jsonl", ROW % (i, i, i))
        t0 = time.monotonic()
        with pytest.raises(StorageError, match="metrics.jsonl") as err:
            storage.flush(durable=True)
    assert not isinstance(err.value, StoragePermanentError)
    assert 0.9 < time.monotonic() - t0 < 3
    assert storage.pending()["metrics.jsonl"] == sum(len(ROW % (i, i, i)) for i in range(1, 200))
    spill = storage._journals[-1].spill.folder
    assert (spill / "metrics.jsonl.tail").stat().st_size == storage.pending()["metrics.jsonl"]
    down.clear()
    storage.flush(durable=True)
    assert read_back(storage) == b"".join(ROW % (i, i, i) for i in range(200))
    storage.close()
    assert not spill.exists()


def test_run_logger_never_stalls_on_a_bucket_outage(gcs_server, gcs_proxy):
    """The loop's calls stay fast while the bucket answers 503; after it is back the
    checkpoint record lands after the rows logged before it."""
    from rllog import RunLogger

    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    down = threading.Event()
    gcs_proxy.schedule = lambda k, method, path: ("status", 503) if down.is_set() else None
    slowest = 0.0
    with pytest.warns(RuntimeWarning):
        logger = RunLogger(
            url,
            code_diff=False,
            index=False,
            flush_interval=0.2,
            flush_timeout=2.0,
            **gcs_server.storage_options(gcs_proxy.endpoint),
        )
        logger.storage.backoff_initial, logger.storage.backoff_max = 0.05, 0.3
        for i in range(60):
            if i == 10:
                down.set()
            if i == 50:
                down.clear()
            t0 = time.monotonic()
            logger.log_metrics(i, {"i": i})
            if i % 20 == 19:
                logger.log_checkpoint(f"{i + 1:06d}", batch=i + 1)
            with logger.iteration(i):
                pass
            slowest = max(slowest, time.monotonic() - t0)
            time.sleep(0.05)
        logger.close()
    assert slowest < 0.5, slowest  # never waited on the bucket (flush_timeout is 2 s)
    storage = FsspecStorage(url, spill=False, **gcs_server.storage_options())
    assert [json.loads(r)["i"] for r in storage.read("metrics.jsonl").splitlines()] == list(range(60))
    assert [json.loads(r)["batch"] for r in storage.read("checkpoints.jsonl").splitlines()] == [20, 40, 60]
    storage.close()


def test_missing_credentials_and_bad_bucket_names_fail_at_open(s3_server, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    endpoint = {"client_kwargs": {"endpoint_url": s3_server.endpoint}}
    with pytest.raises(StoragePermanentError, match="NoCredentialsError"):
        FsspecStorage(f"s3://{s3_server.new_bucket()}/run", **endpoint)
    with pytest.raises(StoragePermanentError, match="Invalid bucket name"):
        FsspecStorage("s3://UPPER_case!/run", key="testing", secret="testing", **endpoint)


def test_closing_on_a_dead_bucket_is_quick_and_keeps_the_rows(gcs_server, gcs_proxy):
    from rllog import RunLogger

    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    logger = RunLogger(url, code_diff=False, **gcs_server.storage_options(gcs_proxy.endpoint))
    gcs_proxy.schedule = lambda k, method, path: ("status", 503)  # down from here on
    for i in range(20):
        logger.log_metrics(i, {"i": i})
    logger.log_checkpoint("000020", batch=20)
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="spill journal"):
        logger.close()
    assert time.monotonic() - t0 < 20  # gives up after 5 s without progress, not 30 + 60 s
    assert any("000020" in w and "not uploaded" in w and "spill journal" in w for w in logger.warnings)
    gcs_proxy.schedule = lambda k, method, path: (
        None
    )  # back: the next writer on this machine uploads the journal
    resumed = FsspecStorage(url, **gcs_server.storage_options(gcs_proxy.endpoint))
    resumed.close()
    rows = [
        json.loads(r)["i"]
        for r in read_back(FsspecStorage(url, spill=False, **gcs_server.storage_options())).splitlines()
    ]
    assert rows == list(range(20))
    reader = FsspecStorage(url, spill=False, **gcs_server.storage_options())
    assert [json.loads(r)["batch"] for r in reader.read("checkpoints.jsonl").splitlines()] == [20]


def test_missing_bucket_is_reported_at_open(gcs_server, s3_server):
    with pytest.raises(StoragePermanentError, match="no-such-bucket"):
        FsspecStorage("gs://no-such-bucket-rllog/run", **gcs_server.storage_options())
    with pytest.raises(StoragePermanentError, match="no-such-bucket"):
        FsspecStorage("s3://no-such-bucket-rllog/run", **s3_server.storage_options())


def test_permission_denied_is_reported_once_and_flush_raises_fast(gcs_server, gcs_proxy):
    storage = gcs_storage(gcs_server, gcs_proxy, flush_timeout=20.0)
    gcs_proxy.schedule = lambda k, method, path: ("status", 403)
    storage.append("metrics.jsonl", b"{}\n")
    t0 = time.monotonic()
    with pytest.warns(RuntimeWarning, match="cannot upload") as warned:
        with pytest.raises(StoragePermanentError, match="Forbidden"):
            storage.flush(durable=True)
        with pytest.raises(StoragePermanentError):
            storage.flush(durable=True)
        storage.close()
    assert time.monotonic() - t0 < 5
    assert sum(str(w.message).startswith("rllog: cannot upload") for w in warned) == 1
    assert any("not uploaded" in str(w.message) for w in warned)  # close says what is left


@pytest.mark.parametrize("server", ["s3_server"])
def test_s3_multipart_appends_upload_only_new_bytes(server, request):
    s3 = request.getfixturevalue(server)
    proxy = FaultProxy(s3.endpoint)
    try:
        storage = FsspecStorage(f"s3://{s3.new_bucket()}/run", **s3.storage_options(proxy.endpoint))
        storage._ops.min_part = 4096  # moto allows 256-byte parts (conftest), S3 needs 5 MiB
        rows = [ROW % (i, i, i) for i in range(400)]
        for i, row in enumerate(rows):
            storage.append("metrics.jsonl", row)
            if i % 20 == 19:
                storage.flush(durable=True)
            if i == 99:
                proxy.reset()  # past min_part: appends are multipart copies from here
        storage.close()
        assert read_back(storage) == b"".join(rows)
        assert proxy.stats.upload_bytes < 2 * sum(map(len, rows[100:])) + 15 * 2000
    finally:
        proxy.stop()


# ---------------------------------------------------------------- processes


def spawn(
    url: str, options: dict, tag: str, rows: int, flush_every: int, interval: float
) -> subprocess.Popen:
    args = [sys.executable, WRITER, url, json.dumps(options), tag, str(rows), str(flush_every), str(interval)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def parse(data: bytes) -> list[dict]:
    rows = []
    for line in data.splitlines(keepends=True):
        assert line.endswith(b"\n"), f"torn line {line[:80]!r}"
        rows.append(json.loads(line))
    return rows


def test_kill_9_loses_no_acknowledged_row_and_duplicates_none(gcs_server):
    rng = random.Random(7)
    for trial in range(20):
        url = f"gs://{gcs_server.new_bucket()}/run"
        writer = spawn(url, gcs_server.storage_options(), "w", 10**6, 25, 0.05)
        assert writer.stdout.readline() == "READY\n", writer.stderr.read()
        time.sleep(rng.uniform(0.0, 0.4))
        writer.send_signal(signal.SIGKILL)
        out, _ = writer.communicate()
        acked = max([int(line.split()[1]) for line in out.splitlines() if line.startswith("ACK")], default=-1)
        probe = FsspecStorage(url, spill=False, **gcs_server.storage_options())
        try:
            landed = (
                [r["i"] for r in parse(probe.read("metrics.jsonl"))] if probe.exists("metrics.jsonl") else []
            )
        finally:
            probe.close()
        assert landed == list(range(len(landed))), f"trial {trial}: rows out of order or duplicated"
        assert len(landed) > acked, f"trial {trial}: row {acked} was acknowledged, {len(landed)} rows landed"
        # the same machine resumes: the dead writer's spill journal goes up first, then new rows
        resumed = FsspecStorage(url, **gcs_server.storage_options())
        resumed.append("metrics.jsonl", b'{"writer": "resumed", "i": -1}\n')
        resumed.close()
        rows = parse(read_back(resumed))
        assert rows[-1] == {"writer": "resumed", "i": -1}
        recovered = [r["i"] for r in rows[:-1]]
        assert recovered == list(range(len(recovered))) and len(recovered) >= len(landed), f"trial {trial}"


@pytest.mark.parametrize("backend", ["gcs", "s3"])
def test_two_processes_appending_to_one_object_keep_every_row(backend, request):
    server = request.getfixturevalue(f"{backend}_server")
    url = f"{server.scheme}://{server.new_bucket()}/run"
    options = server.storage_options()
    # the GCS emulator ignores generation preconditions: the proxy enforces them as GCS does;
    # moto checks If-None-Match, then writes: the proxy sends those one at a time, as S3 decides them
    proxy = FaultProxy(server.endpoint, enforce_generation=backend == "gcs")
    options = server.storage_options(proxy.endpoint)
    writers = [spawn(url, options, tag, 300, 10, 0.05) for tag in ("a", "b")]
    try:
        for writer in writers:
            out, err = writer.communicate(timeout=120)
            assert writer.returncode == 0 and out.endswith("DONE\n"), err
    finally:
        proxy.stop()
    rows = parse(read_back(FsspecStorage(url, spill=False, **server.storage_options())))
    for tag in ("a", "b"):
        assert [r["i"] for r in rows if r["writer"] == tag] == list(range(300))
    assert len(rows) == 600


@pytest.mark.parametrize("backend", ["gcs", "s3"])
def test_forked_child_becomes_its_own_writer(backend, request):
    server = request.getfixturevalue(f"{backend}_server")
    storage = FsspecStorage(f"{server.scheme}://{server.new_bucket()}/run", **server.storage_options())
    storage.append("metrics.jsonl", b'{"who": "parent"}\n')
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            storage.append("child.jsonl", b'{"who": "child"}\n')
            storage.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    storage.close()
    assert read_back(storage) == b'{"who": "parent"}\n'
    assert read_back(storage, "child.jsonl") == b'{"who": "child"}\n'


def test_run_logger_writes_a_run_to_the_bucket(cloud_url):
    from rllog import RunLogger

    url, options = cloud_url
    with RunLogger(url, config={"lr": 1e-5}, code_diff=False, **options) as logger:
        for i in range(20):
            logger.log_metrics(i, {"progress/batch": i, "env/all/reward/total": i / 20})
        logger.log_checkpoint("000010", batch=11)
    reader = FsspecStorage(url, spill=False, **options)
    try:
        rows = parse(reader.read("metrics.jsonl"))
        assert [r["step"] for r in rows] == list(range(20))
        assert parse(reader.read("checkpoints.jsonl"))[0]["batch"] == 11
        assert "config.json" in reader.list()
    finally:
        reader.close()
