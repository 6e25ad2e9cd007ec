"""A run's standing metric rows as float64 columns, read in one chunked pass and kept current.

:class:`MetricTable` applies the reader's step rule (:mod:`rllog._format.rows`, through
:class:`~rllog._read.stream.StreamedRows`, which keeps per row only its step and where
its line is) and writes every number into one float64 array per metric while the lines
are parsed, a chunk (1 MiB) at a time: no dict per row outlives its chunk.
:meth:`MetricTable.poll` reads only the bytes appended since, so following a live run
costs its new rows, not a re-read.

Memory: 8 bytes per row for each metric that ever held a number (1 run x 100k rows x 100
metrics: ~80 MB), ~32 bytes per row of positions, and one chunk while reading. Time: one
msgspec parse of the file; a chunk of rows that hold only numbers under known keys, with
increasing steps (nearly all of a metrics file), is decoded into structs and converted as
one matrix (~1.5 s of CPU for 300 MB), any other chunk row by row.

The columns hold what :attr:`rllog.Run.rows` holds, cell by cell and in the same row
order: a number (an int or a float, not a bool) as its float64 value; anything else
(missing, ``null``, a string, a bool, a list) as NaN. A NaN or ±Infinity the loop logged
is told apart from a missing value by :meth:`MetricTable.nonfinite`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from rllog._format.jsonl import Readable, parse_lines, rewrite_reason
from rllog._read.stream import CHUNK_BYTES, StreamedRows, line_spans

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Columns", "MetricTable"]

_NUMBERS = frozenset((int, float))
#: rows whose values are all numbers (no null, string, bool, list, NaN token): checked by msgspec
_NUMBER_ROWS = msgspec.json.Decoder(list[dict[str, float | int]])
#: what a row struct (:meth:`MetricTable._take`) holds for a key the row does not have
_ABSENT = float("nan")
#: chunks in a row the struct decoding may fail on before a scan stops trying it
_STRUCT_TRIES = 3
#: rows a column gains at least when it grows (besides a quarter of what it holds)
_GROW_ROWS = 4096
T = TypeVar("T")


class Columns:
    """Rows of numbers as growable float64 columns, one array per key that ever held a number.

    Attributes:
        n: rows held.
        keys: every key seen, in first-logged order (including keys that never held a number).
    """

    def __init__(self) -> None:
        self.n = 0
        self.keys: dict[str, None] = {}
        self._cap = 0
        self._values: dict[str, np.ndarray] = {}  # capacity rows each, NaN past n
        self._nan: dict[str, list[np.ndarray]] = {}  # row positions of logged NaN, in sorted pieces

    # -- reading -----------------------------------------------------------------------
    def column(self, key: str) -> np.ndarray:
        """``key``'s values on the ``n`` rows (float64, length ``n``; all NaN for a key with no number)."""
        import numpy as np

        values = self._values.get(key)
        return np.full(self.n, np.nan) if values is None else values[: self.n]

    def logged_nan(self, key: str) -> np.ndarray:
        """Row positions where ``key`` was logged as NaN (sorted int64)."""
        import numpy as np

        pieces = self._nan.get(key)
        if not pieces:
            return np.empty(0, dtype=np.int64)
        if len(pieces) > 1:
            pieces[:] = [np.concatenate(pieces)]
        return pieces[0]

    def nonfinite(self, key: str) -> np.ndarray:
        """Row positions where ``key`` was logged as NaN, Infinity or -Infinity (sorted int64)."""
        import numpy as np

        values = self._values.get(key)
        if values is None:
            return np.empty(0, dtype=np.int64)
        return np.union1d(np.flatnonzero(np.isinf(values[: self.n])), self.logged_nan(key))

    def has_number(self, key: str) -> bool:
        """True when some row holds a number for ``key`` (a logged NaN or ±Infinity counts)."""
        import numpy as np

        values = self._values.get(key)
        if values is None or not self.n:
            return False
        return len(self.logged_nan(key)) > 0 or not np.isnan(values[: self.n]).all()

    def nbytes(self) -> int:
        """Bytes the columns hold (their capacity)."""
        return sum(v.nbytes for v in self._values.values())

    # -- writing -----------------------------------------------------------------------
    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows (a hint for a known size; columns grow as needed anyway)."""
        if rows > self._cap:
            self._resize(rows)

    def _room(self, rows: int) -> None:
        if self.n + rows > self._cap:
            self._resize(max(self.n + rows, self._cap + self._cap // 4 + _GROW_ROWS))

    def _resize(self, cap: int) -> None:
        import numpy as np

        for key, old in self._values.items():
            new = np.full(cap, np.nan)
            new[: self.n] = old[: self.n]
            self._values[key] = new
        self._cap = cap

    def _array(self, key: str) -> np.ndarray:
        import numpy as np

        values = self._values.get(key)
        if values is None:
            values = self._values[key] = np.full(self._cap, np.nan)
        return values

    def append(self, rows: list[dict[str, Any]], numbers_only: bool = False) -> None:
        """Add ``rows`` after the last row. Rows with the same keys in the same order
        (nearly all rows of a metrics file) are converted together by numpy.
        ``numbers_only``: every value is known to be an int or a float (not checked again)."""
        import numpy as np

        if not rows:
            return
        self._room(len(rows))
        n0, total, seen = self.n, len(rows), self.keys
        i = 0
        while i < total:
            keys = tuple(rows[i])
            for k in keys:
                if k not in seen:
                    seen[k] = None
            block: list[list[Any]] = []
            odd: list[tuple[int, int]] = []  # (row in block, key index) of cells that are not numbers
            j = i
            while j < total:
                row = rows[j]
                if len(row) != len(keys) or tuple(row) != keys:
                    break
                vals = list(row.values())
                if not numbers_only and not _NUMBERS.issuperset(map(type, vals)):
                    for c, v in enumerate(vals):
                        if type(v) not in _NUMBERS:
                            vals[c] = math.nan
                            odd.append((j - i, c))
                block.append(vals)
                j += 1
            try:
                mat = np.array(block, dtype=np.float64).reshape(j - i, len(keys))
            except OverflowError:  # an int beyond float64's range
                mat = np.array([[_float(v) for v in vals] for vals in block]).reshape(j - i, len(keys))
            missing = np.isnan(mat)
            logged_nan = missing.copy()
            for r, c in odd:
                logged_nan[r, c] = False
            has = ~missing.all(axis=0) | logged_nan.any(axis=0)
            nan_cols = np.flatnonzero(logged_nan.any(axis=0))
            at = n0 + i
            for c, k in enumerate(keys):
                if has[c] or k in self._values:
                    self._array(k)[at : at + j - i] = mat[:, c]
            for c in nan_cols.tolist():
                self._nan.setdefault(keys[c], []).append(at + np.flatnonzero(logged_nan[:, c]))
            i = j
        self.n = n0 + total

    def append_matrix(self, keys: tuple[str, ...], mat: np.ndarray) -> None:
        """Add the rows of ``mat`` (float64, one column per key of ``keys``, which are known,
        NaN where a row has no number; no logged NaN among them)."""
        import numpy as np

        rows = len(mat)
        self._room(rows)
        for c in np.flatnonzero(~np.isnan(mat).all(axis=0)).tolist():
            self._array(keys[c])[self.n : self.n + rows] = mat[:, c]
        self.n += rows

    def extend(self, columns: dict[str, np.ndarray], rows: int, nans: dict[str, np.ndarray]) -> None:
        """Add ``rows`` rows given as columns (``{key: float64 array of length rows}``; other
        keys NaN there) and their logged-NaN positions (``{key: positions in 0..rows}``)."""
        self._room(rows)
        for k, values in columns.items():
            if k not in self.keys:
                self.keys[k] = None
            self._array(k)[self.n : self.n + rows] = values
        for k, pos in nans.items():
            self._nan.setdefault(k, []).append(self.n + pos)
        self.n += rows

    def set_row(self, i: int, row: dict[str, Any]) -> None:
        """Write ``row``'s cells into row ``i`` (a merge: the keys it has are set, others kept)."""
        import numpy as np

        for k, v in row.items():
            if k not in self.keys:
                self.keys[k] = None
            number = type(v) in _NUMBERS
            if not number and k not in self._values:
                continue
            f = _float(v) if number else math.nan
            self._array(k)[i] = f
            pos = self.logged_nan(k)
            logged = number and f != f
            if logged != bool(np.isin(i, pos)):
                self._nan[k] = [np.union1d(pos, [i]) if logged else pos[pos != i]]

    def insert(self, i: int, row: dict[str, Any]) -> None:
        """Insert ``row`` before row ``i`` (a late row for an earlier step)."""
        self._room(1)
        for k, values in self._values.items():
            values[i + 1 : self.n + 1] = values[i : self.n].copy()
            values[i] = math.nan
            pos = self.logged_nan(k)
            if len(pos):
                self._nan[k] = [pos + (pos >= i)]
        self.n += 1
        self.set_row(i, row)

    def cut(self, i: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Drop rows ``i`` and after; returns what :meth:`extend` takes to add them elsewhere:
        their columns (keys holding a number there) and logged-NaN positions (from 0)."""
        columns: dict[str, np.ndarray] = {}
        nans: dict[str, np.ndarray] = {}
        for k, values in self._values.items():
            part = values[i : self.n].copy()
            values[i : self.n] = math.nan
            pos = self.logged_nan(k)
            if len(pos):
                self._nan[k] = [pos[pos < i]]
                if (pos >= i).any():
                    nans[k] = pos[pos >= i] - i
            if k in nans or not _all_nan(part):
                columns[k] = part
        self.n = i
        return columns, nans


def _all_nan(a: np.ndarray) -> bool:
    import numpy as np

    return bool(np.isnan(a).all())


def _float(v: Any) -> float:
    """A number's float64 value (an int beyond its range is ±Infinity), NaN for anything else."""
    if type(v) not in _NUMBERS:
        return math.nan
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


class MetricTable(StreamedRows):
    """The standing metric rows of metrics file ``name`` (its first ``end`` bytes) as columns.

    Rows stand as :attr:`rllog.Run.rows` has them: one per step (rows of one step merged),
    steps increasing, then the rows without a step in file order. :attr:`added`,
    :attr:`merged`, :attr:`superseded`, :attr:`restarts`, :attr:`problems` and
    :attr:`torn` are those of :class:`~rllog._read.stream.StreamedRows`.

    Attributes:
        version: bumped whenever rows change (added, merged, cut), for caches.
        rewritten: set by :meth:`poll` when the file is no longer the one read (it shrank,
            or its first or last read bytes changed); nothing more is read: read the file
            again with a new table.
        superseded_rows: the rows later segments replaced, as :class:`Columns` (merged per
            step, as they stood), in the order they were cut.

    Raises (at construction):
        OSError: the storage failed (a missing file is an empty table).
    """

    def __init__(self, storage: Readable, name: str, step_key: str | None, end: int) -> None:
        self._stepped = Columns()
        self._unstepped = Columns()
        self.superseded_rows = Columns()
        self.version = 0
        self.rewritten = False
        self._pending: list[dict[str, Any]] = []  # stepped rows appended, not converted yet
        self._numbers_only = False  # the pending rows hold numbers only (checked when parsed)
        self._struct: tuple[tuple[str, ...], msgspec.json.Decoder[Any]] | None = None  # see _take
        self._struct_misses = 0
        self._pending_unstepped: list[dict[str, Any]] = []
        self._cache: dict[Any, Any] = {}
        if end > 4 * CHUNK_BYTES:  # room for the rows the file likely holds: columns not regrown
            try:
                head = storage.read_range(name, 0, CHUNK_BYTES)
                self._stepped.reserve(int(end * 1.02 * max(1, head.count(b"\n")) / max(1, len(head))) + 16)
            except FileNotFoundError:
                pass
        super().__init__(storage, name, step_key, end)
        self._flush()

    @classmethod
    def of_rows(
        cls, step_key: str | None, stepped: list[dict[str, Any]], unstepped: list[dict[str, Any]]
    ) -> MetricTable:
        """A table of rows already placed by the rule (a TRL ``trainer_state.json``, read
        whole): no file behind it, :meth:`poll` reads nothing."""
        table = cls(_NoFile(), "", step_key, 0)
        table._pending, table._pending_unstepped = list(stepped), list(unstepped)
        table._flush()
        return table

    # -- the rule's decisions, as columns ----------------------------------------------------
    def _take(self, data: bytes, offset: int, first: int) -> bool:
        """Place a chunk without a dict per row when it can: every row holds only numbers and
        keys seen before, the steps increase and start above the last standing one (nearly
        every chunk of a metrics file). msgspec decodes the rows into a struct with one field
        per known key (no key strings, no dict), whose tuples numpy turns into the block of
        columns. False for any other chunk (it is then parsed row by row), and after
        :data:`_STRUCT_TRIES` such chunks in a row, for the rest of this read."""
        import numpy as np

        key = self._key
        keys = tuple(self._stepped.keys)
        if key is None or key not in self._stepped.keys or self._struct_misses >= _STRUCT_TRIES:
            return False
        body = data[:-1]
        if b"\n\n" in body or body.startswith(b"\n"):
            return False
        if self._struct is None or self._struct[0] != keys:
            fields = [
                (f"f{i}", float | int, msgspec.field(default=_ABSENT, name=k)) for i, k in enumerate(keys)
            ]
            row_type: Any = msgspec.defstruct("Row", fields, forbid_unknown_fields=True, gc=False)
            self._struct = (keys, msgspec.json.Decoder(list[row_type]))
        try:
            objs = self._struct[1].decode(b"[" + body.replace(b"\n", b",") + b"]")
            tuples = list(map(msgspec.structs.astuple, objs))
            mat = np.array(tuples, dtype=np.float64).reshape(len(tuples), len(keys))
        except (msgspec.DecodeError, UnicodeDecodeError, OverflowError):  # a new key, a non-number, damage
            self._struct_misses += 1
            return False
        steps = mat[:, keys.index(key)]
        starts, lens = line_spans(data, offset)
        if (
            len(tuples) != len(starts)
            or not np.isfinite(steps).all()
            or not (steps[1:] > steps[:-1]).all()
            or not self._above(float(steps[0]))
        ):
            self._struct_misses += 1
            return False
        self._struct_misses = 0
        last = {k: v for k, v in zip(keys, tuples[-1], strict=True) if v is not _ABSENT}
        self._flush()
        self._append_positions(
            list(range(first, first + len(tuples))), steps.tolist(), starts.tolist(), lens.tolist(), last
        )
        self._stepped.append_matrix(keys, mat)
        return True

    def _parse(self, data: bytes, first_line: int) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
        """:func:`parse_lines`, with msgspec checking in the same pass that every value is a
        number (then the columns need not check each cell again)."""
        body = data[:-1] if data.endswith(b"\n") else data
        self._numbers_only = False
        if b"\n\n" not in body and not body.startswith(b"\n"):
            try:
                objs = _NUMBER_ROWS.decode(b"[" + body.replace(b"\n", b",") + b"]")
            except (msgspec.DecodeError, UnicodeDecodeError):
                objs = None
            if objs is not None and len(objs) == body.count(b"\n") + 1:
                self._numbers_only = True
                return list(enumerate(objs, first_line)), []
        return parse_lines(data, self._name, first_line)

    def _appended(self, row: dict[str, Any]) -> None:
        self._pending.append(row)

    def _appended_rows(self, rows: list[dict[str, Any]]) -> None:
        self._pending += rows

    def _merged_into(self, i: int, row: dict[str, Any]) -> None:
        held = self._stepped.n
        if i >= held:  # not converted yet: merge into a copy (the logged row stays as logged)
            self._pending[i - held] = {**self._pending[i - held], **row}
        else:
            self._stepped.set_row(i, row)

    def _inserted(self, i: int, row: dict[str, Any]) -> None:
        self._flush()
        self._stepped.insert(i, row)

    def _cut(self, i: int) -> None:
        self._flush()
        rows = self._stepped.n - i
        columns, nans = self._stepped.cut(i)
        self.superseded_rows.extend(columns, rows, nans)

    def _unstepped_row(self, row: dict[str, Any]) -> None:
        self._pending_unstepped.append(row)

    def _chunk_done(self) -> None:
        self._flush()

    def _flush(self) -> None:
        self._stepped.append(self._pending, self._numbers_only)
        self._unstepped.append(self._pending_unstepped, self._numbers_only)
        self._pending, self._pending_unstepped = [], []
        self.version += 1
        self._cache.clear()

    # -- following the file ------------------------------------------------------------
    def poll(self) -> int:
        """Read the lines appended since the last read; returns how many rows they held.

        A line without its newline is left for the next poll (the writer may be in the
        middle of it). A file no longer the one read sets :attr:`rewritten` and reads nothing.

        Raises:
            OSError: the storage failed (a missing file reads nothing).
        """
        if self.rewritten or isinstance(self._storage, _NoFile):
            return 0
        try:
            size = self._storage.size(self._name)
        except FileNotFoundError:
            size = 0
        why = rewrite_reason(self._storage, self._name, self.offset, size, self._head, self._last)
        if why is not None:
            self.problems.append(
                f"{self._name} was rewritten ({why} {self.offset} to {size} bytes, e.g. rows moved aside "
                "on resume or the run folder replaced); read again from the start"
            )
            self.rewritten = True
            return 0
        if size == self.offset:
            return 0
        before, at = self.added, self.offset
        self._struct_misses = 0
        self._scan(size, final=False)
        self._flush()
        if self.offset > at:
            self.torn = None  # a torn last line has been completed (or was never the last)
        return self.added - before

    # -- reading -------------------------------------------------------------------------
    @property
    def numeric(self) -> list[str]:
        """The keys some standing row holds a number for (a logged NaN or ±Infinity counts),
        in first-logged order."""

        def build() -> list[str]:
            keys = dict(self._stepped.keys)
            keys.update(self._unstepped.keys)
            return [k for k in keys if self._stepped.has_number(k) or self._unstepped.has_number(k)]

        return self._cached("numeric", build)

    def column(self, key: str) -> np.ndarray:
        """``key`` on the standing rows (float64, length :attr:`standing`, read-only; NaN where the
        row has no number for it)."""

        def build() -> np.ndarray:
            import numpy as np

            out = self._stepped.column(key)
            if self._unstepped.n:
                out = np.concatenate([out, self._unstepped.column(key)])
            out = out.view()
            out.flags.writeable = False
            return out

        return self._cached(("column", key), build)

    def nonfinite(self, key: str) -> np.ndarray:
        """Standing row positions where ``key`` was logged as NaN or ±Infinity (sorted int64)."""

        def build() -> np.ndarray:
            import numpy as np

            out = self._stepped.nonfinite(key)
            if self._unstepped.n:
                out = np.concatenate([out, self._stepped.n + self._unstepped.nonfinite(key)])
            return out

        return self._cached(("nonfinite", key), build)

    def _cached(self, key: Any, build: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]  # type: ignore[no-any-return]  # what build gave

    def nbytes(self) -> int:
        """Bytes held: the columns (with their room to grow) and the row positions."""
        positions = sum(a.itemsize * len(a) for a in (self._steps, self._line, self._off, self._len))
        held = self._stepped.nbytes() + self._unstepped.nbytes() + self.superseded_rows.nbytes()
        return held + positions


class _NoFile:
    """The storage of a table with no file behind it."""

    url = ""

    def size(self, name: str) -> int:
        return 0

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        raise FileNotFoundError(name)
