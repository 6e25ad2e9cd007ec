"""Readers never start upload threads or spill journals (issue 9, item 4)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import rllog
from rllog import RunLogger


def test_three_read_runs_of_a_bucket_leave_no_extra_threads(gcs_server):
    url = f"gs://{gcs_server.new_bucket()}/runs/r"
    options = gcs_server.storage_options()
    with RunLogger(url, config={"lr": 0.1}, code_diff=False, index=False, **options) as logger:
        for i in range(5):
            logger.log_metrics(i, {"x": float(i)})
        logger.log_rollouts(0, [[{"steps": [{"reward": 1.0}]}]])
    spill = Path(os.environ["RLLOG_SPILL_DIR"])
    spill_before = sorted(p.name for p in spill.rglob("*"))
    threads_before = {t.name for t in threading.enumerate()}
    runs = [rllog.read_run(url, **options) for _ in range(3)]  # all three open at once
    for run in runs:
        assert [r["x"] for r in run.rows] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert len(run.rollout_summaries(0)) == 1
        assert len(list(rllog.read_rollouts(run.storage))) == 1
    assert rllog.load_config(url, **options) == {"lr": 0.1}
    assert {t.name for t in threading.enumerate()} == threads_before
    assert sorted(p.name for p in spill.rglob("*")) == spill_before
    for run in runs:
        run.close()
