"""The public contract: the names in ``rllog.__all__``, what ``import rllog`` pulls in, the
null logger of ranks that do not write, and argument orders that agree across the API."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys

import pytest

import rllog
from rllog import RunLogger

PUBLIC = {
    "RunLogger", "ResumeState", "logtree", "build_rollout_summaries", "summarize_rollouts",
    "TrajectorySummary", "StepSummary", "read_run", "Run", "read_rollouts", "rollouts_dataframe",
    "load_config", "Storage", "open_storage", "RllogError", "StorageError", "StoragePermanentError",
    "ConfigError", "RunFormatError", "ReadOnlyStorageError", "__version__",
}  # fmt: skip


def test_all_is_the_curated_public_surface():
    assert set(rllog.__all__) == PUBLIC
    for name in rllog.__all__:
        assert getattr(rllog, name) is not None


@pytest.mark.parametrize("module", ["storage", "logtree", "doctor", "index", "plot", "importers", "testing"])
def test_topical_modules_have_an_all_of_importable_names(module):
    mod = __import__(f"rllog.{module}", fromlist=["__all__"])
    assert mod.__all__, module
    for name in mod.__all__:
        assert hasattr(mod, name), f"rllog.{module}.{name}"


def test_import_rllog_imports_no_optional_or_heavy_package():
    code = (
        "import sys, rllog; heavy = ['pandas', 'matplotlib', 'jinja2', 'wandb', 'tensorboard', 'trackio', "
        "'torch', 'fsspec', 'gcsfs', 's3fs', 'numpy', 'transformers', 'trl', 'ray', 'click']; "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_rank_that_does_not_write_gets_a_null_logger(tmp_path):
    logger = RunLogger(tmp_path / "run", rank=3, config={"lr": 1})
    assert type(logger).__name__ == "NullRunLogger" and isinstance(logger, RunLogger)
    assert logger.is_writer is False and logger.resume_state is None
    logger.log_metrics(0, {"x": 1.0})
    logger.log_config({"a": 1})
    logger.log_checkpoint("000001", batch=1)
    logger.log_rollouts(0, [[{"steps": [{"reward": 1.0}]}]])
    with logger.iteration(0) as trace:
        assert trace is None
        rllog.logtree.text("nothing")
    with logger.evaluation("test", 0):
        pass
    logger.flush()
    logger.close()
    assert not (tmp_path / "run").exists()  # nothing opened, locked or written
    copy = pickle.loads(pickle.dumps(logger))
    assert copy.is_writer is False and copy.rank == 3  # a pickled non-writer stays one


def test_all_ranks_writes_from_every_rank(tmp_path):
    with RunLogger(tmp_path, rank=2, all_ranks=True, code_diff=False, index=False) as logger:
        assert logger.is_writer
        logger.log_metrics(0, {"x": 1.0})
    # rank 2 writes its own rank-tagged file (docs/FORMATS.md "Per-rank files")
    assert (tmp_path / "metrics.rank2.jsonl").read_bytes() == b'{"step":0,"x":1.0}\n'


def test_iteration_and_groups_come_in_the_same_order_everywhere():
    from rllog._write.rollouts import encode_rollouts, write_rollouts

    def params(fn):
        return [p for p in inspect.signature(fn).parameters if p in ("iteration", "groups")]

    for fn in (RunLogger.log_rollouts, rllog.build_rollout_summaries, write_rollouts, encode_rollouts):
        assert params(fn) == ["iteration", "groups"], fn.__qualname__


def test_run_is_a_context_manager_that_closes(tmp_path):
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        logger.log_metrics(0, {"x": 1.0})
    with rllog.read_run(tmp_path) as run:
        assert run.rows == [{"step": 0, "x": 1.0}]
    run.close()  # idempotent
