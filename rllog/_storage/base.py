"""The Storage protocol, name checking and :func:`open_storage`.

The storage layer moves bytes; it knows nothing of run files. See :class:`Storage`
for the contract every backend keeps; :mod:`rllog.testing` checks it
(:class:`rllog.testing.StorageConformance`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Storage", "check_name"]


def check_name(name: str) -> str:
    """Return ``name`` if it is a safe relative file name inside a run.

    A name is a non-empty, relative, ``/``-separated path (``metrics.jsonl``,
    ``checkpoints/000010.npz``).

    Raises:
        ValueError: ``name`` is not a str, is empty, absolute, ends with ``/``, holds a
            backslash or a NUL byte, or has an empty, ``.`` or ``..`` part (so nothing
            escapes the run's root).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"storage name must be a non-empty str, got {name!r}")
    if "\x00" in name or "\\" in name or name.startswith("/") or name.endswith("/"):
        raise ValueError(f"storage name {name!r} must be a relative path with '/' separators")
    if any(part in ("", ".", "..") for part in name.split("/")):
        raise ValueError(f"storage name {name!r} has an empty, '.' or '..' part")
    return name


@runtime_checkable
class Storage(Protocol):
    """Where a run's files go: a flat set of named byte strings under one ``url``.

    Names are checked with :func:`check_name` by every call (``ValueError``). Sizes and
    offsets are in bytes, timeouts in seconds. Every error a backend raises is an
    ``OSError`` (``FileNotFoundError`` for a missing file, ``rllog.errors.StorageError``
    for a backend failure, ``StoragePermanentError`` when retrying will not help); the
    message names the URL and the file.

    Handles pickle as configuration (URL and options, never staged bytes), so another
    process can open the same run from a pickled handle.
    """

    #: The run's location: a local absolute path or an fsspec URL, without a trailing ``/``.
    url: str

    def read(self, name: str) -> bytes:
        """The whole file, including bytes appended and not yet flushed by this handle.

        Raises:
            FileNotFoundError: no such file (the message names the URL).
            StorageError: the backend failed after retries.
        """
        ...

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file (``end=None``: to the end), clipped to its size.

        Raises: as :meth:`read`.
        """
        ...

    def size(self, name: str) -> int:
        """The file's size in bytes, unflushed appends included. Raises: as :meth:`read`."""
        ...

    def write(self, name: str, data: bytes) -> None:
        """Replace the whole file with ``data``, atomically: a reader sees the old bytes or
        the new ones, never a mix. Appends staged before it are dropped.

        A crash before the write is durable leaves the old content (locally the write is
        durable when it returns; on an object store after the next flush).

        Raises:
            OSError: the write failed (``ENOSPC``, ``EACCES``...); the old content is kept.
        """
        ...

    def append(self, name: str, data: bytes) -> None:
        """Add ``data`` at the end of the file, creating it. Not atomic with respect to a
        crash: a crash may keep a prefix of ``data`` (readers drop a torn last line).

        Raises:
            OSError: the bytes could not be handed to the OS or staged.
        """
        ...

    def truncate(self, name: str, size: int) -> None:
        """Cut the file to its first ``size`` bytes (local: in place; object store: one
        atomic rewrite of the object where it lies, after what is staged is uploaded).

        Raises:
            FileNotFoundError: no such file.
            ValueError: ``size`` is negative or larger than the file.
        """
        ...

    def exists(self, name: str) -> bool:
        """True if the file exists (unflushed appends count)."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Names of the files (not folders) whose name starts with ``prefix``, sorted.
        Internal files (temp files, ``.rllog-parts/``) are not listed."""
        ...

    def remove(self, name: str) -> None:
        """Delete the file now, unflushed bytes included. Raises FileNotFoundError."""
        ...

    def pending(self) -> dict[str, int]:
        """Bytes written or appended and not yet on the backend, per file name (only
        names with bytes pending). ``{}`` for backends that write through, so a caller
        can tell whether a slow flush is making progress."""
        ...

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        """Push what was appended and written to the backend.

        Args:
            durable: also make it survive a power loss (fsync locally); with ``durable``
                a failure raises, without it a backend may warn once instead.
            timeout: seconds to wait at most (``None``: the handle's default); ignored by
                backends that never wait (local disk).

        Raises:
            StorageError: (``durable=True``) not pushed within ``timeout``, or an fsync
                failed; the bytes stay staged.
        """
        ...

    def close(self, timeout: float | None = None) -> None:
        """Flush durably and release resources. Idempotent.

        Args:
            timeout: seconds to wait for the last upload (``None``: the handle's
                default); ignored by local disk.
        """
        ...
