"""What happens when a writer opens a run: the run lock, torn-tail repair, and resume.

- The lock (local runs): ``flock`` on ``.rllog.lock``, held until close or death, so two
  loggers never repair or rewrite files the other is appending to.
- Torn tails: a row cut mid-write by a killed process is moved to ``<file>.torn`` so new
  rows start on a fresh line (:func:`repair_torn_tail`).
- Resume: the last checkpoint record with the resume key gives the loop state; metric
  rows at or past its batch move to ``metrics.superseded.jsonl`` (copied first, then cut)
  so re-run steps do not stand twice (:func:`supersede`).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from rllog._format.codec import decode_json
from rllog._format.jsonl import parse_lines, row_step
from rllog._format.layout import LOCK_FILE, METRICS_FILE, SUPERSEDED_FILE, TORN_SUFFIX
from rllog.errors import StorageError
from rllog.storage import LocalStorage, Storage

__all__ = [
    "lock_run",
    "unlock_run",
    "repair_torn_tail",
    "supersede",
    "missing_rows",
    "resume_position",
    "timestamped",
]


def lock_run(storage: Storage) -> tuple[int | None, str | None]:
    """Take the run's lock: ``(fd, None)`` when taken (``fd`` is None where there is no
    lock: object stores), ``(None, holder pid as text)`` when a live process holds it.

    Release it with :func:`unlock_run` (which also removes ``.rllog.lock``, so a finished
    run holds no lock file). The file is opened without following symlinks; a lock file
    removed by its holder between our open and our flock is detected (inode check) and
    the lock taken again on the new file. Object stores have no such lock; see
    :mod:`rllog.storage` for their writers.

    Raises:
        StorageError: ``.rllog.lock`` is a symlink or not a regular file (a planted link
            is never written through), or the run folder is not writable.
    """
    if not isinstance(storage, LocalStorage):
        return None, None
    import errno
    import fcntl
    import stat

    path = storage.root / LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except PermissionError as exc:
        raise StorageError(
            f"cannot write {storage.url}: {exc.strerror} (the run folder is not writable)"
        ) from exc
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise StorageError(
                    f"refusing to lock {path}: it is a symlink; rllog never writes through a link planted in a "
                    "run folder. Remove it"
                ) from exc
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise StorageError(
                    f"cannot write {storage.url}: {exc.strerror} (the run folder is not writable)"
                ) from exc
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise StorageError(f"refusing to lock {path}: not a regular file of its own (a planted link?)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            return None, holder
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == st.st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd, None
        os.close(fd)  # its holder removed the file between our open and our flock: take the new one
    raise StorageError(f"could not take the lock {path}: it keeps being replaced")


def unlock_run(storage: Storage, fd: int) -> None:
    """Release the lock :func:`lock_run` took and remove ``.rllog.lock`` (removed while
    still held, so no other process can hold the removed file and think it owns the run)."""
    if isinstance(storage, LocalStorage):
        try:
            os.unlink(storage.root / LOCK_FILE)
        except OSError:
            pass  # gone already, or a read-only folder: the flock still ends with the close
    os.close(fd)


def repair_torn_tail(storage: Storage, name: str) -> str | None:
    """Make sure the next row appended to ``name`` starts on a fresh line.

    A file whose last byte is not ``\\n`` was cut mid-write (the process was killed).
    If the unterminated tail is a whole JSON object (only the newline is missing) a
    ``\\n`` is added; otherwise the tail is copied, byte for byte, to ``name + ".torn"``
    and then cut from ``name`` (in place where the storage can truncate, so a process
    still holding the file open keeps writing to the same file). Only the tail is read.
    Nothing is deleted without a copy.

    Returns a message describing the repair, or None when there was nothing to do
    (including a missing file).
    """
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return None
    if size == 0 or storage.read_range(name, size - 1, size) == b"\n":
        return None
    cut, chunk = 0, 1 << 16
    end = size
    while end > 0:  # find the last newline, reading backwards
        start = max(0, end - chunk)
        block = storage.read_range(name, start, end)
        nl = block.rfind(b"\n")
        if nl >= 0:
            cut = start + nl + 1
            break
        end = start
        chunk *= 2
    tail = storage.read_range(name, cut, size)
    try:
        whole = isinstance(decode_json(tail), dict)
    except ValueError:
        whole = False
    if whole:
        storage.append(name, b"\n")
        return f"{storage.url}/{name}: the last row had no newline; added one"
    storage.append(name + TORN_SUFFIX, tail + b"\n")
    storage.flush(durable=True)
    truncate = getattr(
        storage, "truncate", None
    )  # issue-9 merge: Storage.truncate becomes part of the protocol
    if truncate is not None:
        truncate(name, cut)
    else:
        storage.write(name, storage.read(name)[:cut])
    return (
        f"{storage.url}/{name}: moved a torn last line ({len(tail)} bytes, cut mid-write) "
        f"to {name}{TORN_SUFFIX}; new rows start on a fresh line"
    )


#: bytes read per ranged read while resuming; also the most moved rows held before appending them
_CHUNK = 8 << 20
#: positions of a line that is not JSON (kept in place, with a note) and of a blank line
_NOT_JSON, _BLANK = object(), object()


def _iter_blocks(storage: Storage, name: str, size: int) -> Iterator[tuple[int, int, list[bytes]]]:
    """``(number of the first line, its byte offset, lines without their newline)`` for
    the first ``size`` bytes of ``name``, read in ranged reads of :data:`_CHUNK` bytes
    (memory bounded by a few chunks plus the longest line). A last line without newline
    comes as is."""
    offset, lineno, rest = 0, 0, b""
    while offset < size:
        lines = storage.read_range(name, offset, min(size, offset + _CHUNK)).split(b"\n")
        lines[0] = rest + lines[0]  # the line the last block cut
        start = offset - len(rest)
        offset = min(size, offset + _CHUNK)
        rest = lines.pop()  # the piece after the last newline: carried, or the unterminated last line
        if offset >= size and rest:
            lines.append(rest)
        if lines:
            yield lineno + 1, start, lines
            lineno += len(lines)


def _positions(lines: list[bytes]) -> list[Any]:
    """:func:`resume_position` of each line: :data:`_BLANK` for a blank line, :data:`_NOT_JSON` for
    a line that is not JSON."""
    out: list[Any] = []
    for line in lines:
        try:
            out.append(resume_position(line))
        except ValueError:
            out.append(_BLANK if not line.strip() else _NOT_JSON)
    return out


def _moves(position: Any, point: int) -> bool:
    return isinstance(position, (int, float)) and position >= point


def damaged_lines(storage: Storage, name: str) -> list[str]:
    """One message per line of ``name`` that is not a JSON object (what every reader
    skips), with its line number; streamed in :data:`_CHUNK`-byte blocks, each checked
    by one msgspec call when clean (:func:`rllog._format.jsonl.parse_lines`)."""
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return []
    problems: list[str] = []
    for first, _, lines in _iter_blocks(storage, name, size):
        problems += parse_lines(b"\n".join(lines) + b"\n", name, first)[1]
    return problems


def supersede(storage: Storage, point: int, note: Callable[..., None]) -> None:
    """Move metric rows whose position (:func:`resume_position`) is >= ``point`` to
    metrics.superseded.jsonl: appended there and made durable first, then cut from
    metrics.jsonl. ``note(message, problem=...)`` is told.

    The file is streamed in ranged reads of :data:`_CHUNK` bytes, so memory does not
    grow with it, and positions are read from the rows' bytes (:func:`resume_position`),
    so the time stays close to reading the file. When the moved rows are the file's
    tail (the usual case: steps grow) the file is truncated at the first of them (in
    place locally; on an object store the storage stages the kept prefix as one atomic
    write). When rows to keep come after rows to move, a local file is rewritten through
    a temp file and ``os.replace`` (atomic, streamed); on an object store the kept rows
    are assembled in memory and written in one PUT. Blank lines among moved rows are
    dropped; lines that are not JSON stay in place.
    """
    try:
        size = storage.size(METRICS_FILE)
    except FileNotFoundError:
        return
    first_moved: int | None = None  # byte offset of the first row to move
    kept_after = 0  # rows to keep that come after first_moved
    n_moved = n_kept = 0
    for _first, start, lines in _iter_blocks(storage, METRICS_FILE, size):
        positions = _positions(lines)
        moved = [_moves(p, point) for p in positions]
        if True in moved:
            if first_moved is None:
                i = moved.index(True)
                first_moved = start + sum(len(line) + 1 for line in lines[:i])
                kept_after -= sum(
                    p is not _BLANK and not m for p, m in zip(positions[:i], moved[:i], strict=True)
                )
            chosen = [line for line, m in zip(lines, moved, strict=True) if m]
            storage.append(SUPERSEDED_FILE, b"\n".join(chosen) + b"\n")
            n_moved += len(chosen)
        kept = sum(p is not _BLANK and not m for p, m in zip(positions, moved, strict=True))
        n_kept += kept
        if first_moved is not None:
            kept_after += kept
    if first_moved is None:
        return
    storage.flush(durable=True)  # moved rows are safe before any is cut
    if not kept_after:
        storage.truncate(METRICS_FILE, first_moved)
    elif isinstance(storage, LocalStorage):
        storage.write_chunks(METRICS_FILE, _kept_blocks(storage, size, point))
    else:
        storage.write(METRICS_FILE, b"".join(_kept_blocks(storage, size, point)))
    note(
        f"resuming at step {point}: moved {n_moved} metric rows with step >= {point} "
        f"to {SUPERSEDED_FILE} ({n_kept} rows kept)",
        problem=False,
    )


def missing_rows(storage: Storage, point: int, record: dict[str, Any]) -> str | None:
    """At resume: a message when metrics.jsonl lacks rows the checkpoint ``record`` was
    written after (a gap), else None. Rows that were fsynced before the record yet are
    gone mean the filesystem or disk acknowledged writes it had not made durable (power
    loss), or the file was cut.

    The last row before ``point`` (position by :func:`resume_position`) is compared with
    the record's ``last_logged_step`` when it has one (exact), else with ``point - 1``,
    allowing the largest step between consecutive rows (a loop that logs every 10th
    batch leaves 9 positions before a checkpoint). Streams the file in ranged reads.
    """
    try:
        size = storage.size(METRICS_FILE)
    except FileNotFoundError:
        size = 0
    last: int | float | None = None
    stride: int | float = 1
    for _first, _start, lines in _iter_blocks(storage, METRICS_FILE, size):
        for p in _positions(lines):
            if isinstance(p, (int, float)) and not isinstance(p, bool) and p < point:
                if last is not None and p > last:
                    stride = max(stride, p - last)
                last = p if last is None else max(last, p)
    logged = record.get("last_logged_step")
    expected: int | float
    slack: int | float
    if isinstance(logged, (int, float)) and not isinstance(logged, bool) and logged < point:
        expected, slack = logged, 0
    else:
        expected, slack = point - 1, stride - 1
    if expected < 0 or (last is not None and last >= expected - slack):
        return None
    have = "no row before it" if last is None else f"the last row before it is at {last:g}"
    gap = f"up to {expected:g}" if last is None else f"after {last:g} up to {expected:g}"
    return (
        f"checkpoint {record.get('name')!r} was written after rows up to position {expected:g}, but "
        f"{storage.url}/{METRICS_FILE} has {have}: the rows {gap} are missing. They were made "
        "durable before the record, so the filesystem or disk lost acknowledged writes (a power loss on "
        "storage that lies about fsync), or the file was cut. The run resumes at the record; the gap stays."
    )


def _kept_blocks(storage: Storage, size: int, point: int) -> Iterator[bytes]:
    """The first ``size`` bytes of metrics.jsonl without the rows :func:`supersede` moves
    and without blank lines, one piece per block read, each line ending in a newline."""
    for _, _, lines in _iter_blocks(storage, METRICS_FILE, size):
        keep = [
            line
            for line, p in zip(lines, _positions(lines), strict=True)
            if p is not _BLANK and not _moves(p, point)
        ]
        if keep:
            yield b"\n".join(keep) + b"\n"


_BATCH_KEY = b'"progress/batch"'
#: what follows the key when its value is a JSON number: ``: <number>`` then ``,`` or ``}``
_BATCH_VALUE = re.compile(rb"\s*:\s*(-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?)\s*[,}]")


def resume_position(line: bytes) -> Any:
    """Where a metrics row stands in the loop: its ``progress/batch`` when it has a number
    there (the loop's batch index, what checkpoint ``batch`` counts), else its ``step``.

    Like :func:`rllog._format.jsonl.row_step` for ``step``, a row shaped like the rows
    JSON writers produce (an object whose ``progress/batch`` key sits at its top level,
    holding a plain number) is read from its bytes up to that number, without decoding:
    resume reads every row of a long file, and decoding each one would cost several
    times reading the file. As there, the rest of the row is not validated and a second
    ``progress/batch`` key later in the row (which no JSON writer produces) is not looked
    for. Any other row (the key inside a nested object or a string, a ``NaN`` token, a
    non-number value) is decoded.

    Raises:
        ValueError: the line is not JSON.
    """
    i = line.find(_BATCH_KEY)
    if i > 0:
        m = _BATCH_VALUE.match(line, i + len(_BATCH_KEY))
        if (
            m is not None
            and line[0] == 0x7B  # {
            and line[i - 1] in b"{, \t"  # the quote opens a key: a quote inside a string is escaped
            and line.find(b"{", 1, i) < 0  # no object opens before the key: it is at the top level
            and (line[-1] == 0x7D or line.rstrip().endswith(b"}"))  # the row's object closes
        ):
            number, frac, exp = m.groups()
            return int(number) if frac is None and exp is None else float(number)
        row = decode_json(line)
        value = row.get("progress/batch") if isinstance(row, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return row_step(line)


def timestamped(stem: str, suffix: str, storage: Storage) -> str:
    """``stem.<UTC time>suffix``, with ``-2``, ``-3``... when that name is taken."""
    base = f"{stem}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    name, n = base + suffix, 1
    while storage.exists(name):
        n += 1
        name = f"{base}-{n}{suffix}"
    return name
