"""Metric columns straight from a metrics JSONL file, without a Python dict per row.

:func:`read_frame` parses the file with pyarrow's JSON reader (C++, multi-threaded,
reads ``NaN``/``Infinity``/``-Infinity`` tokens and ``null``) into Arrow columns and
converts them to a DataFrame: no list of row dicts is ever built, so memory stays near
the final DataFrame's and the time well under ``pandas.read_json(lines=True)``'s.

It only answers when the result is certainly what the row-by-row reader gives
(:func:`rllog._read.run._to_frame` on :class:`rllog._format.rows.StepResolver`'s kept
rows): pyarrow is installed, every line parses, every value is a number, bool, string
or null, every row has a numeric step and the steps strictly increase (one segment, no
merged or superseded rows), and no bool column has a gap (pandas fills a logged null
there differently from a missing key). Otherwise it returns None and the caller reads
rows.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rllog._format.jsonl import Readable

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_frame"]

#: bytes per ranged read, and pyarrow's parse block (a row longer than it falls back)
_BLOCK = 8 << 20


class _RangeFile(io.RawIOBase):
    """The first ``size`` bytes of ``name`` as a read-only file, in ranged reads."""

    def __init__(self, storage: Readable, name: str, size: int) -> None:
        self._storage, self._name, self._size, self._pos = storage, name, size, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int | None = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._storage.read_range(self._name, self._pos, end)
        self._pos += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def read_frame(
    storage: Readable, name: str, size: int, step_key: str | None, columns: list[str] | None = None
) -> pd.DataFrame | None:
    """The first ``size`` bytes of metrics file ``name`` as a DataFrame (step column first,
    then columns in first-logged order; only ``step_key`` and ``columns`` when given), or
    None when the fast path does not apply (see the module docstring).

    Raises:
        KeyError: a column of ``columns`` is not in the file.
        OSError: the storage failed.
    """
    if step_key is None or size == 0:
        return None
    try:
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
        import pyarrow.compute as pc  # type: ignore[import-untyped]  # no stubs
        import pyarrow.json as pj  # type: ignore[import-untyped]  # no stubs
    except ImportError:
        return None
    try:
        table = pj.read_json(
            _RangeFile(storage, name, size),
            read_options=pj.ReadOptions(block_size=_BLOCK),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # damage, a torn line, a value changing type, a row longer than a block
    if step_key not in table.column_names:
        return None
    step = table.column(step_key)
    if not (pa.types.is_integer(step.type) or pa.types.is_floating(step.type)) or step.null_count:
        return None
    if len(step) > 1 and not pc.all(pc.greater(step[1:], step[:-1])).as_py():
        return None  # repeated or decreasing steps (or NaN): the rows' rule decides
    for field in table.schema:
        t = field.type
        if not (
            pa.types.is_integer(t)
            or pa.types.is_floating(t)
            or pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_null(t)
            or (pa.types.is_boolean(t) and table.column(field.name).null_count == 0)
        ):
            return None  # nested values, or a bool column with gaps
    names = [step_key] + [c for c in table.column_names if c != step_key]
    if columns is not None:
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise KeyError(
                f"{storage.url}/{name}: no column {', '.join(map(repr, missing))}; it has {', '.join(names)}"
            )
        names = [step_key] + [c for c in columns if c != step_key]
    df = table.select(names).to_pandas()
    del table
    for c in df.columns:  # a column of nulls only is a float column of NaN
        if df[c].dtype == object and df[c].isna().all():
            df[c] = df[c].astype("float64")
    return df
