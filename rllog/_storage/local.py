"""LocalStorage: a run folder on local disk."""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rllog._storage.base import check_name
from rllog._storage.fileio import copy_range, write_all
from rllog.errors import StorageError

__all__ = ["LocalStorage", "remove_stale_tmp"]


class LocalStorage:
    """A run folder on local disk.

    ``append`` keeps one ``O_APPEND`` descriptor per file and calls ``os.write``: the
    bytes are in the OS page cache when it returns (~3.5 us for a 2 KB row), so a
    killed process loses nothing; a power loss can lose what was not fsynced, which
    ``flush(durable=True)`` (checkpoints, close) does. ``write`` is atomic: a temp file
    in the same folder, fsync, ``os.replace``; a crash leaves the old file (and at most
    a ``.tmp`` file, never listed).

    Nothing is created until the first write or append: opening a mistyped path for
    reading leaves no folder behind.

    The run folder is rllog's alone: every file it writes (appends, atomic writes, their
    temp files, the folders under the root) is opened without following symlinks
    (``O_NOFOLLOW``, folder by folder from the root with ``dir_fd``; temp files
    ``O_CREAT | O_EXCL`` with an unpredictable name), so a symlink (or a hard link, a
    FIFO) planted in the run folder is refused with :class:`StorageError` and what it
    points at is never written. The root itself may be a symlink (the user chose it).

    Raises ``OSError`` subclasses from the OS as they are (``FileNotFoundError``,
    ``OSError(ENOSPC)``), with the path in the message; :class:`StorageError` for a
    planted link and for a folder rllog may not write (``EACCES``, ``EROFS``).
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()  # guards _fds

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStorage, (str(self.root),))

    def __repr__(self) -> str:
        return f"LocalStorage({self.url!r})"

    def path(self, name: str) -> Path:
        """The local path of ``name`` (checked with :func:`check_name`)."""
        return self.root / check_name(name)

    def read(self, name: str) -> bytes:
        """The whole file. Raises FileNotFoundError (naming the path), OSError."""
        return self.path(name).read_bytes()

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` (``end=None``: to the end), clipped to the file's size."""
        with open(self.path(name), "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def size(self, name: str) -> int:
        """Bytes in the file. Raises FileNotFoundError."""
        return self.path(name).stat().st_size

    def _refuse(self, name: str, exc: OSError) -> OSError:
        """The error for a failed open of ``name``: StorageError for a planted link or a
        folder that may not be written, ``exc`` itself otherwise."""
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            return StorageError(
                f"refusing to write {self.url}/{name}: it (or a folder on its way) is a symlink or not a "
                "regular file; rllog never writes through a link planted in a run folder. Remove it"
            )
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return StorageError(
                f"cannot write {self.url}/{name}: {exc.strerror} (the run folder is not writable)"
            )
        return exc

    def _dir_fd(self, name: str) -> tuple[int, str]:
        """``(fd of the folder holding name, leaf name)``: the folders under the root are
        created and opened one by one, never through a symlink. The caller closes ``fd``.

        Raises:
            StorageError: a folder on the way is a symlink or not a folder, or not writable.
        """
        parts = check_name(name).split("/")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise self._refuse(name, exc) from exc
        try:
            for part in parts[:-1]:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = sub
        except OSError as exc:
            os.close(fd)
            raise self._refuse(name, exc) from exc
        return fd, parts[-1]

    def _open_leaf(self, name: str, flags: int) -> int:
        """Open the file ``name`` for writing with ``flags | O_NOFOLLOW``; refuse what is
        not a regular file of its own (a FIFO, a hard link to another file)."""
        dfd, leaf = self._dir_fd(name)
        try:
            fd = os.open(leaf, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dfd)
        except OSError as exc:
            raise self._refuse(name, exc) from exc
        finally:
            os.close(dfd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise self._refuse(name, OSError(errno.ELOOP, "not a regular file of its own"))
        return fd

    def write(self, name: str, data: bytes) -> None:
        """Replace ``name`` atomically and durably (a temp file with an unpredictable name
        created with ``O_EXCL``, fsync, ``os.replace``). Raises OSError (``ENOSPC``...)
        with the old content kept; StorageError when ``name`` or a folder on its way is a
        symlink (nothing is written) or the folder is not writable."""
        self.write_chunks(name, (data,))

    def write_chunks(self, name: str, chunks: Iterable[bytes | tuple[str, int, int]]) -> None:
        """:meth:`write` from an iterable of pieces, written as they come (memory bounded by
        one piece): bytes, or ``(source, start, end)``, bytes ``[start, end)`` of the file
        ``source`` of this folder (``name`` itself included: its content before this
        write), copied inside the kernel (:func:`rllog._storage.fileio.copy_range`: no byte
        passes through Python) with their writeback started at once
        (``posix_fadvise(POSIX_FADV_DONTNEED)``), so a long file assembled piece by piece
        while the caller does other work finds its final fsync nearly done. A file cut at
        ``keep`` with other bytes after it: ``[(name, 0, keep), b"..."]``; a file with
        ranges of another appended: ``[(name, 0, size), (other, a, b)]``.

        Raises as :meth:`write`, or what ``chunks`` raises, with the old content kept (a
        crash leaves at most a temp file, removed at the next open of the run,
        :func:`remove_stale_tmp`); ``FileNotFoundError`` for a missing source, ``ValueError``
        for a range outside it."""
        sources: dict[str, int] = {}
        try:
            self._write_chunks(name, chunks, sources)
        finally:
            for fd in sources.values():
                os.close(fd)

    def _write_chunks(
        self, name: str, chunks: Iterable[bytes | tuple[str, int, int]], sources: dict[str, int]
    ) -> None:
        dfd, leaf = self._dir_fd(name)
        # unpredictable (O_EXCL), and named by its writer's pid so remove_stale_tmp finds it after a crash
        tmp = f".{leaf}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
        try:
            try:
                fd = os.open(
                    tmp,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                    0o644,
                    dir_fd=dfd,
                )
            except OSError as exc:
                raise self._refuse(name, exc) from exc
            try:
                try:
                    at = 0
                    for piece in chunks:
                        if isinstance(piece, tuple):
                            at += self._copy_in(fd, at, *piece, sources)
                        else:
                            write_all(fd, piece)
                            at += len(piece)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                try:
                    if stat.S_ISLNK(os.stat(leaf, dir_fd=dfd, follow_symlinks=False).st_mode):
                        raise self._refuse(name, OSError(errno.ELOOP, "a symlink"))
                except FileNotFoundError:
                    pass
                os.replace(tmp, leaf, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=dfd)
                except FileNotFoundError:
                    pass
                raise
        finally:
            os.close(dfd)
        with self._lock:  # a later append must go to the new file, not the replaced one
            old = self._fds.pop(name, None)
        if old is not None:
            os.close(old)

    def _copy_in(self, fd: int, at: int, source: str, start: int, end: int, sources: dict[str, int]) -> int:
        """Copy bytes ``[start, end)`` of ``source`` to byte ``at`` of ``fd`` in the kernel and
        start their writeback; leaves ``fd``'s offset after them. Returns the bytes copied."""
        src = sources.get(source)
        if src is None:
            src = sources[source] = os.open(self.path(source), os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(src).st_size
        if not 0 <= start <= end <= size:
            raise ValueError(f"cannot copy bytes [{start}, {end}) of {self.url}/{source} ({size} bytes)")
        copy_range(src, fd, start, end, at)
        if end > start and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, at, end - start, os.POSIX_FADV_DONTNEED)
        os.lseek(fd, at + end - start, os.SEEK_SET)
        return end - start

    def append_fd(self, name: str) -> int:
        """The kept-open ``O_APPEND`` descriptor of ``name``, opened on first use (never
        through a symlink: StorageError)."""
        fd = self._fds.get(name)
        if fd is None:
            with self._lock:
                fd = self._fds.get(name)
                if fd is None:
                    # readable too: if the name is deleted, relink() reads the content back through it
                    fd = self._open_leaf(name, os.O_RDWR | os.O_APPEND | os.O_CREAT)
                    self._fds[name] = fd
        return fd

    def relink(self) -> dict[str, int]:
        """Files appended to through a kept-open descriptor whose name is gone (the run
        folder deleted mid-run, ``rm -rf``): each one's whole content is still readable
        through its descriptor, so it is read back and written again under its name (the
        folders recreated, :meth:`write`); later appends go to the new file. Costs one
        ``fstat`` per kept-open file when nothing is gone.

        Returns:
            ``{name: bytes rescued}`` per recreated file; ``{}`` when none was gone.

        Raises:
            OSError: rewriting a file failed (the old descriptor is kept: a later call retries).
        """
        with self._lock:
            gone = {name: fd for name, fd in self._fds.items() if os.fstat(fd).st_nlink == 0}
        rescued: dict[str, int] = {}
        for name, fd in gone.items():
            size = os.fstat(fd).st_size
            chunks, offset = [], 0
            while offset < size:
                chunk = os.pread(fd, min(size - offset, 1 << 20), offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
            self.write(name, b"".join(chunks))  # closes the old descriptor
            rescued[name] = offset
        return rescued

    def append(self, name: str, data: bytes) -> None:
        """``os.write`` ``data`` at the end of ``name``: in the OS when this returns, so a
        killed process loses nothing; a power loss may lose what was not fsynced."""
        write_all(self.append_fd(name), data)

    def truncate(self, name: str, size: int) -> None:
        """Cut ``name`` to ``size`` bytes in place (same file, so open descriptors stay
        valid). Not atomic against a crash, which may leave the longer file.

        Raises:
            FileNotFoundError: no such file.
            ValueError: ``size`` is negative or larger than the file.
        """
        current = self.size(name)
        if not 0 <= size <= current:
            raise ValueError(f"cannot truncate {self.url}/{name} ({current} bytes) to {size} bytes")
        fd = self._open_leaf(name, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def exists(self, name: str) -> bool:
        """True if ``name`` is a file."""
        return self.path(name).is_file()

    def list(self, prefix: str = "") -> list[str]:
        """Names of the files under the folder starting with ``prefix``, sorted (``.tmp``
        files of writes in progress and rllog's own ``.rllog*`` files excluded)."""
        out: list[str] = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for fn in filenames:
                name = fn if rel == "." else f"{rel}/{fn}".replace(os.sep, "/")
                if name.startswith(prefix) and not fn.endswith(".tmp") and not fn.startswith(".rllog"):
                    out.append(name)
        return sorted(out)

    def remove(self, name: str) -> None:
        """Delete ``name``. Raises FileNotFoundError."""
        with self._lock:
            fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self.path(name).unlink()

    def pending(self) -> dict[str, int]:
        """Always ``{}``: appends reach the OS before they return."""
        return {}

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        """With ``durable``, fsync every file appended to; ``timeout`` is ignored (an
        fsync cannot be given up on).

        Raises:
            StorageError: an fsync failed (EIO, ENOSPC...): what was appended may not be
                on disk.
        """
        if durable:
            with self._lock:  # write/remove close descriptors under this lock
                for name, fd in self._fds.items():
                    try:
                        os.fsync(fd)
                    except OSError as exc:
                        raise StorageError(f"fsync of {self.url}/{name} failed: {exc}") from exc

    def close(self, timeout: float | None = None) -> None:
        """fsync and close every descriptor. Idempotent; ``timeout`` is ignored.

        Raises:
            StorageError: (after closing every descriptor) an fsync failed.
        """
        try:
            self.flush(durable=True)
        finally:
            with self._lock:
                fds, self._fds = self._fds, {}
            for fd in fds.values():
                os.close(fd)


def remove_stale_tmp(root: str | os.PathLike[str]) -> list[str]:
    """Delete the temp files (``.<name>.<pid>.<random>.tmp``) that :meth:`LocalStorage.write`
    calls of dead processes left under ``root`` when they were killed mid-write; returns
    their paths relative to ``root``. A temp file of a live process (a worker writing a
    report right now) is kept. Symlinks are neither followed nor removed."""
    removed: list[str] = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for fn in filenames:
            parts = fn.split(".")
            if not (fn.startswith(".") and fn.endswith(".tmp") and len(parts) >= 5 and parts[-3].isdigit()):
                continue
            if _alive(int(parts[-3])):
                continue
            path = os.path.join(dirpath, fn)
            if os.path.islink(path):
                continue
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(os.path.relpath(path, root))
    return sorted(removed)


def _alive(pid: int) -> bool:
    """True if process ``pid`` exists (ours included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by another user
        return True
    return True
