"""Full-text search over a run's rollouts: prompts and completions of every iteration and evaluator.

Searches the string values of each trajectory's step ``logs`` (where rllog and
tinker-cookbook put the prompt and the sampled text) in every ``*_rollout_summaries.jsonl``
of the run. Used by ``rllog grep`` and ``rllog serve``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rllog._format.layout import parse_iteration_file
from rllog._read.rollouts import decode_rollout_summaries
from rllog.storage import Storage

__all__ = ["compile_pattern", "search_rollouts"]


def compile_pattern(pattern: str, *, regex: bool = False, ignore_case: bool = False) -> re.Pattern[str]:
    """The pattern to search for: a substring (default) or a Python regex.

    Raises:
        ValueError: an empty pattern, or a regex that does not compile (the error is named).
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"search pattern must be a non-empty string, got {pattern!r}")
    flags = re.IGNORECASE if ignore_case else 0
    try:
        return re.compile(pattern if regex else re.escape(pattern), flags)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, f"{path}[{i}]")


def search_rollouts(
    storage: Storage, pattern: re.Pattern[str], *, limit: int = 200, context: int = 60
) -> tuple[list[dict[str, Any]], int]:
    """Hits of ``pattern`` in the rollout summaries of the run in ``storage``.

    Returns ``(hits, files searched)``; each hit is ``{"file", "iteration", "split",
    "eval_name", "group", "traj", "step", "field", "before", "match", "after"}`` (``before``
    and ``after``: up to ``context`` characters around the match), in file order, at most
    ``limit`` hits (one per field). A damaged file is skipped.
    """
    hits: list[dict[str, Any]] = []
    names = sorted(
        (a.iteration, a.split != "train", a.eval_name or "", a.name)
        for a in map(parse_iteration_file, storage.list())
        if a is not None and a.kind == "rollout_summaries"
    )
    for n_files, (iteration, _is_eval, eval_name, name) in enumerate(names, 1):
        try:
            records = decode_rollout_summaries(storage.read(name), name)
        except (OSError, ValueError):
            continue
        for rec in records:
            for step in rec.steps:
                for field, text in _strings(step.logs, ""):
                    m = pattern.search(text)
                    if m is None:
                        continue
                    hits.append(
                        {
                            "file": name,
                            "iteration": iteration,
                            "split": rec.split,
                            "eval_name": eval_name or None,
                            "group": rec.group_idx,
                            "traj": rec.traj_idx,
                            "step": step.step_idx,
                            "field": field,
                            "before": text[max(0, m.start() - context) : m.start()],
                            "match": m.group(0),
                            "after": text[m.end() : m.end() + context],
                        }
                    )
                    if len(hits) >= limit:
                        return hits, n_files
    return hits, len(names)
