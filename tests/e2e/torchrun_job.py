"""A torchrun job (gloo, CPU) for tests/e2e/test_torchrun.py: every rank opens a RunLogger
on the same run; each rank pickles its logger and unpickles it (as a rollout worker would
get it) and logs through both. Prints one line per rank: rank, is_writer of both."""

from __future__ import annotations

import pickle
import sys

import torch.distributed as dist

from rllog import RunLogger

dist.init_process_group("gloo")
rank = dist.get_rank()
logger = RunLogger(sys.argv[1], code_diff=False, index=False)
copy = pickle.loads(pickle.dumps(logger))
for step in range(3):
    value = float(step + rank)
    logger.log_metrics(step, {"rank_value": value})
    copy.log_rollouts(step, [[{"steps": [{"reward": value}], "final_reward": 0.0}]])
dist.barrier()
copy.close()
logger.close()
print(f"rank {rank} {logger.is_writer} {copy.is_writer}", flush=True)
dist.destroy_process_group()
