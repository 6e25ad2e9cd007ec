"""rllog: a complete, trustworthy record of every RL training run.

Public API::

    from rllog import RunLogger, logtree, read_run

See README.md for the files a run writes and DESIGN.md for their formats.
"""

from __future__ import annotations

from rllog import logtree
from rllog.checkpoints import ResumeState
from rllog.config import load_config
from rllog.doctor import Finding, Thresholds, check_run, diagnose
from rllog.errors import ConfigError, RllogError, RunFormatError, StorageError, StoragePermanentError
from rllog.index import write_index
from rllog.plot import plot_runs
from rllog.reader import MetricsTail, Run, read_run
from rllog.rollouts import (
    StepSummary,
    TrajectorySummary,
    build_rollout_summaries,
    read_rollouts,
    rollouts_dataframe,
    summarize_rollouts,
)
from rllog.run_logger import RunLogger
from rllog.storage import FsspecStorage, LocalStorage, Storage, open_storage

__version__ = "0.1.0"

__all__ = [
    "RunLogger",
    "logtree",
    "ResumeState",
    "read_run",
    "Run",
    "MetricsTail",
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
    # looking at runs: stability doctor, index page, plots
    "check_run",
    "diagnose",
    "Thresholds",
    "Finding",
    "write_index",
    "plot_runs",
    # rollout summaries (rllog.rollouts)
    "TrajectorySummary",
    "StepSummary",
    "build_rollout_summaries",
    "read_rollouts",
    "rollouts_dataframe",
    "summarize_rollouts",
]
