"""Runs of any length: close, resume and the reader's costs do not grow with the run
(issue 15). Small instances here; the big sizes live in benchmarks/bench_scale.py."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

import rllog._run
import rllog.index
from rllog import RunLogger
from rllog._write import resume


def _metrics_file(path: Path, rows: int, *, every: int = 0) -> int:
    """Write ``rows`` rllog-like rows (~100 bytes each) to path/metrics.jsonl; with
    ``every``, each ``every``-th row logs no step (kept in place on resume). Returns bytes."""
    pad = "x" * 60
    lines = []
    for s in range(rows):
        if every and s % every == 0:
            lines.append(f'{{"note": "{pad}"}}\n')
        else:
            lines.append(f'{{"step": {s}, "loss": {s * 0.5}, "pad": "{pad}"}}\n')
    data = "".join(lines).encode()
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_bytes(data)
    return len(data)


def _peak_of(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("every", [0, 1000], ids=["tail", "interleaved"])
def test_resume_streams_the_metrics_file_in_bounded_memory(tmp_path, monkeypatch, every):
    """10 MB of rows, the last half moved: peak Python memory stays under 4 MiB (the old
    whole-file pass held the file and its lines, > 20 MB), and every row is accounted for."""
    monkeypatch.setattr(resume, "_CHUNK", 256 << 10, raising=False)
    rows = 100_000
    size = _metrics_file(tmp_path, rows, every=every)
    assert size > 10e6
    notes: list[str] = []
    peak = _peak_of(
        lambda: resume.supersede(
            rllog.storage.LocalStorage(tmp_path), rows // 2, lambda m, **k: notes.append(m)
        )
    )
    assert peak < 4 << 20, f"resume peaked at {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB file"
    kept = (tmp_path / "metrics.jsonl").read_bytes().splitlines()
    moved = (tmp_path / "metrics.superseded.jsonl").read_bytes().splitlines()
    steps_moved = [json.loads(x)["step"] for x in moved]
    assert steps_moved == [s for s in range(rows // 2, rows) if not (every and s % every == 0)]
    assert len(kept) + len(moved) == rows
    assert all(json.loads(x).get("step", 0) < rows // 2 for x in kept)
    assert notes and "moved" in notes[-1]


def test_resume_keeps_a_last_line_without_newline_and_moves_nothing_when_all_stay(tmp_path):
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 0}\n{"step": 1}\n\n{"step": 2}')
    resume.supersede(rllog.storage.LocalStorage(tmp_path), 5, lambda m, **k: None)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n\n{"step": 2}'
    assert not (tmp_path / "metrics.superseded.jsonl").exists()
    resume.supersede(rllog.storage.LocalStorage(tmp_path), 2, lambda m, **k: None)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step": 0}\n{"step": 1}\n\n'
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == b'{"step": 2}\n'


@pytest.mark.slow
def test_close_of_a_long_run_hands_the_index_to_a_process_of_its_own(tmp_path, monkeypatch):
    """Past INLINE_INDEX_BYTES close neither reads the run nor renders the page in the
    training process; the detached job writes a page that counts every row."""
    monkeypatch.setattr(rllog._run, "INLINE_INDEX_BYTES", 1000, raising=False)
    calls: list[object] = []
    monkeypatch.setattr(rllog.index, "write_index", lambda *a, **k: calls.append(a))
    logger = RunLogger(tmp_path, code_diff=False)
    for s in range(50):
        logger.log_metrics(s, {"loss": 1.0 / (s + 1), "env/all/reward/total": s * 0.1})
    logger.close()
    assert calls == [] and logger.warnings == []
    assert logger.index_url == f"{tmp_path}/index.html"
    page = tmp_path / "index.html"
    deadline = time.monotonic() + 120
    while not page.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "<li>50 rows</li>" in page.read_text()
