"""JSONL helpers shared by the writer and the reader: line splitting, the step of a row,
tolerant parsing, and incremental reading of a growing file through a small
:class:`Readable` protocol (any Storage is one).

Reading never stops at damage: a line that is not a JSON object is skipped and reported
with its 1-based line number, and the final line may be torn (a process killed
mid-write) without a trailing newline. ``NaN``/``Infinity`` tokens and ``null`` are
accepted (:func:`rllog._format.codec.decode_json`).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import msgspec

from rllog._format.codec import decode_json

__all__ = [
    "Readable",
    "iter_lines",
    "row_step",
    "parse_lines",
    "rewrite_reason",
    "JsonlTail",
    "TAIL_WINDOW",
    "last_line_crc",
]


class Readable(Protocol):
    """What :class:`JsonlTail` needs of a storage: sizes and byte ranges of named files."""

    url: str

    def size(self, name: str) -> int: ...
    def read_range(self, name: str, start: int, end: int | None = None) -> bytes: ...


_STEP_PREFIX = re.compile(rb'\{\s*"step"\s*:\s*(-?\d+)\s*[,}]')


def iter_lines(data: bytes, first_line: int = 1) -> Iterator[tuple[int, bytes]]:
    """``(line_number, line)`` for each non-blank line of ``data``, counted from ``first_line``, without newline."""
    for lineno, line in enumerate(data.split(b"\n"), first_line):
        if line.strip():
            yield lineno, line


def row_step(line: bytes) -> Any:
    """The ``step`` of one metrics row (fast for rows rllog wrote); None if it has none.

    Raises:
        ValueError: the line is not JSON.
    """
    m = _STEP_PREFIX.match(line)
    if m is not None:
        return int(m.group(1))
    row = decode_json(line)
    return row.get("step") if isinstance(row, dict) else None


_decode_fast = msgspec.json.decode

#: bytes before a point of a file that :func:`last_line_crc` looks at (the last line, at most this minus one)
TAIL_WINDOW = 4097


def last_line_crc(tail: bytes) -> int | None:
    """CRC-32 of the last line of ``tail`` (the bytes before a point of a JSONL file, at
    least its last :data:`TAIL_WINDOW`), without its newline and at most its last
    ``TAIL_WINDOW - 1`` bytes: a fingerprint of where a file stood (checkpoint records'
    ``metrics_at``). None when ``tail`` does not end with a newline (not a line boundary)."""
    if not tail.endswith(b"\n"):
        return None
    line = tail[-TAIL_WINDOW:-1]
    return zlib.crc32(line[line.rfind(b"\n") + 1 :])


def parse_lines(
    data: bytes, name: str, first_line: int = 1
) -> tuple[list[tuple[int, dict[str, Any]]], list[str]]:
    """Parse newline-separated JSON objects.

    Returns ``(rows, problems)``: ``rows`` is ``[(line_number, object), ...]`` (1-based,
    counted from ``first_line``), ``problems`` one message per skipped line naming
    ``name`` and the line. Blank lines are skipped silently.
    """
    if not data:
        return [], []
    # Fast path: a clean file is one msgspec call (JSON strings cannot hold a raw newline,
    # so joining the lines with commas makes one array). Any token or damage falls back.
    body = data[:-1] if data.endswith(b"\n") else data
    if b"\n\n" not in body and not body.startswith(b"\n"):
        try:
            objs = _decode_fast(b"[" + body.replace(b"\n", b",") + b"]")
        except (msgspec.DecodeError, UnicodeDecodeError):
            objs = None
        if objs is not None and len(objs) == body.count(b"\n") + 1 and all(type(o) is dict for o in objs):
            return list(enumerate(objs, first_line)), []
    rows: list[tuple[int, dict]] = []
    problems: list[str] = []
    for i, line in iter_lines(data, first_line):
        try:
            obj = decode_json(line)
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
            problems.append(f"{name} line {i}: not JSON ({exc}); line skipped: {line[:80]!r}")
            continue
        if type(obj) is not dict:
            problems.append(
                f"{name} line {i}: expected a JSON object, got {type(obj).__name__}; line skipped"
            )
            continue
        rows.append((i, obj))
    return rows, problems


#: bytes of a file's start a tail keeps, to notice a rewrite that grew past the old offset
_HEAD_BYTES = 256


def rewrite_reason(
    storage: Readable, name: str, offset: int, size: int, head: bytes, last: bytes
) -> str | None:
    """Why file ``name``, read up to byte ``offset`` and now ``size`` bytes long, is not the
    file that was read (the words of a message: ``"it shrank from"``, ``"its first bytes
    changed at"``, ``"it was cut and grew again past"``), or None when it only grew.

    ``head``: its first bytes as read; ``last``: the bytes read last, ending at ``offset``
    (empty to skip that check, e.g. when the caller compares them itself). A file gone
    while looking counts as changed.

    Raises:
        OSError: the storage failed.
    """
    if size < offset:
        return "it shrank from"
    if size == offset:
        return None
    if head and _read_or_none(storage, name, 0, len(head)) != head:
        return "its first bytes changed at"
    if last and _read_or_none(storage, name, offset - len(last), offset) != last:
        return "it was cut and grew again past"
    return None


def _read_or_none(storage: Readable, name: str, start: int, end: int) -> bytes | None:
    try:
        return storage.read_range(name, start, end)
    except FileNotFoundError:
        return None


class JsonlTail:
    """Reads a growing JSONL file of a :class:`Readable` (any Storage) incrementally.

    Each :meth:`poll` reads only the bytes after the last complete line it returned
    (``Storage.size`` + ``Storage.read_range``; on object stores ``read_range`` may
    fetch more, see the backend) and returns the new rows. A line without its trailing
    newline is left for the next poll (the writer may be in the middle of it) unless
    ``final=True``. If the file shrinks (rewritten, e.g. rows moved aside on resume),
    or grew but its first bytes or the last bytes consumed changed (cut and appended
    to again, or replaced), reading starts again from the first byte and :attr:`rewritten` is True until the
    next poll.

    Attributes:
        offset: bytes consumed so far.
        lines: lines consumed so far (the next line's number is ``lines + 1``).
        problems: messages about skipped lines, in order.
        torn: a message about an unparseable unterminated last line, or None.
    """

    def __init__(self, storage: Readable, name: str) -> None:
        self.storage = storage
        self.name = name
        self.offset = 0
        self.lines = 0
        self.problems: list[str] = []
        self.torn: str | None = None
        self.rewritten = False
        self._head = b""  # the first bytes read, to notice a rewrite (see poll)
        self._last = b""  # the last bytes consumed (ending at offset), to notice a file cut and regrown
        self._open = False  # the last line consumed had no newline yet: the next "\n" ends it

    def seek(self, offset: int, lines: int = 0) -> None:
        """Read from byte ``offset`` on (the start of line ``lines + 1``), as a new reader
        would: what earlier polls read is forgotten (their last bytes and problems), so
        the next :meth:`poll` does not take the jump for a rewritten file."""
        self.offset, self.lines = offset, lines
        self.problems = []
        self.torn = None
        self.rewritten = False
        self._head = self._last = b""
        self._open = False

    def poll(self, final: bool = False, end: int | None = None) -> list[tuple[int, dict]]:
        """New ``(line_number, object)`` rows since the last poll; ``[]`` if the file is missing.
        With ``end``, only the file's first ``end`` bytes are read (what it held at a known time).

        ``final=True`` also parses an unterminated last line: if it is a JSON object it is
        returned and consumed, else :attr:`torn` says so and it is left unconsumed.

        Raises:
            OSError: the storage failed (other than the file missing).
        """
        self.rewritten = False
        try:
            size = self.storage.size(self.name)
        except FileNotFoundError:
            return []
        if end is not None:
            size = min(size, end)
        # the last bytes consumed are read again with the new ones below (one read less)
        changed = rewrite_reason(self.storage, self.name, self.offset, size, self._head, b"")
        data = b""
        if changed is None and size > self.offset:
            # read the last bytes consumed again with the new ones: a file cut (rows moved
            # aside on resume) and grown past the old offset has other bytes there
            data = self.storage.read_range(self.name, self.offset - len(self._last), size)
            if data[: len(self._last)] != self._last:
                changed = "it was cut and grew again past"
            data = data[len(self._last) :]
        if changed is not None:
            self.problems.append(
                f"{self.name} was rewritten ({changed} {self.offset} to {size} bytes, e.g. rows moved aside "
                "on resume or the run folder replaced); read again from the start"
            )
            self.offset = self.lines = 0
            self._head = self._last = b""
            self._open = False
            self.rewritten = True
            data = b""
        self.torn = None
        if size == self.offset:
            return []
        if not data:
            data = self.storage.read_range(self.name, self.offset, size)
        if self.offset == 0:
            self._head = data[:_HEAD_BYTES]
        end = data.rfind(b"\n") + 1
        complete, rest = data[:end], data[end:]
        first, newlines = self.lines + 1, complete.count(b"\n")
        if self._open and end:  # the first newline ends the line already counted
            first, newlines, self._open = first - 1, newlines - 1, False
        rows, problems = parse_lines(complete, self.name, first)
        self.problems += problems
        if end:
            self._last = (self._last + complete[-_HEAD_BYTES:])[-_HEAD_BYTES:]
        self.offset += end
        self.lines += newlines
        if rest and final and rest.strip():
            last, _ = parse_lines(rest, self.name, self.lines + 1)
            if last:
                rows += last
                self._last = (self._last + rest[-_HEAD_BYTES:])[-_HEAD_BYTES:]
                self.offset += len(rest)
                self.lines += 1
                self._open = True
            else:
                self.torn = (
                    f"{self.name} line {self.lines + 1}: torn final line ({len(rest)} bytes, no newline, "
                    "not JSON; the writer was probably killed mid-row); ignored"
                )
        return rows
