"""The exceptions rllog raises.

Every exception rllog raises on purpose derives from :class:`RllogError`, mixed with
the stdlib class a caller would already catch::

    RllogError
    ├── StorageError (OSError)        a backend refused or failed an operation
    │   ├── StoragePermanentError     the backend will keep failing (no bucket, no rights)
    │   └── ReadOnlyStorageError      a change through a handle opened for reading (also io.UnsupportedOperation)
    ├── ConfigError (ValueError)      a config could not be written or rebuilt
    └── RunFormatError (ValueError)   a run's files are not in the documented format

Misuse of the API (a metric value that is not a number or string, a bad step) raises
the builtin ``TypeError``/``ValueError`` directly, with the key and the value named.
"""

from __future__ import annotations

import io

__all__ = [
    "RllogError",
    "StorageError",
    "StoragePermanentError",
    "ReadOnlyStorageError",
    "ConfigError",
    "RunFormatError",
]


class RllogError(Exception):
    """Base class of every exception rllog raises on purpose."""


class StorageError(RllogError, OSError):
    """A storage backend failed an operation; the message names the URL."""


class StoragePermanentError(StorageError):
    """A storage failure that retrying will not fix (missing bucket, permission denied)."""


class ReadOnlyStorageError(StorageError, io.UnsupportedOperation):
    """A write, append, truncate or remove on a handle opened for reading
    (``open_storage(url, mode="r")``, what :func:`rllog.read_run` uses); names the call and the URL."""


class ConfigError(RllogError, ValueError):
    """A config could not be serialized to config.json or rebuilt from it."""


class RunFormatError(RllogError, ValueError):
    """A run file is not in the format docs/FORMATS.md describes; the message gives file and line."""
