"""Helpers the sinks share."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

from rllog._format.codec import encode_json

__all__ = ["require", "numeric", "ROLLOUT_COLUMNS", "rollout_rows"]


def require(package: str, extra: str) -> None:
    """Raise ImportError with the install line when ``package`` cannot be imported
    (checked without importing it, so construction stays cheap)."""
    if importlib.util.find_spec(package) is None:
        raise ImportError(
            f"report_to={extra!r} needs the {package!r} package, which is not installed: "
            f"pip install 'rllog[{extra}]'"
        )


def numeric(value: Any) -> float | None:
    """``value`` as a float for a scalar chart (bools as 0/1, NaN/±Inf kept), None for
    strings and None."""
    if type(value) is float:
        return value
    if type(value) is int or type(value) is bool:
        f = float(value)
        return f if math.isfinite(f) else None
    return None


#: the columns of a rollout table (wandb Table, trackio Table, TensorBoard text): one row per trajectory
ROLLOUT_COLUMNS = (
    "iteration",
    "group_idx",
    "traj_idx",
    "tags",
    "sampling_client_step",
    "total_reward",
    "final_reward",
    "steps",
    "ob_tokens",
    "ac_tokens",
    "final_ob_len",
    "trajectory_metrics",
)


def rollout_rows(records: list[dict[str, Any]]) -> list[list[Any]]:
    """One row of :data:`ROLLOUT_COLUMNS` per rollout-summary record (a line of a
    ``*_rollout_summaries.jsonl`` file, :class:`rllog.TrajectorySummary`): ``tags`` joined
    with ``","``, ``steps`` the number of steps, ``ob_tokens``/``ac_tokens`` the sums of the
    steps' ``ob_len``/``ac_len`` (tokens), ``trajectory_metrics`` as compact JSON text."""
    out = []
    for r in records:
        steps = r.get("steps") or []
        out.append(
            [
                r.get("iteration"),
                r.get("group_idx"),
                r.get("traj_idx"),
                ",".join(str(t) for t in r.get("tags") or []),
                r.get("sampling_client_step"),
                r.get("total_reward"),
                r.get("final_reward"),
                len(steps),
                sum(int(s.get("ob_len") or 0) for s in steps),
                sum(int(s.get("ac_len") or 0) for s in steps),
                r.get("final_ob_len"),
                encode_json(r.get("trajectory_metrics") or {}).decode(),
            ]
        )
    return out
