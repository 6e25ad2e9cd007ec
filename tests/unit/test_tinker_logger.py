"""rllog.integrations.tinker: ml_log's Logger calls land in an rllog run."""

from __future__ import annotations

import json

from rllog import read_run
from rllog.integrations.tinker import setup_logging


def test_ml_log_calls_write_the_run(tmp_path):
    ml = setup_logging(str(tmp_path / "run"), config={"lr": 1e-4}, code_diff=False)
    ml.log_metrics({"env/all/reward/total": 0.5}, step=0)
    ml.log_metrics({"optim/lr": 1e-4})  # step=None: the last step
    ml.log_metrics_event({"time/x": 1.0}, step=1, step_metric="progress/batch")
    ml.log_long_text("sample/0", "hello")
    ml.close()
    run = read_run(tmp_path / "run")
    assert run.rows == [
        {"step": 0, "env/all/reward/total": 0.5, "optim/lr": 1e-4},
        {"step": 1, "time/x": 1.0, "progress/batch": 1},
    ]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["lr"] == 1e-4
    assert (tmp_path / "run" / "long_text").is_dir()


def test_a_wandb_project_without_a_wandb_sink_is_warned_about(tmp_path):
    # tinker-cookbook's loop passes its config's wandb_project: without report_to="wandb"
    # rllog writes no W&B run, which was not said
    import pytest

    with pytest.warns(UserWarning, match=r"wandb_project='p'.*report_to='wandb'"):
        ml = setup_logging(str(tmp_path / "run"), wandb_project="p", code_diff=False, index=False)
    ml.close()


def test_a_supervised_resume_past_the_first_epoch_is_not_warned_about(tmp_path):
    # tinker-cookbook's supervised loop truncates at epoch * n_batches + batch; rllog moved the
    # rows at that step aside, yet truncate_metrics compared it with the record's raw batch
    # and warned "this logger resumed at 2; open it with resume=True" (it was open so)
    run = str(tmp_path / "run")
    ml = setup_logging(run, code_diff=False, index=False)
    for step in range(9):  # 5 batches per epoch
        ml.log_metrics({"train_mean_nll": 1.0 / (step + 1), "epoch": step // 5}, step=step)
        if step == 6:
            ml.store.write_checkpoint(
                {"name": "000007", "epoch": 1, "batch": 2, "state_path": "tinker://x/7"}
            )
    ml.close()
    ml = setup_logging(run, code_diff=False, index=False)
    assert ml.store.truncate_metrics(1 * 5 + 2) == 0
    ml.close()
    assert not [w for w in ml.run_logger.warnings if "tinker-cookbook resumes" in w], ml.run_logger.warnings
    assert list(read_run(run).metrics["step"]) == list(range(7))
    ml = setup_logging(run, code_diff=False, index=False)  # resumes at 7 again: a step elsewhere is said
    ml.store.truncate_metrics(3)
    ml.close()
    assert [w for w in ml.run_logger.warnings if "tinker-cookbook resumes at step 3" in w]
