"""Metric columns straight from a metrics JSONL file, without a Python dict per row.

:func:`read_frame` reads the file in ranged reads of :data:`_READ` bytes, cuts them at
line ends into pieces of about :data:`_PIECE` bytes, parses each piece with pyarrow's
JSON reader (C++; :data:`_AHEAD` pieces at a time on worker threads; reads
``NaN``/``Infinity``/``-Infinity`` tokens and ``null``) and copies its columns into numpy
arrays with room for the whole file, so the peak memory is the final DataFrame's plus a
few MiB (pieces in flight; ``benchmarks/bench_frame.py``: 1.1x the DataFrame at 100k rows
x 100 keys), and the time well under ``pandas.read_json(lines=True)``'s (~0.3x). With
``columns=`` pyarrow is given the types of the keys asked for (learnt from the first
piece; a piece where one does not fit is parsed again inferring them) and skips every
other key: those are never materialised.

It only answers when the result is certainly what the row-by-row reader gives
(:func:`rllog._read.run._to_frame` on :class:`rllog._format.rows.StepResolver`'s kept
rows): pyarrow is installed, every line parses, every value is a number, bool, string
or null, every row has a numeric step and the steps strictly increase (one segment, no
merged or superseded rows), no column mixes strings, numbers and bools, and no bool
column has a gap (pandas fills a logged null there differently from a missing key).
Otherwise it returns None and the caller reads rows.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from rllog._format.jsonl import Readable

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["read_frame"]

#: bytes per ranged read (a row longer than it makes the read longer)
_READ = 1 << 20
#: bytes parsed as one piece (a row longer than it makes its piece longer)
_PIECE = 512 << 10
#: pieces parsed on worker threads while the oldest is copied into the columns
_AHEAD = 2


def _pool() -> Any:
    """The Arrow memory pool for everything read here: malloc's, whose freed pieces are
    reused for the next (pyarrow's default, mimalloc, keeps ~10 MiB more resident)."""
    import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs

    return pa.system_memory_pool()


_KINDS: dict[Any, str] = {}


def _kind(t: Any) -> str:
    """What Arrow type ``t`` holds: "null", "number", "bool", "text" or "other"."""
    kind = _KINDS.get(t)
    if kind is None:
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs

        is_ = pa.types
        kind = _KINDS[t] = (
            "null"
            if is_.is_null(t)
            else "number"
            if is_.is_integer(t) or is_.is_floating(t)
            else "bool"
            if is_.is_boolean(t)
            else "text"
            if is_.is_string(t)
            else "other"
        )
    return kind


class _NotClean(Exception):
    """The fast path does not apply (see the module docstring): the caller reads rows."""


def _pieces(storage: Readable, name: str, size: int) -> Iterator[memoryview]:
    """The first ``size`` bytes of ``name`` in pieces of about :data:`_PIECE` bytes, each
    ending at a line end (the last one at ``size``), sliced (not copied) from ranged reads
    of :data:`_READ` bytes; the next read starts at the last line end, so a line cut by a
    read is read twice."""
    pos, want = 0, _READ
    while pos < size:
        data = storage.read_range(name, pos, min(size, pos + want))
        if not data:
            raise _NotClean  # the file shrank under us
        end = len(data) if pos + len(data) >= size else data.rfind(b"\n") + 1
        if not end:
            want *= 2  # a row longer than the read
            continue
        view, start = memoryview(data), 0
        while start < end:
            cut = end if end - start <= _PIECE else data.rfind(b"\n", start, start + _PIECE) + 1
            if cut <= start:  # a row longer than a piece
                cut = data.find(b"\n", start + _PIECE, end) + 1 or end
            yield view[start:cut]
            start = cut
        pos, want = pos + end, _READ


class _Columns:
    """The output columns, filled piece by piece: numbers and bools in numpy arrays with
    room for the whole file (grown in place when the estimate was short), strings as
    Arrow arrays (one per piece), and the names of columns that held only nulls so far
    (NaN arrays)."""

    def __init__(self, step_key: str) -> None:
        self.step_key = step_key
        self.rows = 0  # rows filled
        self.room = 0  # rows every numpy array has room for
        self.order: list[str] = []  # keys in first-logged order
        self.arrays: dict[str, np.ndarray] = {}
        self.texts: dict[str, list[Any]] = {}  # key -> pyarrow string arrays, rows in order
        self.null_only: set[str] = set()  # keys in `arrays` that held only nulls so far

    def add(self, table: Any, estimate: int) -> None:
        """Append the rows of ``table`` (one parsed piece); ``estimate``: rows the file
        likely has (room reserved at once; untouched room costs no memory).

        Raises:
            _NotClean: see the module docstring.
        """
        import numpy as np
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs

        n = table.num_rows
        if n == 0:
            return
        i = table.schema.get_field_index(self.step_key)
        if i < 0 or _kind(table.schema.types[i]) != "number" or table.column(i).null_count:
            raise _NotClean  # a row with no step, or a step that is no number
        start, end = self.rows, self.rows + n
        if end > self.room:
            self.room = max(end, estimate, self.room * 5 // 4)
            for a in self.arrays.values():
                a.resize(self.room, refcheck=False)  # in place (realloc): no second copy held
        names = table.schema.names
        for key, t, col in zip(names, table.schema.types, table.columns, strict=True):
            if key not in self.arrays and key not in self.texts:
                self.order.append(key)
                self._new_array(key, np.float64, start)
                self.null_only.add(key)
            kind = _kind(t)
            if col.null_count == n or kind == "null":  # only nulls, or a declared key not here
                self._missing(key, start, end)
                continue
            values = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks(_pool())
            if kind == "text":
                if key not in self.texts:
                    if key not in self.null_only:
                        raise _NotClean  # numbers or bools and strings in one column
                    self.null_only.discard(key)
                    del self.arrays[key]
                    self.texts[key] = [pa.nulls(start, pa.string(), memory_pool=_pool())] if start else []
                self.texts[key].append(values)
            elif kind in ("number", "bool"):
                if key in self.texts:
                    raise _NotClean  # strings and numbers in one column
                if kind == "bool" and (col.null_count or (start and key in self.null_only)):
                    raise _NotClean  # a bool column with a gap
                numbers = values.to_numpy(zero_copy_only=False)  # nulls become NaN (ints: floats)
                if key in self.null_only:
                    self.null_only.discard(key)
                    if not start:  # the key's first rows: they give the column's dtype
                        self.arrays[key] = np.empty(self.room, numbers.dtype)
                out = self.arrays[key]
                if (out.dtype == np.bool_) != (numbers.dtype == np.bool_):
                    raise _NotClean  # bools and numbers in one column
                if out.dtype == np.int64 and numbers.dtype != np.int64:
                    out = self.arrays[key] = out.astype(np.float64)
                out[start:end] = numbers
            else:
                raise _NotClean  # nested values, or strings pyarrow read as timestamps
        seen = set(names)
        for key in self.order:
            if key not in seen:
                self._missing(key, start, end)
        steps = self.arrays[self.step_key][start - bool(start) : end]  # with the previous piece's last
        if not (steps[1:] > steps[:-1]).all() or (steps.dtype.kind == "f" and np.isnan(steps[-1])):
            raise _NotClean  # repeated or decreasing steps (NaN compares false): the rows' rule decides
        self.rows = end

    def _new_array(self, key: str, dtype: Any, start: int) -> None:
        import numpy as np

        a = self.arrays[key] = np.empty(self.room, dtype)
        a[:start] = np.nan  # the rows before the key first appears

    def _missing(self, key: str, start: int, end: int) -> None:
        """Rows ``start:end`` have no value (or null) for ``key``."""
        import numpy as np
        import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

        if key in self.texts:
            self.texts[key].append(pa.nulls(end - start, pa.string(), memory_pool=_pool()))
            return
        out = self.arrays[key]
        if out.dtype == np.bool_:
            raise _NotClean  # a bool column with a gap
        if out.dtype == np.int64:
            out = self.arrays[key] = out.astype(np.float64)
        out[start:end] = np.nan

    def frame(self, keys: list[str]) -> pd.DataFrame:
        """The DataFrame of ``keys``, one block per column (no consolidating copy); the
        columns are handed over (this object holds none of them after)."""
        import pandas as pd
        import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

        data: dict[str, Any] = {}
        for key in keys:
            if key in self.texts:
                data[key] = pa.chunked_array(self.texts.pop(key), pa.string()).to_pandas(memory_pool=_pool())
            else:
                a = self.arrays.pop(key)
                a.resize(self.rows, refcheck=False)
                data[key] = a
        return pd.DataFrame(data, copy=False)


class _Parser:
    """Parses pieces to Arrow tables: every key with its type inferred, or with
    ``wanted`` only those keys, their types declared (learnt from the pieces parsed with
    inference); keys pyarrow would read as timestamps are declared strings."""

    def __init__(self, wanted: list[str] | None) -> None:
        import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
        import pyarrow.json as pj  # type: ignore[import-untyped]  # no stubs

        self._pa, self._pj = pa, pj
        self.wanted = wanted
        self.types: dict[str, Any] = {}  # key -> the Arrow type pyarrow is given
        self.found: set[str] = set()  # keys of `wanted` seen in a piece parsed with inference
        self.first_keys: list[str] = []  # the first piece's keys

    def schema(self) -> dict[str, Any]:
        """What :meth:`parse` takes for the next pieces (a copy: workers may hold it)."""
        return dict(self.types)

    def parse(self, piece: memoryview, types: dict[str, Any], only: bool) -> Any:
        """``piece`` as an Arrow table; ``types``: key -> Arrow type; ``only``: read no
        other key. Raises pyarrow's ArrowInvalid when a line or value does not fit."""
        pa, pj = self._pa, self._pj
        return pj.read_json(
            pa.py_buffer(piece),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(piece) + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema(list(types.items())) if types else None,
                unexpected_field_behavior="ignore" if only else "infer",
            ),
            memory_pool=_pool(),
        )

    def infer(self, piece: memoryview) -> Any:
        """``piece`` parsed with every type inferred (the declared strings kept); what it
        teaches is remembered for the next pieces. Raises ArrowInvalid."""
        pa = self._pa
        strings = {k: t for k, t in self.types.items() if pa.types.is_string(t)}
        table = self.parse(piece, strings, only=False)
        stamps = {f.name: pa.string() for f in table.schema if pa.types.is_timestamp(f.type)}
        if stamps:
            keys = table.column_names
            self.types.update(stamps)
            table = self.parse(piece, {**strings, **stamps}, only=False).select(keys)  # keys in logged order
        if not self.first_keys:
            self.first_keys = table.column_names
        if self.wanted is not None:
            table = table.select([k for k in self.wanted if k in table.column_names])
            self.found.update(table.column_names)
            for f in table.schema:
                old = self.types.get(f.name)
                if not (pa.types.is_null(f.type) or (old == pa.float64() and pa.types.is_integer(f.type))):
                    self.types[f.name] = f.type
            for k in self.wanted:  # not seen yet: a number, or that piece is parsed again
                self.types.setdefault(k, pa.float64())
        return table

    def settle(self, piece: memoryview, parsed: concurrent.futures.Future[Any]) -> Any:
        """The table of a piece parsed on a worker, parsed again here when a declared type
        did not fit or pyarrow read timestamps. Raises ArrowInvalid."""
        pa = self._pa
        try:
            table = parsed.result()
        except pa.ArrowInvalid:
            if self.wanted is None:
                raise
            return self.infer(piece)
        if any(pa.types.is_timestamp(f.type) for f in table.schema):
            return self.infer(piece)
        return table


def read_frame(
    storage: Readable, name: str, size: int, step_key: str | None, columns: list[str] | None = None
) -> pd.DataFrame | None:
    """The first ``size`` bytes of metrics file ``name`` as a DataFrame (step column first,
    then columns in first-logged order; only ``step_key`` and ``columns`` when given), or
    None when the fast path does not apply (see the module docstring).

    Raises:
        KeyError: a column of ``columns`` is not in the file (its name, as JSON, UTF-8 or
            ASCII-escaped, is nowhere in the file).
        OSError: the storage failed.
    """
    if step_key is None or size == 0:
        return None
    try:
        import pyarrow as pa  # type: ignore[import-untyped]  # pyarrow ships no type stubs
        import pyarrow.json  # type: ignore[import-untyped]  # no stubs
    except ImportError:
        return None
    wanted = None if columns is None else [step_key] + [c for c in columns if c != step_key]
    if wanted is not None and len(set(wanted)) < len(wanted):
        return None  # a key asked for twice: the rows' frame repeats the column
    parser = _Parser(wanted)
    out = _Columns(step_key)
    unseen = set(wanted or ())  # keys of `columns` whose name is not in the bytes read so far
    probes = {k: {json.dumps(k, ensure_ascii=a).encode() for a in (True, False)} for k in unseen}
    queue: collections.deque[tuple[memoryview, concurrent.futures.Future[Any]]] = collections.deque()
    try:
        with concurrent.futures.ThreadPoolExecutor(_AHEAD, thread_name_prefix="rllog-read") as pool:
            estimate = 0
            try:
                for piece in _pieces(storage, name, size):
                    unseen -= {k for k in unseen if any(p in cast(bytes, piece.obj) for p in probes[k])}
                    if not estimate:  # the first piece, parsed here: the keys and their types
                        table = parser.infer(piece)
                        estimate = table.num_rows * size // len(piece) * 3 // 2 + 16
                        out.add(table, estimate)
                        continue
                    queue.append(
                        (piece, pool.submit(parser.parse, piece, parser.schema(), wanted is not None))
                    )
                    if len(queue) > _AHEAD:
                        piece, parsed = queue.popleft()
                        out.add(parser.settle(piece, parsed), estimate)
                while queue:
                    piece, parsed = queue.popleft()
                    out.add(parser.settle(piece, parsed), estimate)
            finally:
                for _, parsed in queue:
                    parsed.cancel()
    except (_NotClean, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # damage, a torn line, a value changing type, nested values...
    if wanted is None:
        return out.frame([step_key] + [c for c in out.order if c != step_key])
    if unseen:
        raise KeyError(
            f"{storage.url}/{name}: no column {', '.join(map(repr, sorted(unseen)))}; "
            f"its first rows have {', '.join(parser.first_keys)}"
        )
    if any(k not in parser.found and (k in out.null_only or k not in out.order) for k in wanted):
        return None  # a name in the file that maybe is no key (only nulls read, or inside a string)
    return out.frame(wanted)
