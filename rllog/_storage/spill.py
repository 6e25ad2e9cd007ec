"""The local spill journal: what one cloud writer staged and has not uploaded yet.

Every byte given to ``FsspecStorage.append``/``write`` is also written here (``os.write``
on an ``O_APPEND`` file, ~4 us a row, no network) so that a killed process loses nothing
the next writer on the same machine can recover. Layout, one folder per writer::

    <spill root>/<sha256(url)[:16]>/<writer id>/
        lock                      flock held while the writer lives
        url                       the run URL, for humans
        <quoted name>.tail        bytes appended to <name> (truncated when all uploaded)
        <quoted name>.base.<n>    whole-file content staged by write(), if any
        <quoted name>.state       {"done": bytes of .tail uploaded, "base": file or null,
                                   "intent": {"offset", "size_before", "length"} or null}

``.state`` is replaced atomically, so after a crash it is consistent with itself: the
bytes still to upload are ``base`` (if any) followed by ``tail[done:]``. ``intent``
records an upload that was in flight (``tail[offset:offset+length]`` sent to land at
``size_before``): the recovering writer checks whether it landed before re-sending it.
A folder whose lock nobody holds belongs to a dead writer and is adopted by the next
writer of the same URL on this machine, which uploads its bytes before its own.

What a crash loses: nothing that ``append`` wrote (it is in the OS when ``append``
returns); a torn last row (killed mid-``os.write``) is dropped by :meth:`SpillJournal.load`.
A power loss can lose what the OS had not written out (the journal does not fsync).

The staged storage talks to a journal through :class:`Journal`; :data:`NULL_JOURNAL`
is the journal of a writer without one (``memory://``, ``spill=False``, or after a
local disk error), so the storage calls it unconditionally.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from rllog._storage.fileio import write_all

try:
    import fcntl
except ImportError:  # Windows: no adoption of dead writers' journals
    fcntl = None  # type: ignore[assignment]

DEFAULT_ROOT = "~/.cache/rllog/spill"

__all__ = [
    "Journal",
    "NullJournal",
    "NULL_JOURNAL",
    "SpillJournal",
    "Spilled",
    "spill_root",
    "run_folder",
    "JournalInfo",
    "list_journals",
    "clear_journal",
]


class Journal(Protocol):
    """What the staged storage records in a spill journal. Calls are serialized by the
    caller. Every method raises ``OSError`` on a local disk error (the caller then
    switches to :data:`NULL_JOURNAL` and keeps the bytes in memory only)."""

    @property
    def folder(self) -> Path | None:
        """The journal's folder, or None for a writer without one."""
        ...

    def append(self, name: str, data: bytes) -> None:
        """Record ``data`` appended to ``name`` (in the OS when this returns)."""
        ...

    def stage_write(self, name: str, data: bytes) -> None:
        """Record ``data`` as the whole new content of ``name`` (drops earlier appends)."""
        ...

    def set_intent(self, name: str, size_before: int, length: int) -> None:
        """Record that ``length`` bytes of ``name`` are being uploaded to land after byte ``size_before``."""
        ...

    def committed(self, name: str, nbytes: int, base_done: bool, now_empty: bool) -> None:
        """Record that ``nbytes`` of the tail (and the base, if ``base_done``) are uploaded."""
        ...

    def remove_name(self, name: str) -> None:
        """Forget everything recorded for ``name``."""
        ...

    def close(self, discard: bool) -> None:
        """Release the journal; ``discard`` deletes what it holds (everything was uploaded)."""
        ...


class NullJournal:
    """The journal of a writer without one: records nothing, never fails."""

    folder: Path | None = None

    def append(self, name: str, data: bytes) -> None:
        pass

    def stage_write(self, name: str, data: bytes) -> None:
        pass

    def set_intent(self, name: str, size_before: int, length: int) -> None:
        pass

    def committed(self, name: str, nbytes: int, base_done: bool, now_empty: bool) -> None:
        pass

    def remove_name(self, name: str) -> None:
        pass

    def close(self, discard: bool) -> None:
        pass


#: The shared :class:`NullJournal` (it holds no state).
NULL_JOURNAL = NullJournal()


def spill_root() -> Path:
    """``$RLLOG_SPILL_DIR`` or ``~/.cache/rllog/spill``."""
    return Path(os.environ.get("RLLOG_SPILL_DIR") or DEFAULT_ROOT).expanduser()


def run_folder(root: Path, url: str) -> Path:
    """The folder under ``root`` holding the journals of every writer of ``url``."""
    return root / hashlib.sha256(url.encode()).hexdigest()[:16]


@dataclass
class Spilled:
    """What a journal holds for one file: upload ``base`` (if not None) then ``tail``."""

    base: bytes | None
    tail: bytes
    intent: tuple[int, int] | None  # (size_before, length) of an upload in flight


def _lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None if another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if fcntl is None:
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


class SpillJournal:
    """One writer's spill folder (see the module docstring). Not thread-safe: the
    caller serializes calls."""

    def __init__(self, folder: Path, lock_fd: int) -> None:
        self.folder = folder
        self._lock_fd: int | None = lock_fd
        self._fds: dict[str, int] = {}
        self._state: dict[str, dict[str, Any]] = {}

    @classmethod
    def create(cls, run_dir: Path, writer_id: str, url: str) -> SpillJournal:
        folder = run_dir / writer_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "url").write_text(url + "\n")
        fd = _lock(folder / "lock")
        if fd is None:  # writer ids are unique per process: only a reused id gets here
            raise OSError(f"spill folder {folder} is locked by another process")
        return cls(folder, fd)

    @classmethod
    def orphans(cls, run_dir: Path) -> list[SpillJournal]:
        """Journals of dead writers of this run (oldest first), now locked by us."""
        if fcntl is None or not run_dir.is_dir():
            return []
        found = []
        for folder in sorted(run_dir.iterdir(), key=lambda p: p.stat().st_mtime):
            if folder.is_dir() and (folder / "lock").exists():
                fd = _lock(folder / "lock")
                if fd is not None:
                    found.append(cls(folder, fd))
        return found

    @property
    def writer_id(self) -> str:
        return self.folder.name

    def _file(self, name: str, suffix: str) -> Path:
        return self.folder / (quote(name, safe="") + suffix)

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            fd = os.open(self._file(name, ".tail"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[name] = fd
        return fd

    def _get_state(self, name: str) -> dict[str, Any]:
        state = self._state.get(name)
        if state is None:
            try:
                state = json.loads(self._file(name, ".state").read_text())
            except (FileNotFoundError, ValueError):
                state = {"done": 0, "base": None, "intent": None}
            self._state[name] = state
        return state

    def _put_state(self, name: str, **changes: object) -> None:
        state = self._get_state(name)
        state.update(changes)
        path = self._file(name, ".state")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, path)

    def load(self) -> dict[str, Spilled]:
        """Everything not yet uploaded, per file name."""
        out = {}
        for path in self.folder.glob("*.tail"):
            name = unquote(path.name[: -len(".tail")])
            state = self._get_state(name)
            data = path.read_bytes()
            done = state["done"] if state["done"] <= len(data) else len(data)  # truncated, then crashed
            base = None
            if state["base"]:
                try:
                    base = (self.folder / state["base"]).read_bytes()
                except FileNotFoundError:
                    base = None
            intent = state.get("intent")
            valid = intent and intent["offset"] == done and done + intent["length"] <= len(data)
            tail = data[done:]
            cut = tail.rfind(b"\n") + 1
            if 0 < cut < len(tail):  # killed in the middle of a row: drop the torn row
                tail = tail[:cut]
            if base is not None or tail:
                out[name] = Spilled(
                    base,
                    tail,
                    (intent["size_before"], intent["length"]) if intent and valid and base is None else None,
                )
        return out

    def append(self, name: str, data: bytes) -> None:
        write_all(self._fd(name), data)

    def stage_write(self, name: str, data: bytes) -> None:
        """Stage ``data`` as the whole new content of ``name`` (drops earlier appends)."""
        old = self._get_state(name).get("base")
        base = f"{quote(name, safe='')}.base.{time.monotonic_ns()}"
        (self.folder / base).write_bytes(data)
        os.ftruncate(self._fd(name), 0)
        self._put_state(name, done=0, base=base, intent=None)
        if old:
            (self.folder / old).unlink(missing_ok=True)

    def set_intent(self, name: str, size_before: int, length: int) -> None:
        state = self._get_state(name)
        self._put_state(name, intent={"offset": state["done"], "size_before": size_before, "length": length})

    def committed(self, name: str, nbytes: int, base_done: bool, now_empty: bool) -> None:
        """``nbytes`` of the tail (and the base, if ``base_done``) are uploaded."""
        state = self._get_state(name)
        old_base = state["base"] if base_done else None
        if now_empty:
            os.ftruncate(self._fd(name), 0)
            self._put_state(name, done=0, base=None if base_done else state["base"], intent=None)
        else:
            done = state["done"] + nbytes
            self._put_state(name, done=done, base=None if base_done else state["base"], intent=None)
        if old_base:
            (self.folder / old_base).unlink(missing_ok=True)

    def remove_name(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        state = self._state.pop(name, None) or {}
        for path in (self._file(name, ".tail"), self._file(name, ".state")):
            path.unlink(missing_ok=True)
        if state.get("base"):
            (self.folder / state["base"]).unlink(missing_ok=True)

    def close(self, discard: bool) -> None:
        """Release the lock; ``discard`` deletes the folder (everything was uploaded)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if discard:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


# -- by hand: `rllog spill list|upload|clear` ----------------------------------------------


@dataclass
class JournalInfo:
    """One writer's spill folder as `rllog spill list` shows it.

    ``orphan``: no live process holds its lock (its writer died or was killed before its
    bytes were uploaded); the next writer of ``url`` on this machine would adopt it.
    ``pending``: bytes still to upload per file name (for a live writer: the bytes of its
    ``.tail`` files on disk, an upper bound). ``modified``: seconds since the epoch.
    """

    folder: Path
    url: str
    orphan: bool
    pending: dict[str, int]
    modified: float


def list_journals(root: Path | None = None) -> list[JournalInfo]:
    """Every writer folder under ``root`` (default :func:`spill_root`), oldest first.

    An orphan's lock is taken for the moment of reading it, then released.
    """
    root = spill_root() if root is None else root
    out: list[JournalInfo] = []
    if not root.is_dir():
        return out
    for run_dir in root.iterdir():
        if not run_dir.is_dir():
            continue
        for folder in run_dir.iterdir():
            if not (folder / "lock").is_file():
                continue
            try:
                url = (folder / "url").read_text().strip()
            except OSError:
                url = "?"
            fd = _lock(folder / "lock") if fcntl is not None else None
            if fd is not None:
                journal = SpillJournal(folder, fd)
                try:
                    pending = {n: len(s.base or b"") + len(s.tail) for n, s in journal.load().items()}
                finally:
                    journal.close(discard=False)
            else:
                pending = {unquote(p.name[: -len(".tail")]): p.stat().st_size for p in folder.glob("*.tail")}
            out.append(JournalInfo(folder, url, fd is not None, pending, folder.stat().st_mtime))
    return sorted(out, key=lambda j: j.modified)


def clear_journal(info: JournalInfo) -> bool:
    """Delete an orphan's folder (its bytes are lost); False when a live writer holds it."""
    fd = _lock(info.folder / "lock") if fcntl is not None else None
    if fd is None:
        return False
    SpillJournal(info.folder, fd).close(discard=True)
    try:
        info.folder.parent.rmdir()  # the run's folder, when no other writer is left in it
    except OSError:
        pass
    return True
