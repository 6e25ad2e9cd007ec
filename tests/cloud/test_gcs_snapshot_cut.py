"""Resume on GCS does not send the kept rows again (issue 15): at each checkpoint the
storage keeps a server-side copy of metrics.jsonl (a one-source compose into
``.rllog-parts/snapshots/``), and the cut at resume composes that copy with a small part
instead of streaming the kept prefix back. The copy is checked (CRC-32C) before it is
used; a missing, stale or failed one falls back to the streamed cut. Bytes and requests
are counted by a proxy between rllog and the GCS emulator."""

from __future__ import annotations

import json
import warnings

import pytest
from servers import FaultProxy, unique

import rllog
from rllog import RunLogger
from rllog._write.rank import RankStorage
from rllog.storage import FsspecStorage

KEYS = [f"k/{i}" for i in range(60)]
ROWS, CHECKPOINT = 12_000, 10_800  # ~10 MB of rows, ~9 MB of them before the checkpoint


def _row(step: int) -> dict:
    return {"progress/batch": step, **{k: step * 0.5 + j for j, k in enumerate(KEYS)}}


@pytest.fixture
def gcs_run(gcs_server):
    """``(url, options, proxy)``: a new run on the emulator, seen through a counting proxy
    that enforces ``ifGenerationMatch`` as GCS does."""
    proxy = FaultProxy(gcs_server.endpoint, enforce_generation=True)
    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    yield url, gcs_server.storage_options(proxy.endpoint), proxy
    proxy.stop()


def _object(url: str, options: dict, name: str) -> bytes | None:
    """The object's bytes as stored (no rllog staging), None when missing."""
    storage = FsspecStorage(url, spill=False, **options)
    try:
        return storage.fs.cat_file(f"{storage._root}/{name}")
    except FileNotFoundError:
        return None
    finally:
        storage.close()


def _snapshot_name(url: str, options: dict) -> str | None:
    """The name, relative to the run, of the one snapshot there
    (``.rllog-parts/snapshots/<quoted file name>``); None when there is none."""
    storage = FsspecStorage(url, spill=False, **options)
    try:
        found = storage.fs.find(f"{storage._root}/.rllog-parts/snapshots")
    finally:
        storage.close()
    assert len(found) <= 1, found
    return found[0][len(storage._root) + 1 :] if found else None


def _write_run(url: str, options: dict, late_row: bool = False) -> tuple[bytes, int]:
    """A run with a checkpoint at :data:`CHECKPOINT`; ``(metrics.jsonl as stored, the byte
    where the first row at or past the checkpoint starts)``."""
    with RunLogger(url, code_diff=False, index=False, **options) as logger:
        for s in range(ROWS):
            logger.log_metrics(s, _row(s))
            if s == CHECKPOINT - 1:
                logger.log_checkpoint("c", batch=CHECKPOINT, state_path="/c")
        if late_row:
            logger.log_metrics(7, {"eval/x": 1.0})  # a late evaluation of an earlier step: kept
    data = _object(url, options, "metrics.jsonl")
    assert data is not None
    lines = data.splitlines(keepends=True)
    cut = sum(len(line) for line in lines if json.loads(line)["step"] < CHECKPOINT and b"eval/x" not in line)
    return data, cut


def _check_rows(url: str, options: dict, before: bytes, cut: int) -> None:
    """metrics.jsonl holds the kept rows, metrics.superseded.jsonl the moved ones, byte for byte."""
    lines = before.splitlines(keepends=True)
    kept = b"".join(line for line in lines if json.loads(line)["step"] < CHECKPOINT or b"eval/x" in line)
    assert before[:cut] == b"".join(lines[:CHECKPOINT])
    assert _object(url, options, "metrics.jsonl") == kept
    assert _object(url, options, "metrics.superseded.jsonl") == before[cut:].replace(
        b'{"step":7,"eval/x":1.0}\n', b""
    )
    run = rllog.read_run(url, **options)
    assert run.metrics["step"].tolist()[:CHECKPOINT] == list(range(CHECKPOINT))
    assert len(run.superseded) == ROWS - CHECKPOINT


def _uploads_to(stats, needle: str) -> int:
    return sum(n for _, path, n in stats.log if needle in path)


@pytest.mark.parametrize("late_row", [False, True], ids=["tail", "a-late-row-after-it"])
def test_resume_on_gcs_composes_the_checkpoint_snapshot_and_sends_only_the_rows_after_it(gcs_run, late_row):
    url, options, proxy = gcs_run
    before, cut = _write_run(url, options, late_row)
    moved = len(before) - cut
    name = _snapshot_name(url, options)
    proxy.reset()
    with RunLogger(url, resume=True, code_diff=False, index=False, **options) as logger:
        assert logger.resume_state.batch == CHECKPOINT
    stats = proxy.stats
    # the moved rows go up once (metrics.superseded.jsonl); the kept ~9 MB do not go up at all
    assert cut > 9e6 and moved < 1.5e6
    assert stats.upload_bytes <= moved + (256 << 10), (stats.upload_bytes, moved, cut)
    assert _uploads_to(stats, "uploadType=resumable") == 0
    composes = [path for method, path, _ in stats.log if path.split("?")[0].endswith("metrics.jsonl/compose")]
    assert len(composes) == 1 and "ifGenerationMatch=" in composes[0]
    # reading: the rows after the checkpoint, by the scan and by the snapshot's check
    assert stats.download_bytes <= 2.2 * moved + (1 << 20), (stats.download_bytes, moved)
    _check_rows(url, options, before, cut)
    assert name is not None and _object(url, options, name) == before[:cut]  # taken at the checkpoint


@pytest.mark.parametrize("case", ["missing", "stale", "longer"])
def test_resume_on_gcs_falls_back_to_the_streamed_cut_without_a_usable_snapshot(gcs_run, case):
    url, options, proxy = gcs_run
    before, cut = _write_run(url, options)
    name = _snapshot_name(url, options)
    assert name is not None
    storage = FsspecStorage(url, spill=False, **options)
    try:
        path = f"{storage._root}/{name}"
        if case == "missing":
            storage.fs.rm_file(path)
        elif case == "stale":  # same size, other bytes: the file was rewritten since
            storage.fs.pipe_file(path, before[: cut - 100] + b"x" * 99 + b"\n")
        else:  # a copy past the cut (a resume from an older checkpoint)
            storage.fs.pipe_file(path, before)
    finally:
        storage.close()
    proxy.reset()
    with RunLogger(url, resume=True, code_diff=False, index=False, **options):
        pass
    stats = proxy.stats
    assert stats.upload_bytes >= cut  # streamed back whole, as before
    assert _uploads_to(stats, "uploadType=resumable") >= 1
    assert _object(url, options, name) is None  # a stale snapshot is deleted, never used
    _check_rows(url, options, before, cut)


def test_a_failed_snapshot_warns_once_never_holds_the_checkpoint_back_and_resume_falls_back(gcs_server):
    def fail_snapshots(n: int, method: str, path: str):
        return ("status", 503) if "snapshots" in path and path.split("?")[0].endswith("/compose") else None

    proxy = FaultProxy(gcs_server.endpoint, schedule=fail_snapshots, enforce_generation=True)
    try:
        url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
        options = gcs_server.storage_options(proxy.endpoint)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            before, cut = _write_run(url, options)
        said = [str(w.message) for w in caught if "server-side copy" in str(w.message)]
        assert len(said) == 1 and "resume from that checkpoint uploads the rows before it" in said[0]
        assert proxy.stats.faults >= 1
        assert _snapshot_name(url, options) is None
        assert b'"name":"c"' in _object(url, options, "checkpoints.jsonl").replace(b" ", b"")
        proxy.reset()
        with RunLogger(url, resume=True, code_diff=False, index=False, **options) as logger:
            assert logger.resume_state.batch == CHECKPOINT
        assert proxy.stats.upload_bytes >= cut
        _check_rows(url, options, before, cut)
    finally:
        proxy.stop()


@pytest.mark.parametrize("rank", [0, 1], ids=["plain", "rank-view"])
def test_a_storage_snapshot_makes_a_cut_send_only_the_bytes_after_it(gcs_run, rank):
    url, options, proxy = gcs_run
    inner = FsspecStorage(url, **options)
    storage = RankStorage(inner, rank) if rank else inner
    try:
        head, more = b"a" * 3_000_000 + b"\n", b"b" * 1_000_000 + b"\n"
        storage.append("metrics.jsonl", head)
        storage.snapshot("metrics.jsonl")
        storage.append("metrics.jsonl", more)  # staged with the first bytes: the upload stops at the mark
        storage.flush(durable=True)
        real = "metrics.rank1.jsonl" if rank else "metrics.jsonl"
        assert _snapshot_name(url, options) == f".rllog-parts/snapshots/{real}"
        assert _object(url, options, f".rllog-parts/snapshots/{real}") == head
        proxy.reset()
        storage.truncate("metrics.jsonl", len(head) + 500_000)
        assert proxy.stats.upload_bytes < 600_000, proxy.stats.upload_bytes
        assert storage.read("metrics.jsonl") == head + more[:500_000]
        assert _object(url, options, real) == head + more[:500_000]
    finally:
        storage.close()


def test_snapshots_outlive_close_and_another_writers_cleanup(gcs_run):
    url, options, _proxy = gcs_run
    storage = FsspecStorage(url, **options)
    storage.append("metrics.jsonl", b"row\n")
    storage.snapshot("metrics.jsonl")
    storage.close()
    name = _snapshot_name(url, options)
    assert name is not None
    other = FsspecStorage(url, spill=False, **options)
    try:
        other._ops.cleanup(own_only=False)
    finally:
        other.close()
    assert _object(url, options, name) == b"row\n"
    assert name not in rllog.open_storage(url, mode="r", **options).list()


def test_the_newest_snapshot_replaces_the_last_and_a_long_middle_streams_up(gcs_run):
    url, options, proxy = gcs_run
    storage = FsspecStorage(url, **options)
    try:
        first, second, more = b"a" * 999_999 + b"\n", b"b" * 999_999 + b"\n", b"c" * 8_999_999 + b"\n"
        storage.append("metrics.jsonl", first)
        storage.snapshot("metrics.jsonl")
        storage.flush(durable=True)
        storage.append("metrics.jsonl", second)
        storage.snapshot("metrics.jsonl")  # a later checkpoint: one snapshot, the newest
        storage.append("metrics.jsonl", more)
        storage.flush(durable=True)
        assert _snapshot_name(url, options) == ".rllog-parts/snapshots/metrics.jsonl"
        assert _object(url, options, ".rllog-parts/snapshots/metrics.jsonl") == first + second
        proxy.reset()
        keep = len(first + second) + 8_500_000  # past one 8 MiB piece after the snapshot
        storage.cut("metrics.jsonl", keep, b"late\n")
        sent = proxy.stats.upload_bytes
        assert 8_500_000 <= sent < 8_500_000 + (64 << 10), sent
        assert _uploads_to(proxy.stats, "uploadType=resumable") >= 1
        assert _object(url, options, "metrics.jsonl") == (first + second + more)[:keep] + b"late\n"
    finally:
        storage.close()
