"""A torchrun job (gloo, CPU) for tests/e2e/test_torchrun.py: every rank opens a RunLogger
on the same run; each rank pickles its logger and unpickles it (as a rollout worker would
get it) and logs through both. Prints one line per rank: rank, is_writer of both.

``torchrun_job.py RUN all_ranks``: every rank opens ``RunLogger(RUN, all_ranks=True)``
and writes its own rank-tagged files; its pickled copy appends to them too."""

from __future__ import annotations

import pickle
import sys

import torch.distributed as dist

from rllog import RunLogger

dist.init_process_group("gloo")
rank = dist.get_rank()
all_ranks = sys.argv[2:] == ["all_ranks"]
logger = RunLogger(sys.argv[1], code_diff=False, index=False, all_ranks=all_ranks, config={"rank": rank})
copy = pickle.loads(pickle.dumps(logger))
for step in range(3):
    value = float(step + rank)
    logger.log_metrics(step, {"rank_value": value})
    copy.log_rollouts(step, [[{"steps": [{"reward": value}], "final_reward": 0.0}]])
if all_ranks:
    copy.log_metrics(3, {"from_copy": float(rank)})
    logger.log_checkpoint("000003", batch=3)
dist.barrier()
copy.close()
logger.close()
# one write per line: print() writes the text and the newline apart, and two ranks' lines interleave
sys.stdout.write(f"rank {rank} {logger.is_writer} {copy.is_writer}\n")
sys.stdout.flush()
dist.destroy_process_group()
