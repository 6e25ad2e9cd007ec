"""open_storage: the Storage for a path or URL, for writing (``mode="w"``) or reading (``mode="r"``)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Literal

from rllog._storage.base import Storage
from rllog._storage.local import LocalStorage
from rllog._storage.readonly import ReadOnlyStorage
from rllog._storage.staged import FsspecStorage

__all__ = ["open_storage"]


def open_storage(
    log_path: str | os.PathLike[str] | Storage,
    mode: Literal["w", "r"] = "w",
    **storage_options: Any,
) -> Storage:
    """Open the storage for ``log_path``.

    Args:
        log_path: a plain path or ``file://`` URL (:class:`LocalStorage`), any other
            fsspec URL such as ``memory://run``, ``gs://bucket/run``, ``s3://bucket/run``,
            or an existing Storage, returned as it is.
        mode: ``"w"`` (default) opens a writer: :class:`FsspecStorage` for URLs (an
            upload thread, a probe request at open, a local spill journal). ``"r"`` opens
            a reader: :class:`ReadOnlyStorage` for URLs (no thread, no request at open,
            no local state; write calls raise). Local paths give a
            :class:`LocalStorage` in both modes; it creates nothing until written.
        storage_options: passed to fsspec for URLs (ignored for local paths, with a
            warning); for ``mode="w"`` also :class:`FsspecStorage`'s keyword arguments.

    Raises:
        ValueError: ``log_path`` is empty or ``mode`` is not ``"w"`` or ``"r"``.
        TypeError: ``log_path`` is neither a path, a URL nor a Storage.
        ImportError: the URL's fsspec backend is not installed (the message names the
            package, e.g. ``gcsfs`` or ``s3fs``).
        StoragePermanentError: (``mode="w"``) the bucket is missing or refuses access.
    """
    if mode not in ("w", "r"):
        raise ValueError(f"open_storage mode must be 'w' (write) or 'r' (read only), got {mode!r}")
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
        if mode == "r":
            return _readonly(url, storage_options)
        return _staged(url, storage_options)
    if storage_options:
        warnings.warn(f"storage_options {sorted(storage_options)} ignored for local path {url}", stacklevel=2)
    return _local(url)


def _local(path: str) -> LocalStorage:
    return LocalStorage(path)


def _staged(url: str, options: dict[str, Any]) -> FsspecStorage:
    return FsspecStorage(url, **options)


def _readonly(url: str, options: dict[str, Any]) -> ReadOnlyStorage:
    return ReadOnlyStorage(url, **options)
