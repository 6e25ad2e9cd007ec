"""S3 appends as segment objects (rllog._storage.objectops.S3Ops) on moto: every row
readable at any moment, one plain object after close, flat cost per flush, a kill
between a segment and the compose, a stale writer's claim."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from servers import FaultProxy, unique

from rllog._storage.readonly import ReadOnlyStorage
from rllog.storage import FsspecStorage

ROW = b'{"step": %d, "reward": 0.%06d, "note": "%s"}\n'
PART = 4096  # moto accepts 256-byte parts (conftest); S3 needs 5 MiB


def small_parts(storage: FsspecStorage) -> FsspecStorage:
    storage._ops.min_part, storage._ops.chunk_max = PART, 3 * PART
    return storage


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
        for i, row in enumerate(rows):
            storage.append("metrics.jsonl", row)
            if i % 25 == 24:
                before = proxy.stats.requests
                storage.flush(durable=True)
                per_flush.append(proxy.stats.requests - before)
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
        storage.close()
        assert plain_get(storage) == b"".join(rows)
        assert storage.fs.find(f"{storage._root}/.rllog-parts") == []
        # uploaded: the file, plus the first chunk and the last piece once, plus request overhead
        assert proxy.stats.upload_bytes <= total + 2 * 3 * PART + 600 * len(per_flush)
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
    import json

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
