"""rllog: a complete, trustworthy record of every RL training run.

Write a run inside the training loop, read it afterwards::

    from rllog import RunLogger, logtree, read_run

    with RunLogger("runs/exp1", config=cfg, resume=True) as logger:
        logger.log_metrics(step, {"env/all/reward/total": reward})

    run = read_run("runs/exp1")

The names below are the public API. Topical public modules: :mod:`rllog.storage`
(backends), :mod:`rllog.logtree` (rollout reports), :mod:`rllog.doctor` (stability
checks), :mod:`rllog.index` (the run page), :mod:`rllog.plot`, :mod:`rllog.importers`
and :mod:`rllog.testing` (a storage conformance suite and a fault-injecting storage for
your own tests). File formats: docs/FORMATS.md; how the package is built: README.md,
"How rllog is built".
"""

from __future__ import annotations

from rllog import logtree
from rllog._format.records import ResumeState, StepSummary, TrajectorySummary
from rllog._read.config import load_config
from rllog._read.rollouts import read_rollouts, rollouts_dataframe
from rllog._read.run import Run, read_run
from rllog._run import RunLogger
from rllog._write.rollouts import build_rollout_summaries, summarize_rollouts
from rllog.errors import ConfigError, RllogError, RunFormatError, StorageError, StoragePermanentError
from rllog.storage import Storage, open_storage

__version__ = "0.2.0"

__all__ = [
    # writing a run
    "RunLogger",
    "ResumeState",
    "logtree",
    "build_rollout_summaries",
    "summarize_rollouts",
    "TrajectorySummary",
    "StepSummary",
    # reading a run
    "read_run",
    "Run",
    "read_rollouts",
    "rollouts_dataframe",
    "load_config",
    # where a run lives
    "Storage",
    "open_storage",
    # errors
    "RllogError",
    "StorageError",
    "StoragePermanentError",
    "ConfigError",
    "RunFormatError",
    "__version__",
]
