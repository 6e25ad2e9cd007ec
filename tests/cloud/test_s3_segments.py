"""S3 appends as segment objects (rllog._storage.objectops.S3Ops) on moto: every row
readable at any moment, one plain object after close, flat cost per flush, a kill
between a segment and the compose, a stale writer's claim."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from servers import FaultProxy, unique

from rllog._storage.readonly import ReadOnlyStorage
from rllog.storage import FsspecStorage

ROW = b'{"step": %d, "reward": 0.%06d, "note": "%s"}\n'
PART = 4096  # moto accepts 256-byte parts (conftest); S3 needs 5 MiB


def small_parts(storage: FsspecStorage) -> FsspecStorage:
    storage._ops.min_part, storage._ops.chunk_max = PART, 3 * PART
    return storage


def object_bytes(proxy: FaultProxy, name: str = "metrics.jsonl") -> int:
    """Bytes of object data uploaded for ``name`` (PUT bodies: its segments, chunks,
    parts and the object), without request overhead (multipart and delete XML)."""
    return sum(n for method, path, n in proxy.stats.log if method == "PUT" and name in path)


def plain_get(storage: FsspecStorage, name: str = "metrics.jsonl") -> bytes:
    """The object itself, as pandas or ``aws s3 cp`` would read it (no rllog join)."""
    return storage.fs.cat_file(f"{storage._root}/{name}")


def test_every_row_is_readable_at_any_moment_and_close_leaves_one_plain_object(s3_server):
    proxy = FaultProxy(s3_server.endpoint)
    try:
        options = s3_server.storage_options(proxy.endpoint)
        url = f"s3://{s3_server.new_bucket()}/runs/{unique('run')}"
        storage = small_parts(FsspecStorage(url, spill=False, **options))
        reader = ReadOnlyStorage(url, **options)
        rows = [ROW % (i, i, b"x" * (i % 40)) for i in range(1500)]
        per_flush: list[int] = []
        fetched: list[int] = []  # response bytes per flush (list results, mostly)
        for i, row in enumerate(rows):
            storage.append("metrics.jsonl", row)
            if i % 25 == 24:
                before, got = proxy.stats.requests, proxy.stats.download_bytes
                storage.flush(durable=True)
                per_flush.append(proxy.stats.requests - before)
                fetched.append(proxy.stats.download_bytes - got)
                done = b"".join(rows[: i + 1])
                if i % 100 == 99:  # what a reader sees mid-run: every flushed row
                    assert reader.read("metrics.jsonl") == done
                    assert reader.size("metrics.jsonl") == len(done)
                    assert reader.read_range("metrics.jsonl", 50, 5000) == done[50:5000]
                    assert reader.list() == ["metrics.jsonl"]
                    # flat per flush: no object grows past a chunk (what a flush copies server-side)
                    sizes = storage.fs.du(f"{storage._root}/.rllog-parts", total=False).values()
                    assert max(sizes) <= 3 * PART + 25 * 80
                    assert not storage.fs.exists(f"{storage._root}/metrics.jsonl")
        total = sum(map(len, rows))
        assert total > 6 * 3 * PART  # many chunks sealed: the flat regime is exercised
        assert max(per_flush[len(per_flush) // 2 :]) <= max(per_flush[: len(per_flush) // 2])
        # flat per flush also in what its listing returns: sealed chunks are not listed again
        late, early = max(fetched[-10:]), max(fetched[len(fetched) // 4 : len(fetched) // 4 + 10])
        assert late <= early + 200, (early, late)
        storage.close()
        assert plain_get(storage) == b"".join(rows)
        assert storage.fs.find(f"{storage._root}/.rllog-parts") == []
        # uploaded: the file once, plus its first PART bytes once more (see the bound test below)
        assert object_bytes(proxy) == total + PART
    finally:
        proxy.stop()


def test_a_small_file_is_one_put_at_close(s3_server):
    url = f"s3://{s3_server.new_bucket()}/run"
    storage = FsspecStorage(url, spill=False, **s3_server.storage_options())
    rows = [ROW % (i, i, b"") for i in range(30)]
    for i, row in enumerate(rows):
        storage.append("metrics.jsonl", row)
        if i % 10 == 9:
            storage.flush(durable=True)
    assert storage.fs.find(f"{storage._root}/metrics.jsonl") == []  # segments only so far
    assert storage.read("metrics.jsonl") == b"".join(rows)
    storage.close()
    assert plain_get(storage) == b"".join(rows)


KILLED = textwrap.dedent(
    """
    import json, os, signal, sys
    from rllog.storage import FsspecStorage
    url, options, rows = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    storage = FsspecStorage(url, spill=False, **options)
    storage._ops.min_part, storage._ops.chunk_max = 4096, 3 * 4096
    for i in range(rows):
        storage.append("metrics.jsonl", b'{"step": %d}\\n' % i)
        if i % 50 == 49:
            storage.flush(durable=True)
    storage.flush(durable=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no close: segments and chunks stay uncomposed
    """
)


def test_a_kill_before_compose_loses_nothing_and_the_next_close_composes(s3_server):
    url = f"s3://{s3_server.new_bucket()}/run"
    options = s3_server.storage_options()
    done = subprocess.run(
        [sys.executable, "-c", KILLED, url, json.dumps(options), "900"], capture_output=True
    )
    assert done.returncode == -9, done.stderr
    rows = b"".join(b'{"step": %d}\n' % i for i in range(900))
    reader = ReadOnlyStorage(url, **options)
    assert reader.read("metrics.jsonl") == rows  # from the segments the dead writer left
    assert reader.list() == ["metrics.jsonl"]
    nxt = small_parts(FsspecStorage(url, spill=False, **options))
    nxt.append("metrics.jsonl", b'{"step": 900}\n')
    nxt.close()
    assert plain_get(nxt) == rows + b'{"step": 900}\n'
    assert nxt.fs.find(f"{nxt._root}/.rllog-parts") == []


def test_a_writer_with_an_old_view_does_not_overwrite_rows_composed_meanwhile(s3_server):
    url = f"s3://{s3_server.new_bucket()}/run"
    options = s3_server.storage_options()
    first = small_parts(FsspecStorage(url, spill=False, **options))
    first.append("metrics.jsonl", b"1\n")
    first.flush(durable=True)
    second = small_parts(FsspecStorage(url, spill=False, **options))
    second.append("metrics.jsonl", b"2\n")
    second.close()  # composes 1, 2 and deletes the segment at byte 2 `first` last saw free
    first.append("metrics.jsonl", b"3\n")
    first.close()
    assert plain_get(first) == b"1\n2\n3\n"


def test_a_12_mib_run_uploads_its_bytes_once_plus_its_first_5_mib_once(s3_server):
    """The bound, with S3's real 5 MiB part minimum: S3 joins objects server-side only as
    parts of a multipart upload, each but the last >= 5 MiB. A file that grows by
    flushes smaller than that has its first 5 MiB in no object S3 can copy a 5 MiB part
    from, so they are uploaded a second time (once); every later byte is uploaded once,
    as a segment, and copied server-side from there on. pandas reads the plain object
    after close; rllog's reader reads every flushed row mid-run."""
    import pandas as pd

    from rllog import read_run
    from rllog._storage.objectops import S3_MIN_PART

    proxy = FaultProxy(s3_server.endpoint)
    try:
        url = f"s3://{s3_server.new_bucket()}/runs/{unique('run')}"
        storage = FsspecStorage(
            url, spill=False, flush_interval=3600, **s3_server.storage_options(proxy.endpoint)
        )
        pad = "x" * 440
        row = b'{"step": %d, "reward": %.6f, "pad": "%s"}\n'
        step, total, flushes = 0, 0, 0
        while total < 12 * 2**20:
            batch = b"".join(row % (step + i, (step + i) / 7, pad.encode()) for i in range(128))  # ~64 KiB
            storage.append("metrics.jsonl", batch)
            step, total, flushes = step + 128, total + len(batch), flushes + 1
            storage.flush(durable=True)
            if flushes in (40, 90, 150):  # below 5 MiB (segments), one chunk, one chunk and segments
                seen = read_run(url, **s3_server.storage_options()).metrics
                assert seen["step"].tolist() == list(range(step))
        storage.close()
        assert object_bytes(proxy) == total + S3_MIN_PART  # exactly: no byte beyond the bound
        overhead = proxy.stats.upload_bytes - object_bytes(proxy)  # multipart and delete XML
        assert overhead <= 600 * flushes
        frame = pd.read_json(f"{url}/metrics.jsonl", lines=True, storage_options=s3_server.storage_options())
        assert frame["step"].tolist() == list(range(step))
        assert frame["reward"].iloc[-1] == pytest.approx((step - 1) / 7, abs=1e-6)
        assert storage.fs.find(f"{storage._root}/.rllog-parts") == []
    finally:
        proxy.stop()


def test_two_writers_folding_chunks_at_once_keep_every_row(s3_server):
    """Two handles (two writers) append to one file past many sealed chunks, each
    listing only from its last chunk on and often claiming, with its old view, an
    offset the other's segment held before it was folded away: every row of each, in
    order, once."""
    import threading

    proxy = FaultProxy(s3_server.endpoint)  # conditional PUTs one at a time, as S3 does and moto does not
    url = f"s3://{s3_server.new_bucket()}/run"
    options = s3_server.storage_options(proxy.endpoint)
    writers = [small_parts(FsspecStorage(url, spill=False, flush_interval=3600, **options)) for _ in range(2)]

    def write(tag: int) -> None:
        for i in range(600):
            writers[tag].append("metrics.jsonl", b'{"w": %d, "i": %d, "pad": "%s"}\n' % (tag, i, b"y" * 100))
            if i % (5 + 2 * tag) == 4 + 2 * tag:  # segments of unequal sizes
                writers[tag].flush(durable=True)
        writers[tag].flush(durable=True)

    threads = [threading.Thread(target=write, args=(tag,)) for tag in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    mid = ReadOnlyStorage(url, **options).read("metrics.jsonl")
    for writer in writers:
        writer.close()
    proxy.stop()
    data = plain_get(writers[0])
    assert data == mid
    rows = [json.loads(line) for line in data.splitlines()]
    for tag in range(2):
        assert [r["i"] for r in rows if r["w"] == tag] == list(range(600))
    assert len(data) > 10 * 3 * PART  # many chunks sealed while both wrote


@pytest.mark.parametrize("a2", [b"a2\n", b"a2" + b"." * 200 + b"\n"], ids=["grown", "sealed"])
def test_a_writer_with_an_old_view_claiming_a_folded_offset_with_more_bytes_loses_nothing(s3_server, a2):
    """A data segment is folded into a chunk (the chunk grows, or a new chunk starts
    with it) and deleted, so its offset is free again; a writer that has not listed
    since claims it with a longer segment. That claim is void (a chunk already holds
    the offset): the writer appends at the end instead, and no reader sees the void
    segment."""
    url = f"s3://{s3_server.new_bucket()}/run"
    options = s3_server.storage_options()
    a = small_parts(FsspecStorage(url, spill=False, **options))
    a.append("metrics.jsonl", b"a" * 5000 + b"\n")
    a.flush(durable=True)  # past PART: a chunk, and every later segment is folded into it
    a.append("metrics.jsonl", b"a" * 7100 + b"\n")
    a.flush(durable=True)  # the chunk grows to 12,102 bytes, 186 short of chunk_max
    b = small_parts(FsspecStorage(url, spill=False, **options))
    b.append("metrics.jsonl", b"b1\n")
    b.flush(durable=True)  # b's view: the file ends after b1
    a.append("metrics.jsonl", a2)
    a.flush(durable=True)  # claimed at that end and folded at once: the offset is free again
    b2 = b"b2 is longer" + b"!" * len(a2) + b"\n"
    b.append("metrics.jsonl", b2)
    b.flush(durable=True)  # b's old view: it claims the free offset
    rows = b"a" * 5000 + b"\n" + b"a" * 7100 + b"\nb1\n" + a2 + b2
    assert ReadOnlyStorage(url, **options).read("metrics.jsonl") == rows
    b.close()
    a.close()
    assert plain_get(a) == rows
