"""Where a resumed run starts again: which checkpoint record, which step, and moving
the crashed run's iteration reports aside.

The record (:func:`choose_record`), tinker-cookbook's rule: the last record that has the
required key (default ``state_path``: a fully resumable checkpoint; sampler-only
records are skipped), and an int resume key. tinker-cookbook's
``checkpoint_utils.get_last_checkpoint(log_dir, required_key="state_path")``. When no
record of the file has the required key at all (a loop that never records one), the
last record with the resume key is taken and a note says so.

The point (:func:`resume_point`), in the position units of metric rows
(``progress/batch`` when a row has it, else ``step``; see
:func:`rllog._write.resume.resume_position`):

1. a record without ``epoch`` (or at epoch 0), or a custom resume key: its value;
2. a record rllog wrote with ``last_logged_step`` (the highest position logged before
   the checkpoint was taken): that + 1;
3. a record of another tool with ``epoch`` and ``batch`` (the index within the epoch):
   tinker-cookbook's arithmetic ``epoch * batches_per_epoch + batch``
   (``tinker_cookbook/supervised/train.py``: ``step = epoch_idx * n_batches +
   batch_idx``), with ``batches_per_epoch`` from the config (``batches_per_epoch``,
   ``n_batches``, ``num_batches``, ``steps_per_epoch``) or from the rows' own ``epoch``
   column when it pins it down;
4. otherwise the point is ambiguous: None, no row is moved, and a warning says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from rllog._format.codec import decode_json
from rllog._format.jsonl import parse_lines
from rllog._format.layout import CONFIG_FILE, METRICS_FILE, SUPERSEDED_DIR, parse_artifact_name
from rllog.storage import Storage

__all__ = ["choose_record", "resume_point", "move_reports_aside", "LAST_LOGGED_KEY", "SUPERSEDED_DIR"]

#: checkpoint record key: the highest metric-row position logged before the checkpoint
LAST_LOGGED_KEY = "last_logged_step"
_BATCHES_KEYS = ("batches_per_epoch", "n_batches", "num_batches", "steps_per_epoch")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def choose_record(
    records: list[dict[str, Any]], key: str, required: str | None, note: Callable[..., None]
) -> dict[str, Any] | None:
    """The record to resume from (see the module docstring), or None."""
    usable = [r for r in records if _is_int(r.get(key))]
    if required is None or not usable:
        return usable[-1] if usable else None
    full = [r for r in usable if r.get(required) is not None]
    if full:
        skipped = [r.get("name") for r in usable[usable.index(full[-1]) + 1 :]]
        if skipped:
            note(
                f"resuming from checkpoint {full[-1].get('name')!r}, the last with {required!r}; later "
                f"record(s) {skipped} have no {required!r} (sampler-only) and cannot be resumed from",
                problem=False,
            )
        return full[-1]
    if not any(r.get(required) is not None for r in records):
        note(
            f"no checkpoint record has {required!r}; resuming from the last record with {key!r} "
            f"({usable[-1].get('name')!r}). Pass resume_require=None to make this the rule",
            problem=False,
        )
        return usable[-1]
    return None


def resume_point(
    storage: Storage, record: dict[str, Any] | None, key: str, note: Callable[..., None]
) -> int | None:
    """The position from which metric rows are superseded (0 without a record), or None
    when it cannot be told (a warning is given; nothing must be moved)."""
    if record is None:
        return 0
    value: int = record[key]
    epoch = record.get("epoch")
    if key != "batch" or not isinstance(epoch, int) or isinstance(epoch, bool) or epoch == 0:
        return value
    logged = record.get(LAST_LOGGED_KEY)
    if isinstance(logged, (int, float)) and not isinstance(logged, bool) and math.isfinite(logged):
        return math.floor(logged) + 1
    per_epoch = _batches_per_epoch(storage)
    if per_epoch is not None:
        return epoch * per_epoch + value
    note(
        f"cannot tell where checkpoint {record.get('name')!r} (epoch {epoch}, batch {value}) stands among "
        f"the metric rows: its batch counts within the epoch and neither the config "
        f"({', '.join(_BATCHES_KEYS)}) nor the rows' epoch column give the batches per epoch. No row was "
        "moved; rows the resumed run logs again will stand twice (the reader keeps the latest)"
    )
    return None


def _batches_per_epoch(storage: Storage) -> int | None:
    try:
        config = decode_json(storage.read(CONFIG_FILE))
    except (FileNotFoundError, ValueError):
        config = None
    if isinstance(config, dict):
        for k in _BATCHES_KEYS:
            if _is_int(config.get(k)) and config[k] > 0:
                return int(config[k])
    first: dict[int, int] = {}  # epoch -> lowest step
    last: dict[int, int] = {}
    for row in _rows(storage):  # streamed: memory does not grow with the file
        if not _is_int(row.get("epoch")) or not _is_int(row.get("step")):
            continue
        e, s = row["epoch"], row["step"]
        first[e] = min(first.get(e, s), s)
        last[e] = max(last.get(e, s), s)
    if 1 not in first or first.get(0) != 0:
        return None
    n = first[1]
    consistent = n > 0 and all(e * n <= first[e] and last[e] < (e + 1) * n for e in first)
    return n if consistent else None


def _rows(storage: Storage) -> Iterator[dict[str, Any]]:
    """The JSON-object rows of metrics.jsonl, read 8 MiB at a time (lines that are not
    objects are skipped); nothing when it is missing."""
    try:
        size = storage.size(METRICS_FILE)
    except FileNotFoundError:
        return
    offset, rest = 0, b""
    while offset < size:
        data = rest + storage.read_range(METRICS_FILE, offset, min(size, offset + (8 << 20)))
        offset = min(size, offset + (8 << 20))
        end = len(data) if offset >= size else data.rfind(b"\n") + 1
        rows, _ = parse_lines(data[:end], METRICS_FILE)
        yield from (row for _, row in rows)
        rest = data[end:]


def move_reports_aside(storage: Storage, point: int | float, note: Callable[..., None]) -> list[str]:
    """Move every iteration report, trace and rollout summary file of an iteration >=
    ``point`` into ``superseded/`` (copied there first, then removed), so the resumed run
    does not overwrite what explains the crash. An existing copy of the same name gets a
    ``.2``, ``.3``... suffix. Returns the names moved."""
    moved: list[str] = []
    for name in storage.list():
        if name.startswith(f"{SUPERSEDED_DIR}/"):
            continue
        parsed = parse_artifact_name(name)  # both layouts (iteration_NNNNNN/train.html too)
        if parsed is None or parsed[2] < point:
            continue
        target, n = f"{SUPERSEDED_DIR}/{name}", 1
        while storage.exists(target):
            n += 1
            target = f"{SUPERSEDED_DIR}/{name}.{n}"
        storage.write(target, storage.read(name))
        storage.remove(name)
        moved.append(name)
    if moved:
        note(
            f"resuming at {point}: moved {len(moved)} iteration report/summary file(s) of the crashed run to "
            f"{SUPERSEDED_DIR}/ ({', '.join(moved[:5])}{'...' if len(moved) > 5 else ''})",
            problem=False,
        )
    return moved
