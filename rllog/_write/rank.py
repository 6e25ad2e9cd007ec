"""Which process of a multi-process job this is."""

from __future__ import annotations

import os
import sys

__all__ = ["process_rank"]


def process_rank() -> int:
    """The global rank: torch.distributed's when it is initialised, else the first set of
    ``$RANK`` (torchrun, accelerate, deepspeed), ``$SLURM_PROCID`` (srun),
    ``$OMPI_COMM_WORLD_RANK`` (Open MPI), ``$PMI_RANK`` (MPICH, Intel MPI),
    ``$LOCAL_RANK`` (single-node launchers), else 0. torch is never imported here."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None:
        try:
            if dist.is_available() and dist.is_initialized():
                return int(dist.get_rank())
        except Exception:  # a half-initialised process group: fall back to the environment
            pass
    for var in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK"):
        value = os.environ.get(var, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                continue
    return 0
