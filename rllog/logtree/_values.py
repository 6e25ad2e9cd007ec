"""Checking and normalizing what rollout code hands to :mod:`rllog.logtree`.

Values are copied at the call into plain JSON-ready Python (the caller may mutate its
objects afterwards): messages, table cells (numbers stay numbers, numpy values become
Python ones, other objects ``str``) and trajectory records in the rollout-summary shape.
Content (messages, tables) never raises for odd data: the caller's ``odd(message)`` is
told once and the data is shown as well as it goes. Misuse of the structure (an index
that is not an int, a trajectory value that is not a number) raises
``TypeError``/``ValueError`` naming what was expected and what was got.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

__all__ = ["check_index", "check_str", "messages_of", "safe_repr", "table_of", "trajectory_record"]


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


def safe_repr(value: Any, limit: int = 2_000) -> str:
    """``repr(value)`` cut at ``limit`` characters; never raises (a broken ``__repr__`` is named)."""
    try:
        text = repr(value)
    except Exception as exc:
        return f"<{type(value).__name__}: repr() failed: {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


_CONTENT_TYPES = (str, list, tuple, Mapping, type(None))


def messages_of(messages: Any, odd: Callable[[str], None]) -> list[Any]:
    """The messages as plain JSON-ready values, each kept as logged (content None, OpenAI
    ``tool_calls``, ``tool_call_id``, ``name`` and any other key included).

    Odd input never raises: ``odd(message)`` is called for the first problem (a single
    message instead of a list, a message that is not a dict, no str role, content of an
    unexpected type) and the value is kept as it is, for the page to show its repr.
    """
    if isinstance(messages, Mapping) or callable(getattr(messages, "model_dump", None)):
        odd(
            f"logtree.conversation expects a list of messages, got one {type(messages).__name__}; shown as a conversation of one"
        )
        messages = [messages]
    elif isinstance(messages, (str, bytes)) or not isinstance(messages, Iterable):
        odd(
            f"logtree.conversation expects a list of messages, got {type(messages).__name__}; shown as its repr"
        )
        return [_plain(messages)]
    out: list[Any] = []
    problem = None
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            dump = getattr(m, "model_dump", None)
            if not callable(dump):
                problem = (
                    problem or f"message {i} is a {type(m).__name__}, not a dict with 'role' and 'content'"
                )
                out.append(_plain(m))
                continue
            m = dump()
        content = m.get("content")
        if type(content) is str and all(type(v) is str for v in m.values()):
            out.append(dict(m))
            continue
        if not isinstance(m.get("role"), str):
            problem = problem or f"message {i} has no str 'role' (got {safe_repr(m.get('role'), 40)})"
        elif not isinstance(content, _CONTENT_TYPES):
            problem = (
                problem
                or f"message {i} 'content' is a {type(content).__name__}, not a str or a list of parts"
            )
        out.append(_plain(m))
    if problem is not None:
        odd(f"logtree.conversation: {problem}; shown as its repr")
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


def table_of(
    data: Any, columns: Sequence[str] | None, odd: Callable[[str], None]
) -> tuple[list[str], list[list[Any]]]:
    """``(columns, rows)`` of plain cells from any table shape :func:`rllog.logtree.table` takes.

    Odd shapes never raise: ``odd(message)`` is called once and the data is shown as well
    as it goes (ragged columns or rows padded with empty cells, a scalar as one cell).
    """
    if hasattr(data, "to_dict") and hasattr(data, "columns") and not isinstance(data, Mapping):  # DataFrame
        columns = [str(c) for c in data.columns] if columns is None else columns
        data = data.to_dict("records")
    if isinstance(data, Mapping):
        values = list(data.values())
        seqs = [
            isinstance(v, (list, tuple)) or (hasattr(v, "__len__") and hasattr(v, "tolist")) for v in values
        ]
        if values and all(seqs):
            lengths = [len(v) for v in values]
            if len(set(lengths)) > 1:
                odd(
                    f"logtree.table: dict-of-lists columns have different lengths {sorted(set(lengths))}; short columns padded with empty cells"
                )
            n = max(lengths)
            return [str(k) for k in data], [
                [_cell(v[i]) if i < len(v) else None for v in values] for i in range(n)
            ]
        if any(seqs):
            odd("logtree.table: a dict maps some keys to lists and some to scalars; shown as key/value rows")
        return ["key", "value"], [[str(k), _cell(v)] for k, v in data.items()]
    if isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        odd(
            f"logtree.table expects a list of dicts, a dict of lists, rows or a DataFrame, got {type(data).__name__}; shown as one cell"
        )
        return ["value"], [[_cell(data)]]
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
    problem = None
    for i, r in enumerate(rows):
        if isinstance(r, (str, bytes, Mapping)) or not isinstance(r, Iterable):
            problem = problem or f"row {i} is a {type(r).__name__}, not a list of cells; shown as one cell"
            out.append([_cell(r)])
        else:
            out.append([_cell(c) for c in r])
    cols = [str(c) for c in columns] if columns is not None else []
    width = max((len(r) for r in out), default=0)
    if columns is not None and any(len(r) != len(cols) for r in out):
        problem = (
            problem
            or f"rows have {sorted({len(r) for r in out})} cells, columns has {len(cols)}; short rows padded"
        )
        cols += [""] * (width - len(cols))
        out = [r + [None] * (len(cols) - len(r)) for r in out]
    if problem is not None:
        odd(f"logtree.table: {problem}")
    return cols, out


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
