"""Resume on a bucket (issue 15): ranged reads of the rows after the checkpoint, and a cut
that does not send the kept rows through the client: on S3 UploadPartCopy, on GCS a
compose of the snapshot taken at the checkpoint and a small part (GCS cannot copy a byte
range server-side; without a snapshot the prefix streams back in bounded pieces:
tests/cloud/test_gcs_snapshot_cut.py). Bytes and requests are counted by a proxy between
rllog and the emulator / moto."""

from __future__ import annotations

import json

import pytest
from servers import FaultProxy, unique

import rllog
from rllog import RunLogger

KEYS = [f"k/{i}" for i in range(60)]
ROWS, CHECKPOINT = 12_000, 10_800  # ~10 MB: past S3's 5 MiB part and one 8 MiB GCS piece
PIECE = 8 << 20  # the most one request may carry (rllog._storage.objectops.GCS_CUT_CHUNK)


def _row(step: int) -> dict:
    return {"progress/batch": step, **{k: step * 0.5 + j for j, k in enumerate(KEYS)}}


@pytest.fixture(params=["gcs", "s3"])
def bucket_run(request):
    """``(url, options, proxy)``: a new run on the emulator or moto, seen through a proxy."""
    server = request.getfixturevalue(f"{request.param}_server")
    proxy = FaultProxy(server.endpoint)
    url = f"{server.scheme}://{server.new_bucket()}/runs/{unique('run')}"
    yield url, server.storage_options(proxy.endpoint), proxy
    proxy.stop()


def _plain(url: str, options: dict, name: str) -> list[dict]:
    """The object as pandas reads it (no rllog join of segments)."""
    from rllog.storage import FsspecStorage

    storage = FsspecStorage(url, spill=False, **options)
    try:
        data = storage.fs.cat_file(f"{storage._root}/{name}")
    finally:
        storage.close()
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("late_row", [False, True], ids=["tail", "a-late-row-after-it"])
def test_resume_on_a_bucket_reads_the_rows_after_the_checkpoint_and_cuts_without_a_whole_download(
    bucket_run, late_row
):
    url, options, proxy = bucket_run
    with RunLogger(url, code_diff=False, index=False, **options) as logger:
        for s in range(ROWS):
            logger.log_metrics(s, _row(s))
            if s == CHECKPOINT - 1:
                logger.log_checkpoint("c", batch=CHECKPOINT, state_path="/c")
        if late_row:
            logger.log_metrics(7, {"eval/x": 1.0})  # a late evaluation of an earlier step: kept
    rows = _plain(url, options, "metrics.jsonl")
    total = sum(len(json.dumps(r, separators=(",", ":"))) + 1 for r in rows)
    moved = sum(len(json.dumps(r, separators=(",", ":"))) + 1 for r in rows if r["step"] >= CHECKPOINT)
    kept = total - moved
    assert total > 9e6 and kept > PIECE
    proxy.reset()
    with RunLogger(url, resume=True, code_diff=False, index=False, **options) as logger:
        assert logger.resume_state.batch == CHECKPOINT
    stats = proxy.stats
    biggest = max(n for _, _, n in stats.responses + stats.log)
    if url.startswith("s3://"):
        # the scan reads the rows after the checkpoint once, the cut copies the kept rows
        # server-side; the moved rows go up to the new superseded file, which close composes:
        # under S3's 5 MiB part it is fetched and sent whole once (S3 joins no smaller parts)
        assert stats.download_bytes <= 2.1 * moved + (1 << 20), [r for r in stats.responses if r[2] > 1000]
        assert stats.upload_bytes <= 2.1 * moved + (1 << 20), (stats.upload_bytes, moved)
        assert any("uploadId" in path or "partNumber" in path for _, path, _ in stats.log)
    else:
        # GCS: the kept rows are the checkpoint's snapshot, composed server-side; the rows
        # after it are read by the scan and by the snapshot's CRC-32C check
        assert stats.download_bytes <= 2.2 * moved + (1 << 20), (stats.download_bytes, kept, moved)
        assert stats.upload_bytes <= 1.1 * moved + (1 << 20), (stats.upload_bytes, kept, moved)
    assert biggest <= PIECE + (64 << 10), f"one request carried {biggest} bytes"
    # the plain object (what pandas.read_json reads) holds exactly the kept rows; the moved ones are aside
    want = [*range(CHECKPOINT), *([7] if late_row else [])]
    assert [r["step"] for r in _plain(url, options, "metrics.jsonl")] == want
    assert [r["step"] for r in _plain(url, options, "metrics.superseded.jsonl")] == list(
        range(CHECKPOINT, ROWS)
    )
    run = rllog.read_run(url, **options)
    assert run.metrics["step"].tolist() == list(range(CHECKPOINT))
    assert len(run.superseded) == ROWS - CHECKPOINT
