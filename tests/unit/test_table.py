"""Metric columns (rllog._read.table.MetricTable, Run.table) equal the rows cell by cell, read
whole or followed while the file grows, and hold no dict per row."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from realdata import REALDATA

from rllog import RunLogger, read_run
from rllog._format.jsonl import JsonlTail
from rllog._format.rows import StepResolver
from rllog._read import stream
from rllog._read.table import Columns, MetricTable
from rllog.storage import LocalStorage


def _expected(rows: list[dict]) -> dict:
    """Columns straight from the rows: the oracle (a number is its float, anything else NaN)."""
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(row))
    out = {}
    for k in keys:
        values = [float(r[k]) if type(r.get(k)) in (int, float) else math.nan for r in rows]
        bad = [i for i, r in enumerate(rows) if type(r.get(k)) is float and not math.isfinite(r[k])]
        numeric = any(type(r.get(k)) in (int, float) for r in rows)
        out[k] = (np.array(values, dtype=float), bad, numeric)
    return out


def _check(table: MetricTable, rows: list[dict]) -> None:
    want = _expected(rows)
    assert table.standing == len(rows)
    assert set(table.numeric) == {k for k, (_, _, numeric) in want.items() if numeric}
    for k, (values, bad, _) in want.items():
        got = table.column(k)
        assert got.tobytes() == values.tobytes() or np.array_equal(got, values, equal_nan=True), k
        assert table.nonfinite(k).tolist() == bad, k


def test_columns_match_the_rows_cell_by_cell():
    nan, inf = float("nan"), float("inf")
    rows = [
        {"step": 0, "a": 1.0, "b": "text"},
        {"step": 1, "a": nan, "b": 2},
        {"b": 3.5, "step": 2, "a": None},  # same keys, another order
        {"step": 3, "c": True, "a": -inf},
        {"step": 4, "a": [1], "d": None},
    ]
    cols = Columns()
    cols.append(rows)
    assert list(cols.keys) == ["step", "a", "b", "c", "d"]
    assert [k for k in cols.keys if cols.has_number(k)] == ["step", "a", "b"]  # c only a bool, d only null
    np.testing.assert_array_equal(cols.column("a"), [1.0, nan, nan, -inf, nan])
    assert cols.nonfinite("a").tolist() == [1, 3]  # null and a list are not a logged NaN
    np.testing.assert_array_equal(cols.column("b"), [nan, 2.0, 3.5, nan, nan])
    assert cols.nonfinite("b").tolist() == []


_row = st.one_of(
    st.builds(
        lambda step, keys, vals: {"step": step, **dict(zip(keys, vals, strict=False))},
        st.integers(0, 12),
        st.lists(st.sampled_from(["a", "b", "test/x"]), min_size=1, max_size=3, unique=True),
        st.lists(
            st.sampled_from([0.0, 1.0, 2.5, 7, math.nan, math.inf, None, "s", True]), min_size=3, max_size=3
        ),
    ),
    st.builds(lambda step: {"step": step, "a": 1.0, "b": 2.0, "test/x": 3.0}, st.integers(0, 30)),
    st.just({"note": "no step", "a": 5.0}),
    st.just("garbage{"),  # a damaged line
    st.just(""),  # a blank line
    # a run of plain rows after the highest step so far (most of a real file): see _rows
    st.builds(lambda n, v: ("plain", n, v), st.integers(1, 12), st.floats(-9, 9)),
)


def _rows(drawn: list) -> list:
    out, top = [], 0
    for r in drawn:
        if isinstance(r, tuple):
            for i in range(r[1]):
                top += 1
                out.append({"step": top + 12, "a": r[2] + i, "c": 2 * r[2]})
        else:
            out.append(r)
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(_row, max_size=40),
    cuts=st.lists(st.integers(0, 2000), max_size=4),
    chunk=st.sampled_from([64, 400, 1 << 20]),
)
# read at load up to a complete row without its newline (taken, as Run.rows takes it), then grown
@example(rows=[("plain", 3, 1.5), *[{"step": 0, "a": 0.0}] * 3], cuts=[120], chunk=64)
def test_table_followed_while_written_equals_the_rows(tmp_path, monkeypatch, rows, cuts, chunk):
    """Any mix of repeats, late rows, restarts, unstepped and damaged lines, read in chunks
    (small enough to cut lines, or holding several rows: the struct path) and polled while
    the file grows (cut anywhere, even inside a line): the same columns as the rows read at
    the end, and the same counts."""
    monkeypatch.setattr(stream, "CHUNK_BYTES", chunk)
    rows = _rows(rows)
    data = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode()
    path = tmp_path / "m.jsonl"
    storage = LocalStorage(tmp_path)
    marks = sorted({min(c, len(data)) for c in cuts})
    path.write_bytes(data[: marks[0]] if marks else data)
    table = MetricTable(storage, "m.jsonl", "step", storage.size("m.jsonl"))
    for m in [*marks[1:], len(data)]:
        path.write_bytes(data[:m])
        table.poll()
    assert not table.rewritten
    resolver = StepResolver("step")
    for line, row in JsonlTail(storage, "m.jsonl").poll(final=True):
        resolver.add(line, row)
    _check(table, resolver.kept + [r for _, r in resolver.unstepped])
    assert (table.added, table.merged, table.superseded) == (
        resolver.added,
        resolver.merged,
        len(resolver.superseded),
    )
    assert table.restarts == resolver.restarts
    # the superseded rows' points: those of the rows the resolver set aside (merged per step)
    sup = table.superseded_rows
    got = sorted(zip(sup.column("step").tolist(), sup.column("a").tolist(), strict=True))
    want = {}
    for _, row in resolver.superseded:
        if type(row.get("a")) in (int, float) and not math.isnan(row["a"]):
            want.setdefault(float(row["step"]), set()).add(float(row["a"]))
    assert {s for s, v in got if not math.isnan(v)} == set(want)


def test_every_realdata_metrics_file_equals_its_rows():
    files = sorted(REALDATA.rglob("*.jsonl"))
    assert files
    for path in files:
        run = read_run(path)
        table = read_run(path).table()
        _check(table, run.rows)
        assert table.restarts == run.restarts and table.merged == run.merged_rows


def test_a_big_run_is_read_as_columns_without_a_dict_per_row(tmp_path):
    """20k rows x 50 metrics: what stays held is the columns (8 bytes a cell) and the row
    positions, not 1M Python floats in 20k dicts; the peak is one chunk over that."""
    import tracemalloc

    keys = [f"m{j}" for j in range(50)]
    with open(tmp_path / "metrics.jsonl", "w") as f:
        for s in range(20_000):
            f.write(json.dumps({"step": s, **{k: math.sin(s + j) for j, k in enumerate(keys)}}) + "\n")
    tracemalloc.start()
    run = read_run(tmp_path)
    table = run.table()
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    cells = 20_000 * 51 * 8
    assert table.standing == 20_000 and len(table.numeric) == 51
    assert cells <= table.nbytes() < cells * 1.3 + 1e6  # the columns, with their room to grow, and positions
    assert held < cells * 1.5 + 4e6, held  # the rows as dicts would hold ~30 MB more
    assert peak < held + 12e6, peak
    assert table.column("m3")[7] == math.sin(7 + 3)


def test_refresh_table_reads_only_new_bytes_and_notices_a_rewrite(tmp_path):
    with RunLogger(tmp_path / "r", code_diff=False, index=False) as lg:
        for s in range(5):
            lg.log_metrics(s, {"loss": float(s)})
    run = read_run(tmp_path / "r")
    table = run.table()
    assert table.column("loss").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    metrics = tmp_path / "r" / "metrics.jsonl"
    reads: list[tuple[int, int]] = []
    real = type(run.storage).read_range

    def spy(self, name, start, end=None):
        if name == "metrics.jsonl":
            reads.append((start, end))
        return real(self, name, start, end)

    size = metrics.stat().st_size
    with open(metrics, "a") as f:
        f.write('{"step": 5, "loss": 5.0}\n{"step": 6, "lo')  # the second row is being written
    type(run.storage).read_range = spy
    try:
        assert run.refresh_table() is True
    finally:
        type(run.storage).read_range = real
    assert run.table().column("loss").tolist()[-1] == 5.0 and run.table().standing == 6
    assert all(start >= size - 256 for start, _ in reads if start), (
        reads
    )  # the new bytes (and the last read ones)
    with open(metrics, "a") as f:
        f.write('ss": 6.0}\n')
    assert run.refresh_table() is True and run.table().column("loss").tolist()[-1] == 6.0
    assert run.refresh_table() is False
    metrics.write_text('{"step": 0, "loss": -1.0}\n')  # replaced by a shorter file
    assert run.refresh_table() is True
    assert run.table().column("loss").tolist() == [-1.0] and any("rewritten" in w for w in run.warnings)


def test_a_bucket_run_is_read_in_few_requests():
    """On a bucket each ranged read is a request: a 6 MB metrics file takes 2, not 6 (one per chunk)."""
    import uuid

    from rllog.storage import open_storage

    storage = open_storage(f"memory://table-{uuid.uuid4().hex}")
    rows = "".join(json.dumps({"step": s, "loss": s / 7, "pad": "x" * 200}) + "\n" for s in range(25_000))
    storage.write("metrics.jsonl", rows.encode())
    reads = []
    real = storage.read_range

    def spy(name, start, end=None):
        reads.append((name, start, end))
        return real(name, start, end)

    storage.read_range = spy
    table = MetricTable(storage, "metrics.jsonl", "step", storage.size("metrics.jsonl"))
    assert table.standing == 25_000 and table.column("loss")[700] == 100.0
    assert len(reads) <= 3, reads  # a size hint of the first MiB, then 8 MiB windows
