"""Which process of a multi-process job this is, and the run as one rank > 0 writes it.

With ``RunLogger(all_ranks=True)`` every rank writes into the same run; rank ``r > 0``
writes through :class:`RankStorage`, which gives each run-level file its rank-tagged
name (:func:`rllog._format.layout.rank_file_name`: ``metrics.rank1.jsonl``,
``checkpoints.rank1.jsonl``, ``config.rank1.json``, ``run_status.rank1.json``...), so
the rank's rows, checkpoints and resume never touch rank 0's files. Its per-iteration
reports and rollout summaries get the tag after the iteration
(``train_iteration_000003.rank1_rollout_summaries.jsonl``), so every rank's file of an
iteration is kept, with no race between ranks.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rllog._format.layout import artifact_rank, parse_artifact_name, parse_rank_file_name, rank_file_name
from rllog.storage import Storage

__all__ = ["RankStorage", "process_rank"]

_SHARED = frozenset({"storage_options", "close_timeout"})


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


class RankStorage:
    """``storage`` as rank ``rank`` sees it: run-level files under their rank-tagged names.

    Every call that names a file maps the name with :func:`rank_file_name` (names in
    sub-folders are passed unchanged); :meth:`list` shows this rank's files under their
    plain names (so a resume of this rank moves aside its own reports only) and the
    shared sub-folders. Everything else is ``storage``'s.
    """

    def __init__(self, storage: Storage, rank: int) -> None:
        if rank < 1:
            raise ValueError(f"RankStorage is for ranks >= 1, got {rank}")
        self.inner = storage
        self.rank = rank
        self.url = storage.url

    def __getattr__(self, name: str) -> Any:
        if name in _SHARED:  # settings, not file calls: a file call must go through _name
            return getattr(self.inner, name)
        raise AttributeError(f"{type(self).__name__} has no {name!r}")

    def __repr__(self) -> str:
        return f"RankStorage({self.inner!r}, rank={self.rank})"

    def file_name(self, name: str) -> str:
        """The name ``name`` has in the run as this rank writes it (``metrics.rank1.jsonl``)."""
        return rank_file_name(name, self.rank)

    _name = file_name

    def read(self, name: str) -> bytes:
        return self.inner.read(self._name(name))

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        return self.inner.read_range(self._name(name), start, end)

    def size(self, name: str) -> int:
        return self.inner.size(self._name(name))

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        self.inner.write(self._name(name), data, durable=durable)

    def append(self, name: str, data: bytes) -> None:
        self.inner.append(self._name(name), data)

    def truncate(self, name: str, size: int) -> None:
        self.inner.truncate(self._name(name), size)

    def snapshot(self, name: str) -> None:
        """The inner storage's ``snapshot`` of this rank's file (nothing where it has none)."""
        snapshot = getattr(self.inner, "snapshot", None)
        if snapshot is not None:
            snapshot(self._name(name))

    def exists(self, name: str) -> bool:
        return self.inner.exists(self._name(name))

    def remove(self, name: str) -> None:
        self.inner.remove(self._name(name))

    def list(self, prefix: str = "") -> list[str]:
        out = []
        tag = f".rank{self.rank}"
        for name in self.inner.list():
            if parse_artifact_name(name) is not None:
                plain = name.replace(tag, "", 1) if artifact_rank(name) == self.rank else None
            elif "/" in name:
                plain = name  # sub-folders (tensorboard/) are shared
            else:
                parsed = parse_rank_file_name(name)
                plain = parsed[0] if parsed is not None and parsed[1] == self.rank else None
            if plain is not None and plain.startswith(prefix):
                out.append(plain)
        return sorted(out)

    def pending(self) -> dict[str, int]:
        return self.inner.pending()

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        self.inner.flush(durable=durable, timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        self.inner.close(timeout=timeout)
