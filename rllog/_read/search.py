"""Full-text search over a run's rollouts: prompts and completions of every iteration and evaluator.

Searches, per iteration (train first, then evaluators by name):

- the string values of each trajectory's step ``logs`` (where rllog and tinker-cookbook
  put the prompt and the sampled text) in every ``*_rollout_summaries.jsonl``;
- the iteration's logtree (``*_logtree.json``, format in :mod:`rllog.logtree`): the
  strings of every conversation message (``content``, its parts, ``tool_calls``; not
  ``role`` or ``tool_call_id``) and every text node (headings, paragraphs, summaries).
  Tables, trusted HTML, exceptions and the trajectory details are not searched.

Used by ``rllog grep`` and ``rllog serve``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rllog._format.codec import decode_json
from rllog._format.layout import parse_iteration_file
from rllog._read.rollouts import decode_readable_records, decode_rollout_summaries
from rllog.storage import Storage

__all__ = ["compile_pattern", "search_run"]


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


_MESSAGE_IDS = ("role", "tool_call_id")  # message keys that are labels, not text


def _group_of(attrs: Any) -> int | None:
    """The group index of a logtree ``details`` node of :func:`rllog.logtree.group` (``id="group-3"``)."""
    ident = attrs.get("id") if isinstance(attrs, dict) else None
    if isinstance(ident, str) and ident.startswith("group-") and ident[6:].isdigit():
        return int(ident[6:])
    return None


def _logtree_texts(root: Any) -> Iterator[tuple[int | None, str, str, str]]:
    """``(group or None, field, text, anchor)`` for the searchable strings of a logtree, in document order.

    ``field``: ``"text (p)"`` for a text node in a ``<p>``; ``"messages[1].content (assistant)"``
    for a conversation message. ``anchor``: the id of the element showing the text in the
    iteration's HTML report (:mod:`rllog.logtree._render`'s rule: nodes numbered in
    document order from the root, 0; ``lt-N`` for a ``p``/``pre`` text, a section's or
    a group's heading or a ``details`` summary; ``lt-N-I`` for message I of conversation
    node N, or for a bare string that is child I of node N).
    """
    number = 0
    stack: list[tuple[Any, int | None, str | None]] = [(root, None, None)]  # node, group, role
    while stack:
        node, group, role = stack.pop()
        if not isinstance(node, dict):
            continue
        n, number = number, number + 1
        own = _group_of(node.get("attrs"))
        group = own if own is not None else group
        data = node.get("data")
        if isinstance(data, dict) and data.get("type") == "conversation":
            for i, msg in enumerate(data.get("messages") or ()):
                if not isinstance(msg, dict):
                    continue
                who = msg.get("role")
                for key, value in msg.items():
                    if key in _MESSAGE_IDS:
                        continue
                    for path, text in _strings(value, f"messages[{i}].{key}"):
                        yield group, f"{path} ({who})" if isinstance(who, str) else path, text, f"lt-{n}-{i}"
        children = node.get("children")
        if not isinstance(children, list):
            continue
        tag = node.get("tag")
        block = role == "heading" or tag in ("p", "pre")  # shown as one element
        # the child the page shows as a heading: a section's first, a details' summary, and
        # in a group (a details of class lt-group) the heading inside its summary
        first: str | None = None
        if tag == "section" or role == "group summary":
            first = "heading"
        elif tag == "details":
            attrs = node.get("attrs")
            first = (
                "group summary" if isinstance(attrs, dict) and attrs.get("class") == "lt-group" else "heading"
            )
        nodes = []
        for at, child in enumerate(children):
            if isinstance(child, str):
                yield group, f"text ({tag})", child, f"lt-{n}" if block else f"lt-{n}-{at}"
            else:
                nodes.append((child, group, first if at == 0 else None))
        stack.extend(reversed(nodes))


def _hit(m: re.Match[str], text: str, context: int, **where: Any) -> dict[str, Any]:
    return {
        **where,
        "before": text[max(0, m.start() - context) : m.start()],
        "match": m.group(0),
        "after": text[m.end() : m.end() + context],
    }


def search_run(
    storage: Storage,
    pattern: re.Pattern[str],
    *,
    limit: int = 200,
    context: int = 60,
    problems: list[str] | None = None,
) -> tuple[list[dict[str, Any]], int]:
    """Hits of ``pattern`` in the rollout summaries and logtrees of the run in ``storage``.

    Returns ``(hits, files searched)``, at most ``limit`` hits (one per field), iteration by
    iteration. Every hit has ``{"kind", "file", "iteration", "split", "eval_name",
    "report", "group", "field", "before", "match", "after"}`` (``before`` and ``after``: up
    to ``context`` characters around the match; ``report``: the iteration's HTML report
    for this split, None if it has none). ``kind`` is ``"rollout"`` (also ``"traj"``,
    ``"step"``; ``split`` as the record says) or ``"logtree"`` (``group``: the enclosing
    :func:`rllog.logtree.group`, None outside one; ``split``: ``"train"`` or
    ``"eval/<name>"``; ``anchor``: the id of the element showing the text in ``report``,
    for a ``report#anchor`` link). A damaged logtree file is skipped, and so is each damaged
    line of a rollout summaries file (its other lines are searched); ``problems``, when
    given, gets one message per file or line skipped.
    """
    said = problems if problems is not None else []
    hits: list[dict[str, Any]] = []
    arts = [a for a in map(parse_iteration_file, storage.list()) if a is not None]
    reports = {(a.iteration, a.eval_name): a.name for a in arts if a.kind == "html"}
    names = sorted(
        (a.iteration, a.split != "train", a.eval_name or "", a.kind != "rollout_summaries", a.name)
        for a in arts
        if a.kind in ("rollout_summaries", "logtree")
    )
    for n_files, (iteration, _is_eval, eval_name, is_logtree, name) in enumerate(names, 1):
        where = {
            "file": name,
            "iteration": iteration,
            "eval_name": eval_name or None,
            "report": reports.get((iteration, eval_name or None)),
        }
        if is_logtree:
            try:
                doc = decode_json(storage.read(name))
            except (OSError, ValueError) as exc:
                said.append(f"{name}: not searched ({type(exc).__name__}: {exc})")
                continue
            split = f"eval/{eval_name}" if eval_name else "train"
            root = doc.get("root") if isinstance(doc, dict) else None
            texts = (
                (text, {"kind": "logtree", "split": split, "group": group, "field": field, "anchor": anchor})
                for group, field, text, anchor in _logtree_texts(root)
            )
        else:
            try:
                data = storage.read(name)
            except OSError as exc:
                said.append(f"{name}: not searched ({type(exc).__name__}: {exc})")
                continue
            try:
                records = decode_rollout_summaries(data, name)
            except ValueError:  # a damaged line: search the others
                records, skipped = decode_readable_records(data, name)
                said.extend(skipped)
            texts = (
                (
                    text,
                    {
                        "kind": "rollout",
                        "split": rec.split,
                        "group": rec.group_idx,
                        "traj": rec.traj_idx,
                        "step": step.step_idx,
                        "field": field,
                    },
                )
                for rec in records
                for step in rec.steps
                for field, text in _strings(step.logs, "")
            )
        for text, fields in texts:
            m = pattern.search(text)
            if m is None:
                continue
            hits.append(_hit(m, text, context, kind=fields.pop("kind"), **where, **fields))
            if len(hits) >= limit:
                return hits, n_files
    return hits, len(names)
