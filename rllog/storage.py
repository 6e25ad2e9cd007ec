"""Storage: where a run's files go, on local disk or in an object store.

Every file rllog writes goes through a :class:`Storage`. Names are relative,
``/``-separated paths inside the run (``metrics.jsonl``, ``checkpoints/000010.npz``);
a name that is absolute, contains ``..``, a backslash or a NUL byte is refused with
``ValueError`` (:func:`check_name`) so nothing escapes ``log_path``. Sizes and offsets
are bytes; timeouts are seconds.

Contract of every implementation (:class:`rllog.testing.StorageConformance` checks it;
the repository runs it against local disk, ``memory://``, the GCS emulator and moto's S3):

- ``read(name)`` returns the whole file as bytes, including bytes appended and not yet
  flushed; a missing file raises ``FileNotFoundError`` naming the URL.
  ``read_range(name, start, end)`` returns ``[start, end)`` clipped to the size.
- ``write(name, data)`` replaces the file atomically: a reader sees the old bytes or
  the new ones, never a mix (temp file + ``os.replace`` locally, one PUT on an object
  store).
- ``append(name, data)`` adds bytes at the end. Locally they reach the OS before it
  returns (``os.write`` on an ``O_APPEND`` descriptor): a killed process loses nothing
  that was appended. On an object store they are staged (memory and a local spill
  journal) and uploaded in the background; see :class:`FsspecStorage`. A crash in the
  middle of an append may leave a torn last line, which readers drop.
- ``truncate(name, size)`` cuts a file to its first ``size`` bytes, atomically (in place
  locally; on an object store the object is cut where it lies: S3 server-side, GCS by
  streaming the prefix back in bounded pieces; see :meth:`FsspecStorage.cut`).
- ``pending()`` is the bytes not yet on the backend, per name (``{}`` when writes go
  straight through), so a caller can see whether a slow upload makes progress.
- ``flush(durable=False, timeout=None)`` pushes staged appends to the backend and
  waits at most ``timeout`` seconds (``None``: the handle's default);
  ``durable=True`` also fsyncs local files and raises ``StorageError`` if not
  everything got through. ``close(timeout=None)`` flushes durably and is idempotent.
- ``list(prefix)`` returns the names of files (not folders) under the run whose name
  starts with ``prefix``, sorted.
- Errors are ``OSError``s: ``FileNotFoundError``, ``rllog.errors.StorageError`` (a
  backend failed), ``StoragePermanentError`` (retrying will not help).

Open with :func:`open_storage`: ``mode="w"`` (a writer: :class:`LocalStorage` or
:class:`FsspecStorage`) or ``mode="r"`` (a reader: :class:`LocalStorage` or
:class:`ReadOnlyStorage`, which starts no thread, makes no request at open, keeps no
local state and refuses writes).

Handles pickle as configuration (URL and options), so rollout workers in other
processes can open the same run.
"""

from __future__ import annotations

from rllog._storage.base import Storage, check_name
from rllog._storage.local import LocalStorage
from rllog._storage.opener import open_storage
from rllog._storage.readonly import ReadOnlyStorage
from rllog._storage.staged import FsspecStorage

__all__ = ["Storage", "LocalStorage", "FsspecStorage", "ReadOnlyStorage", "open_storage", "check_name"]
