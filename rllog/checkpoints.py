"""checkpoints.jsonl: checkpoint records and the loop state to resume from.

One JSON object per line, appended by :meth:`rllog.RunLogger.log_checkpoint` only after
everything logged before it is durable (fsync locally, uploaded on object stores)::

    {"name": "000010", "batch": 10, "state_path": "gs://b/ckpt/000010.npz", "final": false, "lr": 0.0003}

``name`` (str) and the loop state at save time: ``batch`` (the next batch to run),
``epoch``, ``final``, ``state_path``, ``sampler_path``, plus any extra keys the loop
passed, preserved. Keys that were not given are left out (as tinker-cookbook does).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rllog._jsonl import iter_lines
from rllog.encoding import decode_json
from rllog.storage import Storage

__all__ = ["CHECKPOINTS_FILE", "ResumeState", "read_checkpoints", "last_checkpoint"]

CHECKPOINTS_FILE = "checkpoints.jsonl"
_KNOWN = ("name", "batch", "epoch", "final", "state_path", "sampler_path")


@dataclasses.dataclass(frozen=True)
class ResumeState:
    """The loop state of the checkpoint a run resumes from.

    Attributes:
        name: the checkpoint's name, e.g. ``"000010"``.
        batch: the next batch to run (the loop starts there); with a custom
            ``resume_key`` the value of that key.
        epoch, final, state_path, sampler_path: as recorded, None when absent.
        loop_state: every other key of the record (the loop's own extras).
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


def read_checkpoints(storage: Storage, warnings_out: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of checkpoints.jsonl, in file order; ``[]`` when the file is missing.

    A line that is not a JSON object (a torn last line, damage) is skipped and described
    in ``warnings_out`` with its line number.
    """
    try:
        data = storage.read(CHECKPOINTS_FILE)
    except FileNotFoundError:
        return []
    records = []
    for lineno, line in iter_lines(data):
        try:
            rec = decode_json(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            records.append(rec)
        elif warnings_out is not None:
            warnings_out.append(f"{storage.url}/{CHECKPOINTS_FILE} line {lineno}: not a JSON object, skipped")
    return records


def last_checkpoint(records: list[dict[str, Any]], key: str = "batch") -> dict[str, Any] | None:
    """The last record that has ``key`` with an int value (the one to resume from), or None."""
    for rec in reversed(records):
        value = rec.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return rec
    return None
