"""The columnar metrics reader (rllog._read.columnar) gives exactly the row-by-row frame,
whatever pieces the file is cut into, or declines (None) and the rows decide."""

from __future__ import annotations

import json
import math
from pathlib import Path
from unittest import mock

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllog import read_run
from rllog._read import columnar
from rllog._read.run import _to_frame

pytest.importorskip("pyarrow")

_VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.booleans(),
    st.sampled_from(["", "ok", "2024-01-02", "2024-01-02T03:04:05", 'é \\ " x', "1.5"]),
    st.none(),
)
_KEYS = ["a", "b/c", "d", "é", "t"]


def _columnar(path: Path, columns: list[str] | None = None) -> pd.DataFrame | None:
    run = read_run(path)
    return columnar.read_frame(run.storage, run.metrics_name, run._size_at_load, run.step_key, columns)


def _by_rows(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    run = read_run(path)
    df = _to_frame(run.rows, run.step_key)
    return df if columns is None else df[[run.step_key] + [c for c in columns if c != run.step_key]]


def _write(path: Path, rows: list[dict]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


@st.composite
def _runs(draw: st.DrawFn) -> list[dict]:
    """Rows with increasing steps (now and then a float step) and keys that come and go,
    each key keeping one kind of value most of the time."""
    kinds = {k: draw(_VALUES) for k in _KEYS}  # a typical value per key
    rows = []
    step = 0
    for _ in range(draw(st.integers(1, 25))):
        step += draw(st.sampled_from([1, 1, 1, 2]))
        row: dict = {"step": step + 0.5 if draw(st.integers(0, 30)) == 0 else step}
        for k in _KEYS:
            choice = draw(st.integers(0, 29))
            if choice < 20:
                v = kinds[k]
                row[k] = type(v)(draw(st.integers(0, 9))) if type(v) in (int, float) else v
            elif choice < 25:
                pass  # key missing in this row
            elif choice < 28:
                row[k] = None
            else:
                row[k] = draw(_VALUES)
        rows.append(row)
    return rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=_runs(),
    read=st.sampled_from([64, 300, 1 << 20]),
    piece=st.sampled_from([64, 200, 1 << 20]),
    data=st.data(),
)
def test_the_columnar_frame_is_the_row_frame(tmp_path_factory, rows, read, piece, data):
    path = tmp_path_factory.mktemp("run")
    _write(path, rows)
    present = sorted({k for r in rows for k in r} - {"step"})
    columns = data.draw(st.none() | st.lists(st.sampled_from(present), unique=True) if present else st.none())
    with mock.patch.object(columnar, "_READ", read), mock.patch.object(columnar, "_PIECE", piece):
        got = _columnar(path, columns)
    if got is not None:
        pd.testing.assert_frame_equal(got, _by_rows(path, columns))


def test_keys_that_change_between_pieces(tmp_path):
    """Keys first logged late, null then strings, ints then floats, date-like strings
    and the NaN/Infinity tokens, in pieces of a few rows: read column by column, equal to
    the rows, whole and with ``columns=``."""
    rows = []
    for s in range(300):
        row: dict = {"step": s, "loss": s if s < 150 else s + 0.5, "nan": math.nan, "inf": -math.inf}
        row["late"] = s * 2 if s >= 100 else None
        row["when"] = f"2024-01-{1 + s % 28:02d}" if s % 7 else None
        if s > 200:
            row["eval/acc"] = s / 300
        row["done"] = s % 3 == 0
        rows.append(row)
    _write(tmp_path, rows)
    for piece in (150, 1000, 1 << 20):
        with mock.patch.object(columnar, "_PIECE", piece):
            df = _columnar(tmp_path)
            assert df is not None
            pd.testing.assert_frame_equal(df, _by_rows(tmp_path))
            for columns in (["when", "loss"], ["eval/acc"], ["late", "done", "inf"]):
                part = _columnar(tmp_path, columns)
                assert part is not None and list(part.columns) == ["step", *columns]
                pd.testing.assert_frame_equal(part, _by_rows(tmp_path, columns))
    assert df["loss"].dtype == "float64" and df["done"].dtype == bool
    assert math.isnan(df["nan"][0]) and df["inf"][0] == -math.inf
    assert df["when"][6] == "2024-01-07" and pd.isna(df["when"][0])
    assert df["eval/acc"].isna().sum() == 201


@pytest.mark.parametrize(
    "lines",
    [
        ['{"step": 0, "a": 1}', '{"step": 0, "a": 2}'],  # a repeated step
        ['{"step": 1, "a": 1}', '{"step": 0, "a": 2}'],  # a restart
        ['{"step": 0, "a": 1}', '{"a": 2}'],  # a row without step
        ['{"step": 0, "a": 1}', '{"step": 1, "a": "x"}'],  # numbers and strings
        ['{"step": 0, "a": true}', '{"step": 1}'],  # a bool column with a gap
        ['{"step": 0, "a": {"b": 1}}', '{"step": 1, "a": {"b": 2}}'],  # nested values
        ['{"step": 0, "a": 1}', '{"step": 1, "a": 2'],  # a torn last line
        ['{"step": 0, "a": 1}', "garbage", '{"step": 2, "a": 3}'],  # a damaged line
    ],
)
def test_declines_what_the_rows_decide(tmp_path, lines):
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + ("\n" if lines[-1].endswith("}") else ""))
    for piece in (16, 1 << 20):
        with mock.patch.object(columnar, "_READ", piece), mock.patch.object(columnar, "_PIECE", piece):
            assert _columnar(tmp_path) is None
            assert _columnar(tmp_path, ["a"]) is None


def test_columns_never_seen(tmp_path):
    """A key named nowhere in the file raises KeyError at once; a name that is in the file
    but read only as nulls (or inside a string) leaves it to the rows."""
    _write(tmp_path, [{"step": s, "a": 1.0, "note": "x" if s else "ghost", "n": None} for s in range(50)])
    with mock.patch.object(columnar, "_PIECE", 100):
        with pytest.raises(KeyError, match="no column 'nope'.*first rows have step, a, note, n"):
            _columnar(tmp_path, ["a", "nope"])
        assert _columnar(tmp_path, ["ghost"]) is None
        df = _columnar(tmp_path, ["n"])  # the first piece saw the key: a column of NaN
        assert df is not None and df["n"].isna().all() and df["n"].dtype == "float64"
    with pytest.raises(KeyError, match="no column 'ghost'"):
        _ = read_run(tmp_path, columns=["ghost"]).metrics
