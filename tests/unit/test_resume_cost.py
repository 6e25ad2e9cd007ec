"""What a resume reads (issue 15): metrics.jsonl once at most, and only the rows logged
after the checkpoint when the record says where the file stood (``metrics_at``). Bytes
are counted where they leave the disk for Python (LocalStorage reads, ``os.pread``,
``os.preadv``); the timings live in benchmarks/bench_scale.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rllog import RunLogger
from rllog.storage import LocalStorage

KEYS = [f"k/{i}" for i in range(60)]


def _row(step: int) -> dict:
    return {"progress/batch": step, **{k: step * 0.5 + j for j, k in enumerate(KEYS)}}


def _foreign_run(path: Path, rows: int, batch: int) -> int:
    """Rows as json.dumps writes them and a record another tool wrote (no metrics_at)."""
    path.mkdir(parents=True)
    data = "".join(json.dumps({"step": s, **_row(s)}) + "\n" for s in range(rows)).encode()
    (path / "metrics.jsonl").write_bytes(data)
    (path / "checkpoints.jsonl").write_text(
        json.dumps({"name": "c", "batch": batch, "state_path": "/c"}) + "\n"
    )
    return len(data)


def _rllog_run(path: Path, rows: int, batch: int) -> tuple[int, int]:
    """The same rows logged by RunLogger, a checkpoint after row ``batch - 1``; returns
    (the file's size, its size when the checkpoint was taken)."""
    with RunLogger(path, code_diff=False, index=False) as logger:
        for s in range(rows):
            logger.log_metrics(s, _row(s))
            if s == batch - 1:
                logger.log_checkpoint("c", batch=batch, state_path="/c")
                at = (path / "metrics.jsonl").stat().st_size
    return (path / "metrics.jsonl").stat().st_size, at


@pytest.fixture
def bytes_read(monkeypatch) -> list[int]:
    """``[n]``: bytes read from local files by the storage and by ``os.pread(v)`` since the fixture."""
    counted = [0]
    real_pread, real_preadv = os.pread, os.preadv
    real_read, real_range = LocalStorage.read, LocalStorage.read_range

    def pread(fd, n, offset):
        data = real_pread(fd, n, offset)
        counted[0] += len(data)
        return data

    def preadv(fd, buffers, offset):
        n = real_preadv(fd, buffers, offset)
        counted[0] += n
        return n

    def read(self, name):
        data = real_read(self, name)
        counted[0] += len(data)
        return data

    def read_range(self, name, start, end=None):
        data = real_range(self, name, start, end)
        counted[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "preadv", preadv)
    monkeypatch.setattr(LocalStorage, "read", read)
    monkeypatch.setattr(LocalStorage, "read_range", read_range)
    return counted


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.mark.parametrize("moved", [0, 2500], ids=["nothing-moves", "tail-moves"])
def test_resume_reads_a_file_without_metrics_at_once(tmp_path, bytes_read, moved):
    """~25 MB written by another tool: the whole file is read, once (the old resume read it
    three times: damaged lines, the gap check, the moves)."""
    rows = 25_000
    size = _foreign_run(tmp_path / "run", rows, rows - moved)
    assert size > 18e6
    bytes_read[0] = 0
    with RunLogger(tmp_path / "run", resume=True, code_diff=False, index=False) as logger:
        assert logger.resume_state.batch == rows - moved
        read = bytes_read[0]
    assert read <= 1.1 * size, f"resume read {read / size:.2f}x the file"
    assert [r["step"] for r in _lines(tmp_path / "run" / "metrics.jsonl")] == list(range(rows - moved))
    steps = [r["step"] for r in _lines(tmp_path / "run" / "metrics.superseded.jsonl")]
    assert steps == list(range(rows - moved, rows))


@pytest.mark.parametrize("after", [0, 2500], ids=["checkpoint-at-the-end", "rows-after-it"])
def test_resume_of_an_rllog_run_reads_only_the_rows_after_the_checkpoint(tmp_path, bytes_read, after):
    """~20 MB logged by RunLogger: the record says where the file stood, so resume reads the
    rows after it (and the last line before it, to check the file still holds that prefix)."""
    rows = 25_000
    size, at = _rllog_run(tmp_path / "run", rows, rows - after)
    assert size > 15e6
    bytes_read[0] = 0
    with RunLogger(tmp_path / "run", resume=True, code_diff=False, index=False) as logger:
        assert logger.resume_state.batch == rows - after
        read = bytes_read[0]
    assert read <= 1.1 * (size - at) + (64 << 10), (
        f"resume read {read} bytes; {size - at} follow the checkpoint"
    )
    assert (tmp_path / "run" / "metrics.jsonl").stat().st_size == at
    assert [r["step"] for r in _lines(tmp_path / "run" / "metrics.jsonl")] == list(range(rows - after))
    steps = [r["step"] for r in _lines(tmp_path / "run" / "metrics.superseded.jsonl")]
    assert steps == list(range(rows - after, rows))


def test_a_record_whose_file_was_rewritten_since_reads_it_all(tmp_path):
    """``metrics_at`` is only trusted while the file still ends its prefix there: here the
    rows before the checkpoint were rewritten (another tool), so every row is read and
    every row at or past the point moves, as for a record without it."""
    run = tmp_path / "run"
    size, at = _rllog_run(run, 300, 200)
    rows = _lines(run / "metrics.jsonl")
    rows[150]["step"] = rows[150]["progress/batch"] = 250  # a row at the point, before the checkpoint
    (run / "metrics.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    with RunLogger(run, resume=True, code_diff=False, index=False):
        pass
    assert [r["step"] for r in _lines(run / "metrics.superseded.jsonl")] == [250, *range(200, 300)]
    assert [r["step"] for r in _lines(run / "metrics.jsonl")] == [s for s in range(200) if s != 150]


def test_a_file_shorter_than_the_record_says_is_a_gap(tmp_path):
    """Rows made durable before the record, gone at resume (power loss on a disk that lies
    about fsync): the record's size says so exactly, and the whole file is read."""
    run = tmp_path / "run"
    size, at = _rllog_run(run, 300, 200)
    data = (run / "metrics.jsonl").read_bytes()
    lines = data.splitlines(keepends=True)
    (run / "metrics.jsonl").write_bytes(b"".join(lines[:180]))
    with pytest.warns(RuntimeWarning, match=r"held \d+ bytes when the record was taken"):
        with RunLogger(run, resume=True, code_diff=False, index=False) as logger:
            pass
    assert any("the last row before it is at 179" in w for w in logger.warnings), logger.warnings
    assert [r["step"] for r in _lines(run / "metrics.jsonl")] == list(range(180))


def test_rows_kept_after_moved_ones_are_rewritten_after_the_kept_prefix(tmp_path, bytes_read):
    """A late row for an earlier step, logged after rows past the checkpoint: the file is
    rewritten (the prefix copied in the kernel, then the kept rows), reading only from the
    first moved row on."""
    run = tmp_path / "run"
    size, at = _rllog_run(run, 20_000, 18_000)
    late = json.dumps({"step": 5, "eval/x": 1.0}).encode() + b"\n"
    with open(run / "metrics.jsonl", "ab") as f:
        f.write(late)
    bytes_read[0] = 0
    with RunLogger(run, resume=True, code_diff=False, index=False):
        read = bytes_read[0]
    after = size + len(late) - at
    assert read <= 2.2 * after + (64 << 10), f"resume read {read} bytes; {after} follow the checkpoint"
    steps = [r["step"] for r in _lines(run / "metrics.jsonl")]
    assert steps == [*range(18_000), 5]
    assert [r["step"] for r in _lines(run / "metrics.superseded.jsonl")] == list(range(18_000, 20_000))
