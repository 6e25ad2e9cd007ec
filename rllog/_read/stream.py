"""The standing metric rows of a run, streamed: the reader's step rule in bounded memory.

:class:`StreamedRows` applies the rule of :mod:`rllog._format.rows` (what
:class:`~rllog._format.rows.StepResolver` does with every row held in memory) while
reading the metrics file in chunks, keeping per row only its step and where its line is
(24 bytes a row in arrays). When the rule needs the content of an earlier row (a row
that repeats a step: merge, replay or restart), that row's line is read again by its
byte range; the row of the highest step stays in memory, since most repeats (an eval
row beside its train row) land there. :meth:`StreamedRows.rows` then reads the file a
second time, in order, and yields the standing rows one by one: what
:attr:`rllog.Run.rows` holds, equal row for row, without holding them.

Memory: one chunk (1 MiB) and its parsed rows while scanning (~12 MiB), plus the arrays
(24 bytes per row) and the lines of merged rows (a tuple per extra line). A 3 GB file
of 700k rows takes ~40 MB. Time: ~one streaming parse of the file, twice.

Steps are compared as floats (exact for integer steps below 2**53).
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any, cast

from rllog._format.codec import decode_json
from rllog._format.jsonl import Readable, parse_lines

#: bytes of the file's start, and of the last bytes consumed, kept to notice a rewrite
_KEEP_BYTES = 256

__all__ = ["CHUNK_BYTES", "StreamedRows", "line_spans"]

CHUNK_BYTES = 1 << 20
"""Bytes parsed at a time; a longer line is parsed whole."""

READ_BYTES = 8 << 20
"""Bytes a scan reads at a time from a bucket (one request); a local file is read a chunk at a time."""


def _clashes(old: dict[str, Any], new: dict[str, Any], step_key: str) -> bool:
    """:func:`rllog._format.rows._clashes`: a shared key (not the step) with another value (NaN == NaN)."""
    for k, v in new.items():
        if k != step_key and k in old:
            w = old[k]
            if v != w and not (v != v and w != w):
                return True
    return False


class StreamedRows:
    """One scan of ``name`` (its first ``end`` bytes) with the step rule; rows on demand.

    Attributes (those of :class:`~rllog._format.rows.StepResolver`, as counts where it
    keeps rows):
        added: rows parsed (standing, merged, superseded, unstepped).
        merged: rows merged into an earlier row of the same step.
        superseded: rows a later segment replaced.
        restarts: ``(line, step)`` where each segment after the first starts.
        standing: standing rows (one per step, then the unstepped ones).
        unstepped: rows without a numeric step.
        problems: messages about skipped (damaged) lines, as :class:`JsonlTail` words them.
        torn: a message about an unparseable unterminated last line, or None.

    Raises:
        OSError: the storage failed while scanning (FileNotFoundError is an empty run).
    """

    def __init__(self, storage: Readable, name: str, step_key: str | None, end: int) -> None:
        self._storage = storage
        self._name = name
        self._key = step_key
        self._end = end
        self.added = self.merged = self.superseded = 0
        self.restarts: list[tuple[int, Any]] = []
        self.problems: list[str] = []
        self.torn: str | None = None
        self.offset = 0  # bytes consumed (whole lines, and a parsed unterminated last line)
        self.lines = 0  # lines consumed
        self._head = b""  # the file's first bytes, and the last bytes consumed (see rewrite_reason)
        self._last = b""
        self._open_line = False  # the last line consumed had no newline (yet): the next one ends it
        # the standing stepped rows, in step order: step, first line's number, offset, length
        self._steps = array("d")
        self._line = array("q")
        self._off = array("q")
        self._len = array("q")
        self._extra: dict[int, list[tuple[int, int]]] = {}  # first line -> (offset, length) of merged rows
        self._un_off = array("q")  # rows without a step, in file order
        self._un_len = array("q")
        self._top: tuple[int, list[dict[str, Any]]] | None = None  # highest step: (first line, rows)
        try:
            self._scan(end, final=True)
        except FileNotFoundError:
            pass
        self._top = None

    @property
    def standing(self) -> int:
        return len(self._steps) + len(self._un_off)

    @property
    def unstepped(self) -> int:
        return len(self._un_off)

    # -- pass 1: the rule -----------------------------------------------------------------

    def _scan(self, end: int, final: bool) -> None:
        """Apply the rule to the lines from :attr:`offset` to byte ``end``, a chunk at a time.

        ``final``: also parse an unterminated last line (consumed when it is a JSON object,
        else :attr:`torn` says so); without it such a line is left for a later scan.
        """
        name = self._name
        offset, lines = self.offset, self.lines
        if self._open_line and offset < end:  # the next newline ends a line already counted
            lines -= 1
        chunk = CHUNK_BYTES
        # a bucket answers each read with a request: read READ_BYTES at a time there
        window = _Window(self._storage, name, end)
        ahead = READ_BYTES if "://" in self._storage.url else 0
        while offset < end:
            data = window.read(offset, min(end, offset + chunk) - offset, ahead)
            if not data:
                break
            cut = data.rfind(b"\n") + 1
            if cut == 0 and offset + len(data) < end:  # one line longer than the chunk
                chunk *= 2
                continue
            chunk = CHUNK_BYTES
            if offset == 0:
                self._head = data[:_KEEP_BYTES]
            complete = data[:cut]
            if complete and not self._take(complete, offset, lines + 1):
                rows, problems = self._parse(complete, lines + 1)
                self.problems += problems
                self._place(rows, complete, offset, lines + 1)
            if complete:
                lines += complete.count(b"\n")
                offset += cut
                self.offset, self.lines, self._open_line = offset, lines, False
                self._last = (self._last + complete[-_KEEP_BYTES:])[-_KEEP_BYTES:]
                self._chunk_done()
            rest = data[cut:]
            if rest and offset + len(rest) >= end:  # the unterminated last line (JsonlTail final=True)
                if final and rest.strip():
                    last, _ = self._parse(rest, lines + 1)
                    if last:
                        self._add(lines + 1, offset, len(rest), last[0][1])
                        self.offset, self.lines = offset + len(rest), lines + 1
                        self._open_line = True
                        self._last = (self._last + rest[-_KEEP_BYTES:])[-_KEEP_BYTES:]
                        self._chunk_done()
                    else:
                        self.torn = (
                            f"{name} line {lines + 1}: torn final line ({len(rest)} bytes, no newline, "
                            "not JSON; the writer was probably killed mid-row); ignored"
                        )
                break

    def _take(self, data: bytes, offset: int, first: int) -> bool:
        """A subclass's faster way to place whole lines ``data`` (from byte ``offset``, the
        first numbered ``first``); False (nothing done) to have them parsed row by row."""
        return False

    def _parse(self, data: bytes, first_line: int) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
        """``data``'s rows and problems, as :func:`rllog._format.jsonl.parse_lines` gives them."""
        return parse_lines(data, self._name, first_line)

    def _place(self, rows: list[tuple[int, dict[str, Any]]], data: bytes, offset: int, first: int) -> None:
        """Apply the rule to ``rows``, parsed from ``data`` (whole lines, from byte ``offset``,
        the first numbered ``first``). A chunk whose rows all have a step, increasing and
        above every standing step (nearly every chunk of a metrics file) is appended at once."""
        import numpy as np

        starts, lens = line_spans(data, offset)
        if len(rows) != len(starts):  # blank or damaged lines: the rows' own lines
            at = np.fromiter((line - first for line, _ in rows), dtype=np.int64, count=len(rows))
            starts, lens = starts[at], lens[at]
        offs, lens = starts.tolist(), lens.tolist()
        if not self._append_all(rows, offs, lens):
            add = self._add
            for (line, row), off, n in zip(rows, offs, lens, strict=True):
                add(line, off, n, row)

    def _append_all(self, rows: list[tuple[int, dict[str, Any]]], offs: list[int], lens: list[int]) -> bool:
        """Append ``rows`` as :meth:`_add` would if each has a step, the steps increase and the
        first is above the last standing step; False (nothing done) otherwise."""
        key = self._key
        if key is None or not rows:
            return False
        steps: list[Any] = [row.get(key) for _, row in rows]
        kinds = set(map(type, steps))
        if not kinds <= {int, float} or (float in kinds and any(s != s for s in steps)):
            return False
        if not all(map(operator.lt, steps, steps[1:])) or not self._above(steps[0]):
            return False
        self._append_positions([line for line, _ in rows], steps, offs, lens, rows[-1][1])
        self._appended_rows([row for _, row in rows])
        return True

    def _above(self, step: float) -> bool:
        """True when ``step`` is above every standing step (a row of it starts no repeat)."""
        return not self._steps or step > self._steps[-1]

    def _append_positions(
        self, lines: list[int], steps: list[Any], offs: list[int], lens: list[int], last: dict[str, Any]
    ) -> None:
        """Append stepped rows known to stand after the others (steps increasing, above the
        last standing one): their positions; ``last`` is the last row (as logged)."""
        self.added += len(lines)
        self._steps.extend(steps)
        self._line.extend(lines)
        self._off.extend(offs)
        self._len.extend(lens)
        self._top = (lines[-1], [last])

    # what a subclass keeping the rows' values learns of each decision (nothing here)
    def _appended(self, row: dict[str, Any]) -> None:
        """``row`` became the last standing stepped row."""

    def _appended_rows(self, rows: list[dict[str, Any]]) -> None:
        """``rows`` became the last standing stepped rows, in this order."""

    def _merged_into(self, i: int, row: dict[str, Any]) -> None:
        """``row`` was merged into standing stepped row ``i``."""

    def _inserted(self, i: int, row: dict[str, Any]) -> None:
        """``row`` (a late row) became standing stepped row ``i``."""

    def _cut(self, i: int) -> None:
        """Standing stepped rows ``i`` and after are superseded (a restart; called before they go)."""

    def _unstepped_row(self, row: dict[str, Any]) -> None:
        """``row`` has no step: kept after the stepped rows."""

    def _chunk_done(self) -> None:
        """A chunk of lines was placed (a subclass may convert what it gathered)."""

    def _add(self, line: int, off: int, n: int, row: dict[str, Any]) -> None:
        """:meth:`StepResolver.add` on positions: the same decisions, rows read back when needed."""
        self.added += 1
        key = self._key
        value = row.get(key) if key is not None else None
        if key is None or type(value) not in (int, float) or value != value:
            self._un_off.append(off)
            self._un_len.append(n)
            self._unstepped_row(row)
            return
        step = cast(float, value)  # an int or a float here
        steps = self._steps
        if steps and step <= steps[-1]:
            i = bisect_left(steps, step)
            if steps[i] != step:  # a late row for a step with no row yet
                self._insert(i, step, line, off, n)
                self._inserted(i, row)
                return
            logged = self._logged(i)
            replays = any(r.keys() == row.keys() for r in logged)
            merged = logged[0] if len(logged) == 1 else _merge(logged)
            if not replays and not _clashes(merged, row, key):
                self._extra.setdefault(self._line[i], []).append((off, n))
                if self._top is not None and self._top[0] == self._line[i]:
                    self._top[1].append(row)
                self.merged += 1
                self._merged_into(i, row)
                return
            self.restarts.append((line, step))
            self._cut(i)
            for first in self._line[i:]:
                self.superseded += 1 + len(self._extra.pop(first, ()))
            del steps[i:], self._line[i:], self._off[i:], self._len[i:]
        self._insert(len(steps), step, line, off, n)
        self._top = (line, [row])
        self._appended(row)

    def _insert(self, i: int, step: float, line: int, off: int, n: int) -> None:
        self._steps.insert(i, step)
        self._line.insert(i, line)
        self._off.insert(i, off)
        self._len.insert(i, n)

    def _logged(self, i: int) -> list[dict[str, Any]]:
        """The rows logged for standing step ``i``, as logged (first, then merged ones)."""
        first = self._line[i]
        if self._top is not None and self._top[0] == first:
            return self._top[1]
        spans = [(self._off[i], self._len[i]), *self._extra.get(first, ())]
        return [self._read(off, n) for off, n in spans]

    def _read(self, off: int, n: int) -> dict[str, Any]:
        row = decode_json(self._storage.read_range(self._name, off, off + n))
        assert type(row) is dict  # it parsed as an object when scanned
        return row

    # -- pass 2: the rows -----------------------------------------------------------------

    def rows(self) -> Iterator[dict[str, Any]]:
        """The standing rows, as :attr:`rllog.Run.rows` lists them: one per step (merged
        rows as one dict), steps increasing, then rows without a step in file order.

        The file is read again in windows of :data:`CHUNK_BYTES` (sequentially when the
        rows were logged in step order; a late row costs one more ranged read).

        Raises:
            OSError: the storage failed.
        """
        window = _Window(self._storage, self._name, self._end)
        read = window.row
        extra = self._extra
        for i in range(len(self._steps)):
            row = read(self._off[i], self._len[i])
            more = extra.get(self._line[i])
            if more:
                for off, n in more:
                    row.update(read(off, n))
            yield row
        for off, n in zip(self._un_off, self._un_len, strict=True):
            yield read(off, n)


def line_spans(data: bytes, offset: int) -> tuple[Any, Any]:
    """``(starts, lengths)`` of the newline-terminated lines of ``data`` (int64 arrays; starts
    counted from byte ``offset``, lengths without the newline)."""
    import numpy as np

    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    return offset + starts, ends - starts


def _merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(rows[0])
    for r in rows[1:]:
        out.update(r)
    return out


class _Window:
    """Reads rows by byte range through a window of the file (one ranged read per window)."""

    __slots__ = ("_buf", "_end", "_name", "_start", "_storage")

    def __init__(self, storage: Readable, name: str, end: int) -> None:
        self._storage, self._name, self._end = storage, name, end
        self._buf = b""
        self._start = 0

    def read(self, off: int, n: int, window: int | None = None) -> bytes:
        """Bytes ``[off, off + n)`` (fewer at the end), read with the ``window`` bytes after
        them (default :data:`CHUNK_BYTES`) when they are not in the window read last."""
        start = off - self._start
        if start < 0 or start + n > len(self._buf):
            ahead = max(n, CHUNK_BYTES if window is None else window)
            self._buf = self._storage.read_range(self._name, off, min(self._end, off + ahead))
            self._start, start = off, 0
        return self._buf[start : start + n]

    def row(self, off: int, n: int) -> dict[str, Any]:
        row = decode_json(self.read(off, n))
        assert type(row) is dict  # it parsed as an object when scanned
        return row
