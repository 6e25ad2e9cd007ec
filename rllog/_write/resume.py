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
from itertools import accumulate, chain
from operator import sub
from typing import Any

from rllog._format.codec import decode_json
from rllog._format.jsonl import TAIL_WINDOW, last_line_crc, parse_lines
from rllog._format.layout import LOCK_FILE, METRICS_FILE, SUPERSEDED_FILE, TORN_SUFFIX
from rllog._format.records import METRICS_AT_KEY
from rllog.errors import StorageError
from rllog.storage import LocalStorage, Storage

__all__ = [
    "lock_run",
    "unlock_run",
    "repair_torn_tail",
    "supersede",
    "damaged_lines",
    "missing_rows_message",
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


#: bytes per ranged read of a bucket while resuming (memory: about one block, plus the longest line)
_CHUNK = 8 << 20
#: bytes per local read: a block that stays in the CPU cache while its lines are scanned
#: (1 MiB scans ~20 % faster than 8 MiB)
_LOCAL_CHUNK = 1 << 20
#: bytes of moved rows copied at once (locally), while the scan goes on: their writeback
#: overlaps the scan, so the fsync before the cut finds them mostly on disk
_COPY_PIECE = 8 << 20
#: bytes of moved rows staged for a bucket before they are uploaded (memory while moving)
_STAGED_MOVE = 16 << 20
#: what a line is when it has no position: blank; not JSON; JSON but not an object.
#: Blank lines are dropped where rows are rewritten; the other two stay in place and are named.
_BLANK, _NOT_JSON, _NOT_OBJECT = object(), object(), object()

_BATCH_KEY = b'"progress/batch"'
#: what follows the key when its value is a JSON number: ``: <number>`` then ``,`` or ``}``
_BATCH_VALUE = re.compile(rb"\s*:\s*(-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?)\s*[,}]")
#: the row shape rllog (and json.dumps of a dict in logging order) writes when the loop
#: logs ``progress/batch`` first: ``{"step": 3, "progress/batch": 3, ...`` (an int batch)
_ROW_HEAD = re.compile(rb'\{"step": ?-?\d+, ?"progress/batch": ?(-?(?:0|[1-9]\d*))[,}]')
_STEP_HEAD = re.compile(rb'\{\s*"step"\s*:\s*(-?\d+)\s*[,}]')


def _holder(storage: Storage, name: str) -> tuple[Storage, str]:
    """The storage that holds ``name`` and its name there: a rank's view
    (:class:`rllog._write.rank.RankStorage`) is seen through, so its local files get the
    local fast paths."""
    from rllog._write.rank import RankStorage

    if isinstance(storage, RankStorage):
        return storage.inner, storage.file_name(name)
    return storage, name


def _blocks(
    storage: Storage, name: str, size: int, start: int = 0
) -> Iterator[tuple[bytes | bytearray, int, int]]:
    """``(buf, n, offset)`` over bytes ``[start, size)`` of ``name`` (``start`` at a line
    boundary): ``buf[:n]`` holds
    whole lines (each ending in ``\\n``, but an unterminated last line of the file), the
    first at byte ``offset`` of the file. ``buf`` is valid until the next step: locally
    it is one reused buffer filled with ``preadv`` (no allocation per block); elsewhere
    the bytes of :data:`_CHUNK`-byte ranged reads. Memory: about one block plus the
    longest line."""
    if size <= start:
        return
    inner, real = _holder(storage, name)
    if isinstance(inner, LocalStorage):
        yield from _local_blocks(inner.path(real), size, start)
        return
    rest, offset, pos = b"", start, start
    while pos < size:
        data = storage.read_range(name, pos, min(size, pos + _CHUNK))
        if not data:
            break  # the file shrank under us: what was read is all there is
        pos += len(data)
        data = rest + data if rest else data
        end = len(data) if pos >= size else data.rfind(b"\n") + 1
        if end:
            yield data, end, offset
            offset += end
        rest = data[end:]
    if rest:
        yield rest, len(rest), offset


def _local_blocks(path: Any, size: int, start: int) -> Iterator[tuple[bytearray, int, int]]:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buf = bytearray(_LOCAL_CHUNK)
        have, pos, offset = 0, start, start  # bytes held, next byte to read, file offset of buf[0]
        while pos < size:
            if have == len(buf):  # one line longer than the buffer: make room for it
                buf.extend(bytes(len(buf)))
            with memoryview(buf) as view:
                k = os.preadv(fd, [view[have : have + min(len(buf) - have, size - pos)]], pos)
            if not k:
                break  # the file shrank under us
            have, pos = have + k, pos + k
            end = have if pos >= size else buf.rfind(b"\n", 0, have) + 1
            if end:
                yield buf, end, offset
                buf[: have - end] = buf[end:have]
                offset, have = offset + end, have - end
        if have:
            yield buf, have, offset
    finally:
        os.close(fd)


def _line_position(buf: bytes | bytearray, a: int, b: int) -> Any:
    """:func:`resume_position` of the line ``buf[a:b]`` (no newline), read in place
    (nothing copied for the usual rows); :data:`_BLANK`, :data:`_NOT_JSON` or
    :data:`_NOT_OBJECT` for a line with no position."""
    if b > a and buf[a] == 0x7B and (buf[b - 1] == 0x7D or bytes(buf[a:b]).rstrip().endswith(b"}")):
        i = buf.find(_BATCH_KEY, a, b)  # the row's object opens here and closes at its end
        if i < 0:
            m = _STEP_HEAD.match(buf, a, b)
            if m is not None:
                return int(m[1])
        else:
            m = _BATCH_VALUE.match(buf, i + len(_BATCH_KEY), b)
            # the quote opens a key (a quote inside a string is escaped) and no object opens
            # before it (it is at the top level)
            if m is not None and buf[i - 1] in b"{, \t" and buf.find(b"{", a + 1, i) < 0:
                number, frac, exp = m.groups()
                return int(number) if frac is None and exp is None else float(number)
    line = bytes(buf[a:b])
    if not line.strip():
        return _BLANK
    try:
        row = decode_json(line)
    except ValueError:
        return _NOT_JSON
    if not isinstance(row, dict):
        return _NOT_OBJECT
    value = row.get("progress/batch")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return row.get("step")


def _block_positions(buf: bytes | bytearray, n: int) -> tuple[list[Any], bool]:
    """The position (:func:`_line_position`) of every line of ``buf[:n]``, and whether
    any line was not an int read from the usual row head (then the list holds other
    things than ints). The loop that all of resume's time goes into: two C searches and
    an int per usual row."""
    out: list[Any] = []
    add = out.append
    head = _ROW_HEAD.match
    find = buf.find
    mixed = False
    pos = 0
    while pos < n:
        j = find(b"\n", pos, n)
        if j < 0:
            j = n
        m = head(buf, pos, j)
        if m is not None and buf[j - 1] == 0x7D:
            add(int(m[1]))
        else:
            add(_line_position(buf, pos, j))
            mixed = True
        pos = j + 1
    return out, mixed


def _moves(position: Any, point: int) -> bool:
    return (position.__class__ is int or position.__class__ is float) and position >= point


def damaged_lines(storage: Storage, name: str) -> list[str]:
    """One message per line of ``name`` that is not a JSON object (what every reader
    skips), with its line number; every line fully parsed (msgspec), streamed in
    :data:`_CHUNK`-byte blocks. For small files (checkpoints.jsonl); metrics.jsonl is
    checked by :func:`supersede` in its one pass."""
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return []
    problems: list[str] = []
    lines = 0
    for buf, n, _ in _blocks(storage, name, size):
        data = bytes(buf[:n])
        problems += parse_lines(data if data.endswith(b"\n") else data + b"\n", name, lines + 1)[1]
        lines += data.count(b"\n") + (not data.endswith(b"\n"))
    return problems


class _Pieces:
    """The moved rows, as pieces of metrics.superseded.jsonl in file order: locally
    ``(metrics file, start, end)`` ranges (adjacent ones joined, at most
    :data:`_COPY_PIECE` bytes) that :meth:`rllog.storage.LocalStorage.write_chunks`
    copies inside the kernel; elsewhere the bytes, one piece per block."""

    def __init__(self, storage: Storage, size: int, ends_in_newline: bool) -> None:
        inner, self.source = _holder(storage, METRICS_FILE)
        self.local = isinstance(inner, LocalStorage)
        self.size, self.ends_in_newline = size, ends_in_newline
        self.start = self.end = 0  # the range not handed out yet (local)
        self.chunks: list[bytes] = []  # the bytes of this block (elsewhere)
        self.ready: list[bytes | tuple[str, int, int]] = []

    def add(self, buf: bytes | bytearray, a: int, b: int, offset: int) -> None:
        """Move bytes ``[a, b)`` of ``buf``, which are bytes ``[offset + a, offset + b)`` of the file."""
        if not self.local:
            self.chunks.append(bytes(buf[a:b]))
            return
        if self.end != offset + a:
            self._range()
            self.start = offset + a
        self.end = offset + b
        if self.end - self.start >= _COPY_PIECE:  # copied (its writeback started) while the scan goes on
            self._range()

    def _range(self) -> None:
        if self.end > self.start:
            self.ready.append((self.source, self.start, self.end))
            if self.end == self.size and not self.ends_in_newline:
                self.ready.append(b"\n")
            self.start = self.end

    def take(self, last: bool = False) -> list[bytes | tuple[str, int, int]]:
        """The pieces complete after a block (``last``: after the last one)."""
        if last:
            self._range()
        if self.chunks:
            data = b"".join(self.chunks)
            self.chunks = []
            self.ready.append(data if data.endswith(b"\n") else data + b"\n")
        ready, self.ready = self.ready, []
        return ready


def _move(storage: Storage, pieces: Iterator[bytes | tuple[str, int, int]]) -> None:
    """Add the moved rows (:func:`_scan`'s pieces) to metrics.superseded.jsonl while the
    scan runs. Locally the file is rewritten whole, its old content and the new rows
    copied inside the kernel into a temp file that replaces it (fsynced, ``os.replace``),
    so a crash leaves it as it was or with every new row, never with part of a row.
    Elsewhere the pieces are appended (staged whole: an upload never tears one) and
    uploaded every :data:`_STAGED_MOVE` bytes, so memory holds at most that much of them.
    Nothing is written when nothing moves."""
    first = next(pieces, None)
    if first is None:
        return
    inner, target = _holder(storage, SUPERSEDED_FILE)
    if isinstance(inner, LocalStorage):
        try:
            old = inner.size(target)
        except FileNotFoundError:
            old = 0
        head: list[bytes | tuple[str, int, int]] = [(target, 0, old)] if old else []
        inner.write_chunks(target, chain(head, [first], pieces))
        return
    staged = 0
    for piece in chain([first], pieces):
        assert isinstance(piece, bytes)
        storage.append(SUPERSEDED_FILE, piece)
        staged += len(piece)
        if staged >= _STAGED_MOVE:  # a bucket stages appends in memory until they are uploaded
            storage.flush(durable=True)
            staged = 0


class _Scan:
    """What one pass over metrics.jsonl found (see :func:`supersede`)."""

    def __init__(self, hold_kept: bool = False) -> None:
        self.lines = 0
        self.damaged: list[str] = []
        self.last: int | float | None = None  # the highest position below the point
        self.stride: int | float = 1  # the largest step up between rows below the point
        self.first_moved: int | None = None  # byte offset of the first moved row
        self.moved = self.kept = self.kept_after = 0  # rows; kept_after: kept rows after first_moved
        #: the kept rows after the first moved one, when asked to hold them (buckets: the cut adds them)
        self.kept_lines: list[bytes] | None = [] if hold_kept else None

    def keep(self, line: bytes) -> None:
        if self.kept_lines is not None:
            self.kept_lines.append(line if line.endswith(b"\n") else line + b"\n")

    def below(self, positions: list[int | float]) -> None:
        """Fold in the positions (numbers, in file order) of rows below the point."""
        if not positions:
            return
        if self.last is not None:
            positions = [self.last, *positions]
        # the running maximum (each step up is a stride); rows usually come in order: then it is them
        highest = positions if positions == sorted(positions) else list(accumulate(positions, max))
        self.stride = max(self.stride, max(map(sub, highest[1:], highest[:-1]), default=0))
        self.last = highest[-1]

    def damage(
        self,
        buf: bytes | bytearray,
        n: int,
        positions: list[Any],
        mixed: bool,
        first_line: int | None,
        offset: int,
    ) -> None:
        """Name the lines of the block that are not JSON objects (:data:`_NOT_JSON`,
        :data:`_NOT_OBJECT`) or not UTF-8, as :func:`rllog._format.jsonl.parse_lines` does:
        by line number (``first_line``: the block's first), or by byte offset when the
        scan did not start at the file's first line (``first_line=None``)."""
        clean = buf.isascii()  # the whole buffer (bytes past n too): ASCII there is ASCII here
        if not clean:
            try:
                str(memoryview(buf)[:n], "utf-8")
                clean = True
            except UnicodeDecodeError:
                pass
        if clean and (not mixed or (_NOT_JSON not in positions and _NOT_OBJECT not in positions)):
            return
        pos = 0
        for k, p in enumerate(positions):
            j = buf.find(b"\n", pos, n)
            j = n if j < 0 else j
            line = None
            if p is _NOT_JSON or p is _NOT_OBJECT:
                line = bytes(buf[pos:j])
            elif not clean and p is not _BLANK and not bytes(buf[pos:j]).isascii():
                try:
                    bytes(buf[pos:j]).decode("utf-8")
                except UnicodeDecodeError:
                    line = bytes(buf[pos:j])
            if line is not None:
                if p is _NOT_OBJECT:
                    what = "expected a JSON object"
                else:
                    try:
                        decode_json(line)
                        what = "not UTF-8"
                    except ValueError as exc:
                        what = f"not JSON ({exc})"
                where = f"line {first_line + k}" if first_line is not None else f"line at byte {offset + pos}"
                self.damaged.append(f"{METRICS_FILE} {where}: {what}; line skipped: {line[:80]!r}")
            pos = j + 1


def _scan(
    scan: _Scan, storage: Storage, size: int, point: int | None, start: int = 0
) -> Iterator[bytes | tuple[str, int, int]]:
    """The one pass of :func:`supersede` over bytes ``[start, size)`` of metrics.jsonl:
    fills ``scan`` (positions of every line, damage, the rows below the point, the first
    moved row, the kept rows after it) and yields the rows at or past the point as
    :class:`_Pieces`, as it meets them."""
    pieces = None
    if point is not None and size > start:
        pieces = _Pieces(storage, size, storage.read_range(METRICS_FILE, size - 1, size) == b"\n")
    for buf, n, offset in _blocks(storage, METRICS_FILE, size, start):
        positions, mixed = _block_positions(buf, n)
        scan.damage(buf, n, positions, mixed, scan.lines + 1 if not start else None, offset)
        scan.lines += len(positions)
        numbers = positions
        if mixed:
            numbers = [p for p in positions if (p.__class__ is int or p.__class__ is float) and p == p]
        if point is None or not numbers or max(numbers) < point:
            scan.below(numbers)
            if scan.first_moved is None:
                scan.kept += len(numbers) if not mixed else sum(p is not _BLANK for p in positions)
            else:
                _tally(scan, buf, n, positions)
            continue
        assert pieces is not None
        if not mixed and min(numbers) >= point:  # the whole block moves (the usual tail): no walk
            if scan.first_moved is None:
                scan.first_moved = offset
            scan.moved += len(numbers)
            pieces.add(buf, 0, n, offset)
            yield from pieces.take()
            continue
        scan.below([p for p in numbers if p < point])
        pos = 0
        run = -1  # start of the moved lines not handed out yet
        run_end = 0
        for p in positions:
            j = buf.find(b"\n", pos, n)
            nl = n if j < 0 else j + 1
            if p is _BLANK:
                pass  # neither kept nor moved: a run of moved rows goes on across it
            elif _moves(p, point):
                if scan.first_moved is None:
                    scan.first_moved = offset + pos
                if run < 0:
                    run = pos
                run_end = nl
                scan.moved += 1
            else:
                if run >= 0:
                    pieces.add(buf, run, run_end, offset)
                    run = -1
                scan.kept += 1
                if scan.first_moved is not None:
                    scan.kept_after += 1
                    scan.keep(bytes(buf[pos:nl]))
            pos = nl
        if run >= 0:
            pieces.add(buf, run, run_end, offset)
        yield from pieces.take()
    if pieces is not None:
        yield from pieces.take(last=True)


def _tally(scan: _Scan, buf: bytes | bytearray, n: int, positions: list[Any]) -> None:
    """Count (and hold, when asked) a block's rows, none of which moves, after the first moved row."""
    kept = sum(p is not _BLANK for p in positions)
    scan.kept += kept
    scan.kept_after += kept
    if scan.kept_lines is None:
        return
    if kept == len(positions):
        scan.keep(bytes(buf[:n]))
        return
    pos = 0
    for p in positions:
        j = buf.find(b"\n", pos, n)
        nl = n if j < 0 else j + 1
        if p is not _BLANK:
            scan.keep(bytes(buf[pos:nl]))
        pos = nl


def _kept_after(storage: Storage, size: int, start: int, point: int) -> Iterator[bytes]:
    """The rows of metrics.jsonl from byte ``start`` on that :func:`supersede` keeps (no
    blank lines), one piece per block, each line ending in a newline."""
    for buf, n, _offset in _blocks(storage, METRICS_FILE, size, start):
        positions, _ = _block_positions(buf, n)
        keep: list[bytes] = []
        pos = 0
        for p in positions:
            j = buf.find(b"\n", pos, n)
            nl = n if j < 0 else j + 1
            if p is not _BLANK and not _moves(p, point):
                line = bytes(buf[pos:nl])
                keep.append(line if line.endswith(b"\n") else line + b"\n")
            pos = nl
        if keep:
            yield b"".join(keep)


def supersede(
    storage: Storage, point: int | None, note: Callable[..., None], record: dict[str, Any] | None = None
) -> None:
    """Resume's one pass over metrics.jsonl: move metric rows whose position
    (:func:`resume_position`) is >= ``point`` to metrics.superseded.jsonl (appended there
    and made durable first, then cut from metrics.jsonl), name damaged lines, and, given
    the checkpoint ``record`` resumed from, say when rows logged before it are missing.
    ``note(message, problem=...)`` is told. ``point=None``: nothing moves (the point
    could not be told); damage is still named.

    Where the pass starts: a record rllog wrote says where metrics.jsonl stood when it
    was taken (``metrics_at``: its size and the CRC-32 of its last line,
    :meth:`rllog._write.metrics.MetricsWriter.file_position`). When the file still holds
    that prefix (at least that many bytes, the same last line there), only the rows
    after it are read: the rows logged after the checkpoint, the ones a re-run repeats
    (docs/FORMATS.md §2); the cost is that of those rows, whatever the file's length, and
    a bucket serves them with ranged reads of the tail. Rows logged before the record
    stay, whatever their position. A shorter file is a gap (rows made durable before the
    record are gone: named, then the whole file is read); another last line (the file
    was rewritten since), a record without ``metrics_at`` (other writers, older rllog) or
    no record: the whole file is read, every row at or past the point moves, and the gap
    check compares the last row before the point with the record
    (:func:`missing_rows_message`).

    Cost: the rows are read once, in blocks (locally 1 MiB ``preadv`` into one reused
    buffer; buckets :data:`_CHUNK`-byte ranged reads), so memory does not grow with the
    file, and each row costs two C searches and an int (:func:`_block_positions`): no
    row is decoded, so damage inside a row whose frame is intact (``{`` ... ``}``, its
    position readable) is left to the readers' full check (``rllog doctor``); lines that
    are not framed objects or not UTF-8 are named. Moved rows go to
    metrics.superseded.jsonl as the scan meets them (:func:`_move`: locally copied inside
    the kernel into a new copy of that file, their writeback overlapping the scan; on a
    bucket staged as appends). Then:

    - moved rows are the file's tail (the usual case: steps grow): the file is cut at
      the first of them, in place locally; on a bucket by the storage's ``cut`` (S3:
      server-side, nothing downloaded or uploaded; GCS: the prefix streamed back);
    - rows to keep come after rows to move: locally the file is rewritten through a
      temp file (the prefix before the first moved row copied inside the kernel, then
      the kept rows after it, streamed; ``os.replace``); on a bucket the storage's
      ``cut`` keeps the prefix and adds the kept rows after it (held in memory from
      the pass: usually a few late evaluation rows; a run restarted without resume and
      then resumed from before the restart holds the restarted rows).

    Crash safety: metrics.superseded.jsonl gets every moved row or none (locally an
    ``os.replace`` of its fsynced new copy; on a bucket whole staged appends), the moved
    rows are durable (fsync / uploaded) before anything is cut, and the cut is atomic
    (an in-place truncate at a line boundary, an ``os.replace``, or one object write),
    so a crash at any instant leaves every row in metrics.jsonl or
    metrics.superseded.jsonl (possibly in both: the next resume moves them again), no
    torn line, and at most a temp file that the next open removes. Blank lines among moved rows are dropped or moved; lines that are not
    JSON stay in place.
    """
    try:
        size = storage.size(METRICS_FILE)
    except FileNotFoundError:
        size = 0
    start, held = _resume_from(storage, size, record) if point is not None else (0, None)
    inner, real = _holder(storage, METRICS_FILE)
    scan = _Scan(hold_kept=not isinstance(inner, LocalStorage))
    _move(storage, _scan(scan, storage, size, point, start))
    if scan.damaged:
        more = f"; and {len(scan.damaged) - 3} more" if len(scan.damaged) > 3 else ""
        note(
            f"{storage.url}/{METRICS_FILE} has {len(scan.damaged)} damaged line(s) that every reader skips "
            f"(the rows on them are lost to readers): {'; '.join(scan.damaged[:3])}{more}"
        )
    if point is None:
        return
    if record is not None and not start:
        gap = missing_rows_message(storage, point, record, scan.last, scan.stride, held)
        if gap is not None:
            note(gap)
    if scan.first_moved is None:
        return
    storage.flush(durable=True)  # moved rows are safe before any is cut
    if not scan.kept_after:
        storage.truncate(METRICS_FILE, scan.first_moved)
    elif isinstance(inner, LocalStorage):
        inner.write_chunks(
            real, chain([(real, 0, scan.first_moved)], _kept_after(storage, size, scan.first_moved, point))
        )
    elif callable(getattr(inner, "cut", None)):
        inner.cut(real, scan.first_moved, b"".join(scan.kept_lines or ()))  # type: ignore[attr-defined]
    else:
        storage.write(METRICS_FILE, b"".join(_kept_after(storage, size, 0, point)))
    before = (
        f"{scan.kept} rows kept"
        if not start
        else f"{scan.kept} rows after it kept; the rows logged before the checkpoint were not read"
    )
    note(
        f"resuming at step {point}: moved {scan.moved} metric rows with step >= {point} "
        f"to {SUPERSEDED_FILE} ({before})",
        problem=False,
    )


def _resume_from(storage: Storage, size: int, record: dict[str, Any] | None) -> tuple[int, int | None]:
    """``(byte where supersede's pass starts, bytes the file held when the record was
    taken if it holds fewer now, else None)`` from the record's ``metrics_at`` (see
    :func:`supersede`): its byte when the file holds at least that many bytes and the
    same last line before it, else 0."""
    at = record.get(METRICS_AT_KEY) if record is not None else None
    if not isinstance(at, dict):
        return 0, None
    offset, crc = at.get("bytes"), at.get("last_line_crc32")
    if not (isinstance(offset, int) and isinstance(crc, int)) or isinstance(offset, bool) or offset <= 0:
        return 0, None
    if size < offset:
        return 0, offset
    if last_line_crc(storage.read_range(METRICS_FILE, max(0, offset - TAIL_WINDOW), offset)) != crc:
        return 0, None  # rewritten since the record was taken: read it all
    return offset, None


def missing_rows_message(
    storage: Storage,
    point: int,
    record: dict[str, Any],
    last: int | float | None,
    stride: int | float,
    held: int | None = None,
) -> str | None:
    """At resume: a message when metrics.jsonl lacks rows the checkpoint ``record`` was
    written after (a gap), else None. ``last`` is the highest row position below
    ``point`` (:func:`resume_position`), ``stride`` the largest step up between such
    rows (both from :func:`supersede`'s pass); ``held``: the bytes the file held when
    the record was taken, when it holds fewer now (its ``metrics_at``: a gap for sure).
    Rows that were fsynced before the record yet are gone mean the filesystem or disk
    acknowledged writes it had not made durable (power loss), or the file was cut.

    ``last`` is compared with the record's ``last_logged_step`` when it has one (exact),
    else with ``point - 1``, allowing ``stride`` (a loop that logs every 10th batch
    leaves 9 positions before a checkpoint).
    """
    logged = record.get("last_logged_step")
    expected: int | float
    slack: int | float
    if isinstance(logged, (int, float)) and not isinstance(logged, bool) and logged < point:
        expected, slack = logged, 0
    else:
        expected, slack = point - 1, stride - 1
    size = "" if held is None else f" (it held {held} bytes when the record was taken; fewer now)"
    if held is None and (expected < 0 or (last is not None and last >= expected - slack)):
        return None
    if last is not None and last >= expected - slack:  # the rows cut were the last ones before the record
        have, gap = f"its last row before it at {last:g}", "logged last before the record"
    else:
        have = "no row before it" if last is None else f"the last row before it is at {last:g}"
        gap = f"up to {expected:g}" if last is None else f"after {last:g} up to {expected:g}"
    return (
        f"checkpoint {record.get('name')!r} was written after rows up to position {expected:g}, but "
        f"{storage.url}/{METRICS_FILE} has {have}{size}: the rows {gap} are missing. They were made "
        "durable before the record, so the filesystem or disk lost acknowledged writes (a power loss on "
        "storage that lies about fsync), or the file was cut. The run resumes at the record; the gap stays."
    )


def resume_position(line: bytes) -> Any:
    """Where a metrics row stands in the loop: its ``progress/batch`` when it has a number
    there (the loop's batch index, what checkpoint ``batch`` counts), else its ``step``
    (None when it has neither).

    Like :func:`rllog._format.jsonl.row_step` for ``step``, a row shaped like the rows
    JSON writers produce (an object whose ``progress/batch`` key sits at its top level,
    holding a plain number, the line ending with the object's ``}``) is read from its
    bytes up to that number, without decoding: resume reads every row of a long file,
    and decoding each one would cost several times reading the file. As there, the rest
    of the row is not validated and a second ``progress/batch`` key later in the row
    (which no JSON writer produces) is not looked for. Any other row (the key inside a
    nested object or a string, a ``NaN`` token, a non-number value) is decoded.

    Raises:
        ValueError: the line is not JSON.
    """
    position = _line_position(line, 0, len(line))
    if position is _BLANK or position is _NOT_JSON:
        raise ValueError(f"not JSON: {line[:80]!r}")
    return None if position is _NOT_OBJECT else position


def timestamped(stem: str, suffix: str, storage: Storage) -> str:
    """``stem.<UTC time>suffix``, with ``-2``, ``-3``... when that name is taken."""
    base = f"{stem}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    name, n = base + suffix, 1
    while storage.exists(name):
        n += 1
        name = f"{base}-{n}{suffix}"
    return name
