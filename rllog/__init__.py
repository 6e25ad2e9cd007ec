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

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllog import logtree
    from rllog._format.records import ResumeState, StepSummary, TrajectorySummary
    from rllog._read.config import load_config
    from rllog._read.rollouts import read_rollouts, rollouts_dataframe
    from rllog._read.run import Run, read_run
    from rllog._run import RunLogger
    from rllog._write.rollouts import build_rollout_summaries, summarize_rollouts
    from rllog.errors import (
        ConfigError,
        ReadOnlyStorageError,
        RllogError,
        RunFormatError,
        StorageError,
        StoragePermanentError,
    )
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
    "ReadOnlyStorageError",
    "ConfigError",
    "RunFormatError",
    "__version__",
]

# Each public name is imported on first use (PEP 562), so `import rllog` and every `rllog`
# command start without loading the write side, the read side and their dependencies.
_WHERE = {
    "RunLogger": "rllog._run",
    "ResumeState": "rllog._format.records",
    "TrajectorySummary": "rllog._format.records",
    "StepSummary": "rllog._format.records",
    "logtree": "rllog.logtree",
    "build_rollout_summaries": "rllog._write.rollouts",
    "summarize_rollouts": "rllog._write.rollouts",
    "read_run": "rllog._read.run",
    "Run": "rllog._read.run",
    "read_rollouts": "rllog._read.rollouts",
    "rollouts_dataframe": "rllog._read.rollouts",
    "load_config": "rllog._read.config",
    "Storage": "rllog.storage",
    "open_storage": "rllog.storage",
    "RllogError": "rllog.errors",
    "StorageError": "rllog.errors",
    "StoragePermanentError": "rllog.errors",
    "ReadOnlyStorageError": "rllog.errors",
    "ConfigError": "rllog.errors",
    "RunFormatError": "rllog.errors",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'rllog' has no attribute {name!r}; the public names are rllog.__all__")
    module = importlib.import_module(where)
    value = module if name == "logtree" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
