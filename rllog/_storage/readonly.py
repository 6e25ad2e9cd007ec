"""ReadOnlyStorage: a reader of a run under an object-store URL.

What ``open_storage(url, mode="r")`` returns for ``gs://``, ``s3://``, ``memory://`` and
other fsspec URLs: the read path of :class:`~rllog._storage.staged.FsspecStorage`
(same retries, same hiding of ``.rllog-parts/``) without what a writer needs: no
background thread, no request at open, no local spill journal. Opening it is cheap and
leaves nothing behind, so readers (``read_run``, the command line, importers) can open
a run as often as they like.
"""

from __future__ import annotations

from typing import Any, NoReturn

from rllog._storage import objectops
from rllog._storage.base import check_name
from rllog.errors import ReadOnlyStorageError

__all__ = ["ReadOnlyStorage"]

#: FsspecStorage keyword arguments a reader accepts and ignores, so the options of a
#: writer can be passed to a reader as they are.
_WRITER_OPTIONS = ("flush_interval", "flush_timeout", "close_timeout", "spill")


class ReadOnlyStorage:
    """A run under an object-store URL, opened for reading only.

    Reads go straight to the backend (one request each, a few more on transient
    errors, see :func:`rllog._storage.objectops.call_with_retry`): it sees what writers
    have uploaded, not what they still have staged.

    Args:
        url: the run's URL (``gs://bucket/run``, ``s3://bucket/run``, ``memory://run``...).
        request_timeout: seconds one HTTP request may take.
        storage_options: passed to ``fsspec.core.url_to_fs`` (e.g. ``token="anon"``,
            ``endpoint_url=...``). The writer-only options ``flush_interval``,
            ``flush_timeout``, ``close_timeout`` and ``spill`` are accepted and ignored.

    Raises:
        ImportError: the backend's package (``gcsfs``, ``s3fs``) is missing.
        ValueError: ``request_timeout`` is not > 0.

    A missing bucket is not detected at open (no request is made): reads raise
    ``FileNotFoundError`` and ``list`` returns ``[]``; a refused permission raises
    :class:`rllog.errors.StoragePermanentError` from the first read.
    """

    def __init__(self, url: str, *, request_timeout: float = 30.0, **storage_options: Any) -> None:
        import fsspec

        if request_timeout <= 0:
            raise ValueError(f"request_timeout must be > 0 seconds, got {request_timeout}")
        for key in _WRITER_OPTIONS:
            storage_options.pop(key, None)
        self.url = url.rstrip("/")
        self.storage_options = storage_options
        self.request_timeout = request_timeout
        protocol = self.url.split("://", 1)[0]
        options = objectops.backend_options(protocol, storage_options, request_timeout)
        self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        self._root = root.rstrip("/")
        self._ops = objectops.make_ops(self.fs, "reader", self._root)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _make_readonly_storage,
            (self.url, dict(self.storage_options, request_timeout=self.request_timeout)),
        )

    def __repr__(self) -> str:
        return f"ReadOnlyStorage({self.url!r})"

    def _path(self, name: str) -> str:
        return f"{self._root}/{check_name(name)}"

    def _refuse(self, call: str, name: str) -> NoReturn:
        raise ReadOnlyStorageError(
            f"{call}({name!r}) refused: {self.url} is open read-only; "
            "open it with open_storage(url, mode='w') to change it"
        )

    # ------------------------------------------------------------------ reading

    def _size(self, name: str) -> int | None:
        stat = objectops.call_with_retry(f"stat {self.url}/{name}", self._ops.stat, self._path(name))
        return None if stat is None else stat.size

    def read(self, name: str) -> bytes:
        """The whole file. Raises FileNotFoundError (naming the URL), StorageError."""
        try:
            return objectops.call_with_retry(f"read {self.url}/{name}", self._ops.read, self._path(name))
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.url}/{name}") from None

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` (``end=None``: to the end), clipped to the size.
        Raises FileNotFoundError, StorageError."""
        size = self._size(name)
        if size is None:
            raise FileNotFoundError(f"no such file: {self.url}/{name}")
        stop = size if end is None else min(end, size)
        if start >= stop:
            return b""
        return objectops.call_with_retry(
            f"read {self.url}/{name}", self._ops.read_range, self._path(name), start, stop
        )

    def size(self, name: str) -> int:
        """Bytes in the file. Raises FileNotFoundError, StorageError."""
        size = self._size(name)
        if size is None:
            raise FileNotFoundError(f"no such file: {self.url}/{name}")
        return size

    def exists(self, name: str) -> bool:
        """True if the file exists. Raises StorageError."""
        return self._size(name) is not None

    def list(self, prefix: str = "") -> list[str]:
        """Names of the files under the run starting with ``prefix``, sorted (part
        objects of writers in progress excluded). Raises StorageError."""
        return sorted(n for n in objectops.list_names(self.fs, self._root, self.url) if n.startswith(prefix))

    def pending(self) -> dict[str, int]:
        """Always ``{}``: a reader stages nothing."""
        return {}

    # ------------------------------------------------------------------ refused

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        """Raises :class:`ReadOnlyStorageError`."""
        self._refuse("write", name)

    def append(self, name: str, data: bytes) -> None:
        """Raises :class:`ReadOnlyStorageError`."""
        self._refuse("append", name)

    def truncate(self, name: str, size: int) -> None:
        """Raises :class:`ReadOnlyStorageError`."""
        self._refuse("truncate", name)

    def remove(self, name: str) -> None:
        """Raises :class:`ReadOnlyStorageError`."""
        self._refuse("remove", name)

    # ------------------------------------------------------------------ no-ops

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        """Nothing to push: a no-op."""

    def close(self, timeout: float | None = None) -> None:
        """Nothing to release: a no-op (idempotent; the handle stays usable)."""


def _make_readonly_storage(url: str, options: dict[str, Any]) -> ReadOnlyStorage:
    return ReadOnlyStorage(url, **options)
