"""The fixed records of a run's files: checkpoint records and rollout summaries. Pure: no I/O.

checkpoints.jsonl: one JSON object per line, appended by :meth:`rllog.RunLogger.log_checkpoint` only after
everything logged before it is durable (fsync locally, uploaded on object stores)::

    {"name": "000010", "batch": 10, "state_path": "gs://b/ckpt/000010.npz", "final": false, "lr": 0.0003}

``name`` (str) and the loop state at save time: ``batch`` (the next batch to run),
``epoch``, ``final``, ``state_path``, ``sampler_path``, plus any extra keys the loop
passed, preserved. Keys that were not given are left out (as tinker-cookbook does).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from rllog._format.codec import decode_json
from rllog._format.jsonl import iter_lines
from rllog._format.redact import REDACTED  # config.json: what a secret-looking value is replaced by

__all__ = [
    "METRICS_AT_KEY",
    "REDACTED",
    "TYPE_KEY",
    "ResumeState",
    "parse_checkpoints",
    "SCHEMA_VERSION",
    "StepSummary",
    "TrajectorySummary",
]

#: config.json: the key holding ``"module:qualname"`` of a chz subclass value, so load_config rebuilds it
TYPE_KEY = "__chz_type__"

#: checkpoint record key rllog adds: where metrics.jsonl stood when the record was taken,
#: ``{"bytes": <its size>, "last_line_crc32": <last_line_crc of the bytes before>}``, so
#: a resume reads only the rows logged after the checkpoint (rllog._write.resume)
METRICS_AT_KEY = "metrics_at"
_KNOWN = ("name", "batch", "epoch", "final", "state_path", "sampler_path", METRICS_AT_KEY)


@dataclasses.dataclass(frozen=True)
class ResumeState:
    """The loop state of the checkpoint a run resumes from.

    Attributes:
        name: the checkpoint's name, e.g. ``"000010"``.
        batch: the next batch to run (the loop starts there); with a custom
            ``resume_key`` the value of that key.
        epoch, final, state_path, sampler_path: as recorded, None when absent.
        loop_state: every other key of the record (the loop's own extras; not
            ``metrics_at``, rllog's own bookkeeping).
        record: the whole record as read from checkpoints.jsonl.
    """

    name: str
    batch: int
    epoch: int | None
    final: bool | None
    state_path: str | None
    sampler_path: str | None
    loop_state: dict[str, Any]
    record: dict[str, Any]

    @classmethod
    def from_record(cls, record: dict[str, Any], key: str = "batch") -> ResumeState:
        return cls(
            name=str(record.get("name", "")),
            batch=record[key],
            epoch=record.get("epoch"),
            final=record.get("final"),
            state_path=record.get("state_path"),
            sampler_path=record.get("sampler_path"),
            loop_state={k: v for k, v in record.items() if k not in _KNOWN},
            record=dict(record),
        )

    def __getitem__(self, key: str) -> Any:
        """Any key of the record: ``state["lr"]``."""
        return self.record[key]


def parse_checkpoints(data: bytes, where: str, warnings_out: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of a checkpoints.jsonl file's bytes, in file order.

    A line that is not a JSON object (a torn last line, damage) is skipped and described
    in ``warnings_out`` as ``"<where> line N: not a JSON object, skipped"``.
    """
    records = []
    for lineno, line in iter_lines(data):
        try:
            rec = decode_json(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            records.append(rec)
        elif warnings_out is not None:
            warnings_out.append(f"{where} line {lineno}: not a JSON object, skipped")
    return records


# ----------------------------------------------------------------------------- rollout summaries
# One line of ``*_rollout_summaries.jsonl`` per trajectory; the format tinker-cookbook's
# ``serialize_rollout_summaries`` writes (README "Rollout summaries").

#: version of the record layout written by this rllog; readers accept newer files
SCHEMA_VERSION = 1


class StepSummary(msgspec.Struct, gc=False):
    """One step (turn) of a trajectory.

    Attributes:
        step_idx: position of the step in the episode, from 0.
        ob_len: observation (prompt) length in tokens.
        ac_len: action (sampled completion) length in tokens.
        reward: the step's reward.
        episode_done: whether this step ended the episode.
        metrics: the env's numeric per-step metrics (str -> number/bool/str/None).
        logs: diagnostic values for people (str -> str/number; nested lists/dicts allowed).
    """

    step_idx: int
    ob_len: int
    ac_len: int
    reward: float
    episode_done: bool
    metrics: dict[str, Any] = {}
    logs: dict[str, Any] = {}


class TrajectorySummary(msgspec.Struct, kw_only=True, gc=False):
    """One trajectory (episode); one line of a ``*_rollout_summaries.jsonl`` file.

    Attributes:
        schema_version: record layout version (1).
        split: ``"train"`` or ``"eval/<evaluator name>"``.
        iteration: the training iteration (batch) the rollouts belong to.
        group_idx: the group's position in the iteration's batch.
        traj_idx: the trajectory's position in its group.
        tags: the group's logging tags (e.g. the env or dataset name).
        sampling_client_step: training step of the sampler's weights, or None.
        total_reward: sum of step rewards plus ``final_reward``.
        final_reward: the group-level reward given at the end (0.0 if none).
        trajectory_metrics: the group-level metrics of this trajectory.
        final_ob_len: length in tokens of the observation after the last step, or None.
        steps: the steps in order.
    """

    schema_version: int = SCHEMA_VERSION
    split: str
    iteration: int
    group_idx: int
    traj_idx: int
    tags: list[str] = []
    sampling_client_step: int | None = None
    total_reward: float
    final_reward: float = 0.0
    trajectory_metrics: dict[str, Any] = {}
    final_ob_len: int | None = None
    steps: list[StepSummary] = []
