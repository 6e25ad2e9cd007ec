"""JSONL file helpers shared by the writer and the reader: torn tails and line splitting."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rllog.encoding import decode_json
from rllog.storage import Storage

__all__ = ["repair_torn_tail", "iter_lines", "row_step", "TORN_SUFFIX"]

#: torn fragments of ``X`` are appended to ``X`` + this suffix, one per line
TORN_SUFFIX = ".torn"
_STEP_PREFIX = re.compile(rb'\{\s*"step"\s*:\s*(-?\d+)\s*[,}]')


def repair_torn_tail(storage: Storage, name: str) -> str | None:
    """Make sure the next row appended to ``name`` starts on a fresh line.

    A file whose last byte is not ``\\n`` was cut mid-write (the process was killed).
    If the unterminated tail is a whole JSON object (only the newline is missing) a
    ``\\n`` is added; otherwise the tail is moved, byte for byte, to ``name + ".torn"``
    and cut from ``name``. Nothing is deleted without a copy.

    Returns a message describing the repair, or None when there was nothing to do
    (including a missing file).
    """
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return None
    if size == 0 or storage.read_range(name, size - 1, size) == b"\n":
        return None
    data = storage.read(name)
    cut = data.rfind(b"\n") + 1
    tail = data[cut:]
    try:
        whole = isinstance(decode_json(tail), dict)
    except ValueError:
        whole = False
    if whole:
        storage.append(name, b"\n")
        return f"{storage.url}/{name}: the last row had no newline; added one"
    storage.append(name + TORN_SUFFIX, tail + b"\n")
    storage.write(name, data[:cut])
    return (
        f"{storage.url}/{name}: moved a torn last line ({len(tail)} bytes, cut mid-write) "
        f"to {name}{TORN_SUFFIX}; new rows start on a fresh line"
    )


def iter_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """``(line_number, line)`` for each non-blank line of ``data``, 1-based, without newline."""
    for lineno, line in enumerate(data.split(b"\n"), 1):
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
