"""Storage: where a run's files go, on local disk or in an object store.

Every file rllog writes goes through a :class:`Storage`. Names are relative,
``/``-separated paths inside the run (``metrics.jsonl``, ``checkpoints/000010.npz``);
a name that is absolute, contains ``..``, a backslash or a NUL byte is refused with
``ValueError`` so nothing escapes ``log_path``.

Contract of every implementation (the conformance suite in ``tests/test_storage.py``
runs it against local disk, ``memory://``, the GCS emulator and moto's S3):

- ``read(name)`` returns the whole file as bytes, including bytes appended and not yet
  flushed; a missing file raises ``FileNotFoundError`` naming the URL.
- ``write(name, data)`` replaces the file atomically: a reader sees the old bytes or
  the new ones, never a mix (temp file + ``os.replace`` locally, one PUT on an object
  store).
- ``append(name, data)`` adds bytes at the end. Locally they reach the OS before it
  returns (``os.write`` on an ``O_APPEND`` descriptor): a killed process loses nothing
  that was appended. On an object store they are staged and uploaded by ``flush``.
- ``flush(durable=False)`` pushes staged appends to the backend; ``durable=True`` also
  fsyncs local files. ``close()`` flushes durably and is idempotent.
- ``list(prefix)`` returns the names of files (not folders) under the run whose name
  starts with ``prefix``, sorted.

Handles pickle as configuration (URL and options), so rollout workers in other
processes can open the same run.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rllog.errors import StorageError

__all__ = ["Storage", "LocalStorage", "FsspecStorage", "open_storage", "check_name"]


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe relative file name inside a run, else raise ValueError."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"storage name must be a non-empty str, got {name!r}")
    if "\x00" in name or "\\" in name or name.startswith("/") or name.endswith("/"):
        raise ValueError(f"storage name {name!r} must be a relative path with '/' separators")
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"storage name {name!r} has an empty, '.' or '..' part")
    return name


@runtime_checkable
class Storage(Protocol):
    """The protocol every backend implements; see the module docstring for the contract."""

    url: str

    def read(self, name: str) -> bytes: ...
    def read_range(self, name: str, start: int, end: int | None = None) -> bytes: ...
    def size(self, name: str) -> int: ...
    def write(self, name: str, data: bytes) -> None: ...
    def append(self, name: str, data: bytes) -> None: ...
    def exists(self, name: str) -> bool: ...
    def list(self, prefix: str = "") -> list[str]: ...
    def remove(self, name: str) -> None: ...
    def flush(self, durable: bool = False) -> None: ...
    def close(self) -> None: ...


class LocalStorage:
    """A run folder on local disk.

    ``append`` keeps one ``O_APPEND`` descriptor per file and calls ``os.write``: the
    bytes are in the OS page cache when it returns (~3.5 us for a 2 KB row), so a
    killed process loses nothing; a power loss can lose what was not fsynced, which
    ``flush(durable=True)`` (checkpoints, close) does. ``write`` is atomic: a temp file
    in the same folder, fsync, ``os.replace``.

    Raises ``OSError`` subclasses from the OS as they are (``FileNotFoundError``,
    ``PermissionError``, ``OSError(ENOSPC)``), with the path in the message.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self.root.mkdir(parents=True, exist_ok=True)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LocalStorage, (str(self.root),))

    def __repr__(self) -> str:
        return f"LocalStorage({self.url!r})"

    def path(self, name: str) -> Path:
        """The local path of ``name`` (checked with :func:`check_name`)."""
        return self.root / check_name(name)

    def read(self, name: str) -> bytes:
        return self.path(name).read_bytes()

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        with open(self.path(name), "rb") as f:
            f.seek(start)
            return f.read() if end is None else f.read(max(0, end - start))

    def size(self, name: str) -> int:
        return self.path(name).stat().st_size

    def write(self, name: str, data: bytes) -> None:
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        with self._lock:  # a later append must go to the new file, not the replaced one
            fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    def append_fd(self, name: str) -> int:
        """The kept-open ``O_APPEND`` descriptor of ``name``, opened on first use."""
        fd = self._fds.get(name)
        if fd is None:
            with self._lock:
                fd = self._fds.get(name)
                if fd is None:
                    path = self.path(name)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    self._fds[name] = fd
        return fd

    def append(self, name: str, data: bytes) -> None:
        fd = self.append_fd(name)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def list(self, prefix: str = "") -> list[str]:
        out = []
        for dirpath, _dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for fn in filenames:
                name = fn if rel == "." else f"{rel}/{fn}".replace(os.sep, "/")
                if name.startswith(prefix) and not fn.endswith(".tmp"):
                    out.append(name)
        return sorted(out)

    def remove(self, name: str) -> None:
        with self._lock:
            fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
        self.path(name).unlink()

    def flush(self, durable: bool = False) -> None:
        if durable:
            for fd in list(self._fds.values()):
                try:
                    os.fsync(fd)
                except OSError:  # closed concurrently by write/remove: nothing left to sync
                    pass

    def close(self) -> None:
        self.flush(durable=True)
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


class FsspecStorage:
    """A run under any fsspec URL (``memory://``, ``gs://``, ``s3://``, ...).

    ``write`` is one ``pipe_file`` (one PUT: atomic on object stores). ``append`` never
    uses fsspec mode ``"a"`` (gcsfs turns it into an overwrite): bytes are staged in
    memory and ``flush`` uploads them, so a crash loses what was appended since the
    last flush. A failed upload keeps the staged bytes and raises ``StorageError``;
    the next flush retries them.

    ``storage_options`` go to ``fsspec.core.url_to_fs`` (e.g. ``token="anon"``,
    ``endpoint_url=...``).
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.storage_options = storage_options
        self.fs, self._root = fsspec.core.url_to_fs(self.url, **storage_options)
        self._root = self._root.rstrip("/")
        self._staged: dict[str, bytearray] = {}
        self._lock = threading.RLock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_make_fsspec_storage, (self.url, self.storage_options))

    def __repr__(self) -> str:
        return f"FsspecStorage({self.url!r})"

    def _path(self, name: str) -> str:
        return f"{self._root}/{check_name(name)}"

    def _remote_read(self, name: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(name))
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.url}/{name}") from None

    def read(self, name: str) -> bytes:
        with self._lock:
            staged = bytes(self._staged.get(name, b""))
        try:
            return self._remote_read(name) + staged
        except FileNotFoundError:
            if staged:
                return staged
            raise

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        return self.read(name)[start:end]

    def size(self, name: str) -> int:
        with self._lock:
            staged = len(self._staged.get(name, b""))
        try:
            return int(self.fs.size(self._path(name))) + staged
        except FileNotFoundError:
            if staged:
                return staged
            raise FileNotFoundError(f"no such file: {self.url}/{name}") from None

    def write(self, name: str, data: bytes) -> None:
        with self._lock:
            self._flush_one(name)
            self.fs.pipe_file(self._path(name), bytes(data))

    def append(self, name: str, data: bytes) -> None:
        check_name(name)
        with self._lock:
            buf = self._staged.get(name)
            if buf is None:
                buf = self._staged[name] = bytearray()
            buf += data

    def exists(self, name: str) -> bool:
        with self._lock:
            if self._staged.get(name):
                return True
        return bool(self.fs.isfile(self._path(name)))

    def list(self, prefix: str = "") -> list[str]:
        try:
            found = self.fs.find(self._root)
        except FileNotFoundError:
            found = []
        root = self._root + "/"
        names = {p[len(root) :] for p in found if p.startswith(root)}
        with self._lock:
            names.update(n for n, b in self._staged.items() if b)
        return sorted(n for n in names if n.startswith(prefix))

    def remove(self, name: str) -> None:
        with self._lock:
            self._staged.pop(name, None)
        try:
            if not self.fs.isfile(self._path(name)):  # S3 deletes of missing keys succeed
                raise FileNotFoundError(name)
            self.fs.rm_file(self._path(name))
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.url}/{name}") from None

    def _flush_one(self, name: str) -> None:
        buf = self._staged.get(name)
        if not buf:
            return
        data = bytes(buf)
        try:
            try:
                old = self.fs.cat_file(self._path(name))
            except FileNotFoundError:
                old = b""
            self.fs.pipe_file(self._path(name), old + data)
        except FileNotFoundError:
            raise
        except Exception as exc:  # keep the staged bytes for the next flush
            raise StorageError(f"could not upload {len(data)} bytes to {self.url}/{name}: {exc}") from exc
        del buf[: len(data)]

    def flush(self, durable: bool = False) -> None:
        with self._lock:
            for name in list(self._staged):
                self._flush_one(name)

    def close(self) -> None:
        self.flush(durable=True)


def _make_fsspec_storage(url: str, options: dict[str, Any]) -> FsspecStorage:
    return FsspecStorage(url, **options)


def open_storage(log_path: str | os.PathLike[str] | Storage, **storage_options: Any) -> Storage:
    """Open the storage for ``log_path``.

    Args:
        log_path: a plain path or ``file://`` URL (:class:`LocalStorage`), any other
            fsspec URL such as ``memory://run``, ``gs://bucket/run``, ``s3://bucket/run``
            (:class:`FsspecStorage`), or an existing Storage, returned as it is.
        storage_options: passed to fsspec for URLs (ignored for local paths, with a
            warning).

    Raises:
        ValueError: if ``log_path`` is empty.
        ImportError: if the URL's fsspec backend is not installed (the message names
            the package, e.g. ``gcsfs`` or ``s3fs``).
    """
    if not isinstance(log_path, (str, os.PathLike)):
        if isinstance(log_path, Storage):
            return log_path
        raise TypeError(f"log_path must be a path, a URL or a Storage, got {type(log_path).__name__}")
    url = os.fspath(log_path)
    if not url:
        raise ValueError("log_path must not be empty")
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif "://" in url:
        return FsspecStorage(url, **storage_options)
    if storage_options:
        warnings.warn(f"storage_options {sorted(storage_options)} ignored for local path {url}", stacklevel=2)
    return LocalStorage(url)
