"""rllog: a complete, trustworthy record of every RL training run.

Public API::

    from rllog import RunLogger, logtree, read_run

See README.md for the files a run writes and DESIGN.md for their formats.
"""

from __future__ import annotations

from rllog.checkpoints import ResumeState
from rllog.config import load_config
from rllog.errors import ConfigError, RllogError, RunFormatError, StorageError, StoragePermanentError
from rllog.run_logger import RunLogger
from rllog.storage import FsspecStorage, LocalStorage, Storage, open_storage

__version__ = "0.1.0"

__all__ = [
    "RunLogger",
    "ResumeState",
    "load_config",
    "Storage",
    "LocalStorage",
    "FsspecStorage",
    "open_storage",
    "RllogError",
    "StorageError",
    "StoragePermanentError",
    "ConfigError",
    "RunFormatError",
]
