"""Where a resumed run starts: tinker-cookbook's record rule, epochs, and the crashed
run's reports kept in superseded/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rllog import RunLogger, logtree


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def test_multi_epoch_run_resumes_after_the_last_logged_step(tmp_path: Path) -> None:
    per_epoch = 4
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for epoch in range(3):
            for b in range(per_epoch):
                step = epoch * per_epoch + b
                if b == 2:  # tinker's order: checkpoint of batch b, then the row of batch b
                    logger.log_checkpoint(f"{step:06d}", epoch=epoch, batch=b, state_path=f"p{step}")
                logger.log_metrics(step, {"epoch": epoch})
                if epoch == 2 and b == 3:
                    break
    # crashed after step 11; the last checkpoint is epoch 2, batch 2 (step 10)
    with RunLogger(tmp_path, resume=True, code_diff=False, index=False) as logger:
        assert (logger.resume_state.epoch, logger.resume_state.batch) == (2, 2)
    assert _steps(tmp_path / "metrics.jsonl") == list(range(10))
    assert _steps(tmp_path / "metrics.superseded.jsonl") == [10, 11]


def test_sampler_only_records_are_not_resume_points(tmp_path: Path) -> None:
    lines = [
        {"name": "000010", "batch": 10, "state_path": "s10", "sampler_path": "w10"},
        {"name": "000015", "batch": 15, "sampler_path": "w15"},
    ]
    (tmp_path / "checkpoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(17)))
    with RunLogger(tmp_path, resume=True, code_diff=False, index=False) as logger:
        assert logger.resume_state.name == "000010"
    assert _steps(tmp_path / "metrics.jsonl") == list(range(10))
    with RunLogger(tmp_path / "b", code_diff=False, index=False):
        pass
    (tmp_path / "b" / "checkpoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with RunLogger(tmp_path / "b", resume=True, resume_require="sampler_path", code_diff=False) as logger:
        assert logger.resume_state.name == "000015"


def test_the_crashed_runs_reports_are_moved_aside_not_overwritten(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for i in range(5):
            logger.log_metrics(i, {"r": i})
            with logger.iteration(i):
                logtree.text(f"first run, iteration {i}")
            logger.log_rollouts(i, [[{"steps": [], "final_reward": float(i)}]])
            if i == 2:
                logger.log_checkpoint("000003", batch=3, state_path="s3")
    first = (tmp_path / "train_iteration_000004.html").read_text()
    with RunLogger(tmp_path, resume=True, code_diff=False, index=False) as logger:
        with logger.iteration(3):
            logtree.text("second run")
    aside = sorted(p.name for p in (tmp_path / "superseded").iterdir())
    assert aside == sorted(
        f"train_iteration_{i:06d}{s}"
        for i in (3, 4)
        for s in (".html", "_logtree.json", "_rollout_summaries.jsonl")
    )
    assert (tmp_path / "superseded" / "train_iteration_000004.html").read_text() == first
    assert "second run" in (tmp_path / "train_iteration_000003.html").read_text()
    assert (tmp_path / "train_iteration_000002.html").exists()


@pytest.mark.parametrize("batch", [-3, 2**63, 2**70])
def test_absurd_checkpoint_batches_fail_at_the_call(tmp_path: Path, batch: int) -> None:
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        with pytest.raises(ValueError, match="batch"):
            logger.log_checkpoint("c", batch=batch)
    assert not (tmp_path / "checkpoints.jsonl").exists()


@pytest.mark.parametrize("kwargs", [{"reprot_to": ["wandb"]}, {"strict_jsn": True}])
def test_unknown_keywords_for_a_local_path_are_errors(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(TypeError, match=f"unknown keyword argument.*{next(iter(kwargs))}.*resume_require"):
        RunLogger(tmp_path / "run", code_diff=False, **kwargs)
    assert not (tmp_path / "run").exists()
