"""Checking and normalizing what rollout code hands to :mod:`rllog.logtree`.

Values are copied at the call into plain JSON-ready Python (the caller may mutate its
objects afterwards): messages, table cells (numbers stay numbers, numpy values become
Python ones, other objects ``str``) and trajectory records in the rollout-summary shape.
Misuse raises ``TypeError``/``ValueError`` naming what was expected and what was got.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["check_index", "check_str", "messages_of", "table_of", "trajectory_record"]


def check_str(value: Any, what: str) -> str:
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"logtree {what} must be a str, got {type(value).__name__}: {value!r:.60}")


def check_index(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        item = getattr(value, "item", None)
        value = item() if callable(item) else value
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"logtree {what} must be an int, got {type(value).__name__}: {value!r:.40}")
    if value < 0:
        raise ValueError(f"logtree {what} must be >= 0, got {value}")
    return int(value)


_PLAIN_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """``value`` as plain JSON-ready Python (lenient: unknown objects become ``str``)."""
    t = type(value)
    if t in (str, int, float, bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool):  # subclasses (IntEnum, numpy.float64, str enums) become the base type
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    dump = getattr(value, "model_dump", None)  # pydantic (tinker's ToolCall)
    if callable(dump):
        return _plain(dump())
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return _plain(dataclasses.asdict(value))
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return _plain(tolist())
    if type(value).__module__.startswith("PIL."):
        return "<image>"
    return str(value)


def messages_of(messages: Any) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"logtree.conversation expects a list of messages, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            dump = getattr(m, "model_dump", None)
            if not callable(dump):
                raise TypeError(f"logtree.conversation: message {i} must be a dict with 'role' and 'content', got {type(m).__name__}")
            m = dump()
        role = m.get("role")
        content = m.get("content", "")
        if not isinstance(role, str):
            raise TypeError(f"logtree.conversation: message {i} needs a str 'role', got {role!r:.40}")
        if type(content) is str and all(type(v) is str for v in m.values()):
            out.append(dict(m))
            continue
        if not isinstance(content, (str, list, tuple)):
            raise TypeError(
                f"logtree.conversation: message {i} 'content' must be a str or a list of parts, got {type(content).__name__}"
            )
        msg = _plain(m)
        msg["role"] = role
        out.append(msg)
    return out


def _cell(value: Any) -> Any:
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "size", 1) == 1:
        try:
            value = item()
        except (ValueError, TypeError, RuntimeError):
            return str(value)
        if isinstance(value, _PLAIN_SCALARS):
            return value
    if isinstance(value, _PLAIN_SCALARS):
        return value
    return str(value)


def table_of(data: Any, columns: Sequence[str] | None) -> tuple[list[str], list[list[Any]]]:
    if hasattr(data, "to_dict") and hasattr(data, "columns") and not isinstance(data, Mapping):  # DataFrame
        columns = [str(c) for c in data.columns] if columns is None else columns
        data = data.to_dict("records")
    if isinstance(data, Mapping):
        values = list(data.values())
        seqs = [isinstance(v, (list, tuple)) or (hasattr(v, "__len__") and hasattr(v, "tolist")) for v in values]
        if values and all(seqs):
            lengths = {len(v) for v in values}
            if len(lengths) > 1:
                raise ValueError(f"logtree.table: dict-of-lists columns must have equal lengths, got {sorted(lengths)}")
            cols = [str(k) for k in data]
            return cols, [[_cell(v[i]) for v in values] for i in range(lengths.pop())]
        if any(seqs):
            raise TypeError("logtree.table: a dict must map every key to a list (columns) or every key to a scalar")
        return ["key", "value"], [[str(k), _cell(v)] for k, v in data.items()]
    if isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        raise TypeError(f"logtree.table expects a list of dicts, a dict of lists, rows or a DataFrame, got {type(data).__name__}")
    rows = list(data)
    if rows and all(isinstance(r, Mapping) for r in rows):
        cols: list[str] = [str(c) for c in columns] if columns is not None else []
        if columns is None:
            seen: dict[str, None] = {}
            for r in rows:
                seen.update(dict.fromkeys(r))
            cols = [str(c) for c in seen]
        return cols, [[_cell(r.get(c)) for c in cols] for r in rows]
    out = []
    for i, r in enumerate(rows):
        if isinstance(r, (str, bytes, Mapping)) or not isinstance(r, Iterable):
            raise TypeError(f"logtree.table: row {i} must be a list of cells, got {type(r).__name__}")
        r = [_cell(c) for c in r]
        if columns is not None and len(r) != len(columns):
            raise ValueError(f"logtree.table: row {i} has {len(r)} cells, columns has {len(columns)}")
        out.append(r)
    return ([str(c) for c in columns] if columns is not None else []), out


def _number(value: Any, where: str) -> float | int | None:
    if value is None:
        return None
    v = _cell(value)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{where} must be a number, got {type(value).__name__}: {value!r:.40}")
    return v


def trajectory_record(r: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(r, Mapping):
        raise TypeError(f"a trajectory record must be a dict, got {type(r).__name__}")
    g = check_index(r.get("group_idx"), "group_idx")
    t = check_index(r.get("traj_idx"), "traj_idx")
    where = f"trajectory (group {g}, traj {t})"
    raw_steps = list(r.get("steps") or ())
    steps = []
    for i, s in enumerate(raw_steps):
        if not isinstance(s, Mapping):
            raise TypeError(f"{where}: step {i} must be a dict, got {type(s).__name__}")
        steps.append(
            {
                "step_idx": s.get("step_idx", i),
                "ob_len": _number(s.get("ob_len"), f"{where} step {i} ob_len"),
                "ac_len": _number(s.get("ac_len"), f"{where} step {i} ac_len"),
                "reward": _number(s.get("reward"), f"{where} step {i} reward"),
                "episode_done": bool(s.get("episode_done", i == len(raw_steps) - 1)),
            }
        )
    final = _number(r.get("final_reward"), f"{where} final_reward")
    total = _number(r.get("total_reward"), f"{where} total_reward")
    if total is None:
        total = sum(s["reward"] or 0.0 for s in steps) + (final or 0.0)
    metrics = {str(k): _cell(v) for k, v in (r.get("trajectory_metrics") or {}).items()}
    rec = {
        "group_idx": g,
        "traj_idx": t,
        "total_reward": total,
        "final_reward": final,
        "trajectory_metrics": metrics,
        "steps": steps,
    }
    numbers = [total, final, *metrics.values(), *(s["reward"] for s in steps)]
    if any(type(x) is float and not math.isfinite(x) for x in numbers):
        rec["_nonfinite"] = True
    return rec
