"""Rendering a logtree document (a :class:`~rllog.logtree._model.TraceView`) to HTML (jinja2) and JSON (msgspec).

This module sees only plain data: the view a ``Trace`` hands over (document struct,
trajectory records, links, flags), never the trace itself; it imports only the model's
data types. ``rllog.logtree._io`` builds the view and calls it.

The HTML comes from ``templates/logtree.html.j2`` (+ ``logtree.css``, inlined), through
the process's one autoescaping Environment (:mod:`rllog._templates`). The trace
tree is first flattened in Python into a list of ``(op, a, b, c)`` events that the
template walks in one loop (no recursive macro calls: a 64 x 16 iteration has ~20,000
nodes). Every logged string reaches the page through jinja2 autoescaping; only
:func:`rllog.logtree.html` markup is inserted as it is.

Anchors: the element showing a text carries an id naming its node, so a link (a search
hit, ``rllog serve``) can land on it without a script: nodes are numbered in document
order (pre-order, the root ``body`` is 0, as :func:`rllog._read.search` numbers the
JSON), and ``lt-N`` is node N when it is a ``p``/``pre`` text, a section's or a group's
heading, or a ``details`` summary; ``lt-N-I`` is message I of conversation node N, or
the I-th child of node N when that child is a bare string. The page highlights the
element a URL fragment names (CSS ``:target``).

Long texts: a text over ``COLLAPSE_CHARS`` shows its first ``HEAD_CHARS`` and folds the
rest into a ``<details>``; past ``MAX_HTML_CHARS`` the page says how many characters
were left out (they are in the JSON). Table cells stop at ``MAX_CELL_CHARS``.
"""

from __future__ import annotations

import gc
import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec

from rllog._format.codec import clean_strings, encode_html
from rllog._templates import environment
from rllog.logtree._model import Node, TraceDoc, TraceView

__all__ = [
    "COLLAPSE_CHARS",
    "HEAD_CHARS",
    "MAX_CELL_CHARS",
    "MAX_HTML_CHARS",
    "encode_json",
    "gc_paused",
    "html_bytes",
    "render_html",
]

HEAD_CHARS = 2_000
COLLAPSE_CHARS = 8_000
MAX_HTML_CHARS = 50_000
MAX_CELL_CHARS = 1_000

_ENCODER = msgspec.json.Encoder()
_ROLES = frozenset({"system", "user", "assistant", "tool"})

_gc_lock = threading.Lock()
_gc_pauses = 0  # renders running now (guarded by _gc_lock)
_gc_resume = False  # whether the last render to end turns the GC back on


@contextmanager
def gc_paused() -> Iterator[None]:
    """Turn Python's cyclic GC off while a report is rendered or encoded.

    Rendering allocates ~10 objects per node and creates no reference cycles; with the
    GC on, those allocations trigger collections that rescan the whole (large, live)
    trace tree, so a 256 x 16 report cost ~2x per trajectory what a 4 x 8 one did.
    Only rllog code runs inside (no user callbacks). Nested and concurrent renders
    count: the GC comes back on when the last one ends, if it was on when the first began.
    """
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


# JSON


def encode_json(view: TraceView) -> bytes:
    """The ``*_logtree.json`` bytes of ``view.doc`` (UTF-8, compact)."""
    with gc_paused():
        return encode_doc(view.doc, view.strict_json, view.nonfinite)


def encode_doc(doc: TraceDoc, strict_json: bool, nonfinite: bool) -> bytes:
    """The logtree JSON bytes of ``doc``; ``nonfinite``: a NaN/Infinity may be somewhere in it.

    msgspec encodes the common case in one pass. Two cases take Python's ``json``
    (C encoder): lone surrogates, in values or keys, which msgspec refuses (written as
    U+FFFD, the rule of :mod:`rllog._format.codec`), and
    non-finite floats, which msgspec writes as ``null`` (written as ``NaN``/``Infinity``
    tokens, or ``null`` with ``strict_json``).
    """
    if not nonfinite or strict_json:
        try:
            return _ENCODER.encode(doc)
        except UnicodeEncodeError:
            pass
    plain = clean_strings(msgspec.to_builtins(doc))
    if strict_json and nonfinite:
        plain = _nulls(plain)
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode()


def _nulls(value: Any) -> Any:
    t = type(value)
    if t is float:
        return value if math.isfinite(value) else None
    if t is dict:
        return {k: _nulls(v) for k, v in value.items()}
    if t is list:
        return [_nulls(v) for v in value]
    return value


# HTML


def html_bytes(view: TraceView) -> bytes:
    """The HTML page as UTF-8; lone surrogates are shown as a marked U+FFFD (:func:`encode_html`)."""
    return encode_html(render_html(view))


def render_html(view: TraceView) -> str:
    """Render ``view`` to a self-contained HTML page (str, may hold lone surrogates)."""
    with gc_paused():
        return _render_html(view)


def _render_html(view: TraceView) -> str:
    trajectories = view.trajectories
    by_group: dict[int, list[dict[str, Any]]] = {}
    for rec in trajectories:
        by_group.setdefault(rec["group_idx"], []).append(rec)
    group_notes = {g: _group_note(recs) for g, recs in by_group.items()}
    events: list[tuple[Any, ...]] = []
    logged: list[int] = []
    number = [1]  # the next node's number: the root (body) is 0
    _flatten(view.content, events, group_notes, logged, number)
    shown = set(logged)
    page = (
        environment()
        .get_template("logtree.html.j2")
        .render(
            title=view.title,
            started_at=view.started_at,
            nav=view.nav,
            events=events,
            logged_groups=logged,
            num_groups_to_log=view.num_groups_to_log,
            n_trajectories=len(trajectories),
            details_anchor=f"lt-{number[0] + 1}",  # the heading of the Trajectory Details section
            traj_groups=[
                (g, group_notes[g], g in shown, [_traj_row(r) for r in recs])
                for g, recs in sorted(by_group.items())
            ],
        )
    )
    if "\x00" in page:  # a NUL would vanish in the browser: show it
        page = page.replace("\x00", "\u2400")
    return page


def _flatten(
    children: list[Any],
    out: list[tuple[Any, ...]],
    notes: dict[int, str],
    logged: list[int],
    number: list[int],
    parent: int = 0,
) -> None:
    """Append the events of ``children`` (of node ``parent``) to ``out``; ``number[0]`` is
    the next node's number in document order (see the module docstring), advanced here."""
    append = out.append
    for at, node in enumerate(children):
        if type(node) is str:
            append((*_text_op("p", node), f"lt-{parent}-{at}"))
            continue
        n = number[0]
        number[0] = n + 1
        anchor = f"lt-{n}"
        data = node.data
        if data is not None:
            kind = data.get("type")
            if kind == "conversation":
                append(("conversation", [_message(m) for m in data["messages"]], None, None, anchor))
            elif kind == "table":  # cells as (text, is a number)
                rows = [[(_fmt(c), type(c) in (int, float)) for c in r] for r in data["rows"]]
                append(("table", [_fmt(c) for c in data["columns"]], rows, data.get("caption"), None))
            elif kind == "html":
                # jinja2's; imported at the first raw-HTML node, so importing rllog does not load it
                from markupsafe import Markup

                append(("html", Markup(data["html"]), None, None, None))
            elif kind == "exception":
                text = f"{data['exc_type']}: {data['message']}"
                append(("exception", text, _clip(data["traceback"]), None, None))
            number[0] += _count(node.children)
            continue
        tag = node.tag
        kids = node.children
        if tag == "p" or tag == "pre":
            append((*_text_op(tag, kids[0] if len(kids) == 1 else "".join(kids)), anchor))
            number[0] += _count(kids)
        elif tag == "section":
            head = kids[0]
            append(("section", head.tag, _text(head), None, f"lt-{number[0]}"))
            number[0] += _count(kids[:1])
            _flatten(kids[1:], out, notes, logged, number, n)
            append(("end_section", None, None, None, None))
        elif tag == "details":
            summary = kids[0]
            if node.attrs.get("class") == "lt-group":
                g = int(node.attrs["id"][len("group-") :])
                logged.append(g)
                head = summary.children[0]
                append(("group", head.tag, _text(head), (g, notes.get(g, "")), f"lt-{number[0] + 1}"))
            else:
                append(("details", _text(summary), "open" in node.attrs, None, f"lt-{number[0]}"))
            number[0] += _count(kids[:1])
            _flatten(kids[1:], out, notes, logged, number, n)
            append(("end_details", None, None, None, None))
        else:
            _flatten(kids, out, notes, logged, number, n)


def _count(children: list[Any]) -> int:
    """The number of nodes in ``children`` and below (strings are not nodes)."""
    return sum(1 + _count(c.children) for c in children if type(c) is not str)


def _text(node: Node) -> str:
    return "".join(c if type(c) is str else _text(c) for c in node.children)


def _text_op(op: str, text: str) -> tuple[Any, ...]:
    """``(op, text, None, None)`` for a short text, ``(op + "_long", clipped, None, None)`` for a long one."""
    if len(text) <= COLLAPSE_CHARS:
        return (op, text, None, None)
    return (op + "_long", _clip(text), None, None)


def _clip(text: str) -> tuple[str, str, int]:
    """``(shown, folded, omitted_chars)`` for a text of any length."""
    n = len(text)
    if n <= COLLAPSE_CHARS:
        return text, "", 0
    return text[:HEAD_CHARS], text[HEAD_CHARS:MAX_HTML_CHARS], max(0, n - MAX_HTML_CHARS)


def _fmt(value: Any) -> str:
    t = type(value)
    if t is str:
        if len(value) > MAX_CELL_CHARS:
            return f"{value[:MAX_CELL_CHARS]}… ({len(value) - MAX_CELL_CHARS:,} more characters in the JSON)"
        return value
    if t is float:
        return f"{value:.6g}"
    if value is None:
        return ""
    return str(value)


def _message(m: Any) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    """``(css class, role, note, parts)`` of one logged message (any value: odd ones show their repr)."""
    if not isinstance(m, dict):
        return "other", "?", "not a message dict", [("other", _clip(_pretty(m)), None)]
    role = m.get("role")
    if not isinstance(role, str):
        role = "?" if role is None else _pretty(role)
    css = role if role in _ROLES else "other"
    note = ""
    if role == "tool":
        name, call_id = m.get("name"), m.get("tool_call_id")
        note = " · ".join(
            x for x in (f"result of {name}" if name else "", f"call {call_id}" if call_id else "") if x
        )
    elif isinstance(m.get("name"), str):
        note = m["name"]
    content = m.get("content")
    parts: list[tuple[Any, ...]] = []
    if type(content) is str:
        parts.append(_part_text(content))
    elif isinstance(content, list):
        for part in content:
            parts.append(_part(part))
    elif isinstance(content, dict):
        parts.append(_part(content))
    elif content is not None:
        parts.append(("other", _clip(_pretty(content)), None))
    tool_calls = m.get("tool_calls")
    if isinstance(tool_calls, list):
        parts.extend(_tool_call(tc) for tc in tool_calls)
    elif tool_calls is not None:
        parts.append(("other", _clip(_pretty(tool_calls)), None))
    return css, role, note, parts


def _part(part: Any) -> tuple[Any, ...]:
    if type(part) is str:
        return _part_text(part)
    if not isinstance(part, dict):
        return ("other", _clip(_pretty(part)), None)
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return _part_text(part["text"])
    if kind == "thinking" and isinstance(part.get("thinking"), str):
        thinking = part["thinking"]
        return ("thinking", _clip(thinking), f"{len(thinking):,} characters")
    if kind in ("tool_call", "function_call"):
        return _tool_call(part.get("tool_call", part))
    if kind == "unparsed_tool_call":
        return (
            "tool_call",
            ("unparsed tool call", ""),
            _clip(f"{part.get('raw_text', '')}\n{part.get('error', '')}"),
        )
    if isinstance(kind, str) and "image" in kind:
        return ("image", kind, None)
    return ("other", _clip(_pretty(part)), None)


def _part_text(text: str) -> tuple[Any, ...]:
    return ("text", text, None) if len(text) <= COLLAPSE_CHARS else ("text_long", _clip(text), None)


def _tool_call(tc: Any) -> tuple[Any, ...]:
    """``("tool_call", (name, call id), clipped arguments)``; JSON arguments are pretty-printed."""
    if not isinstance(tc, dict):
        return ("other", _clip(_pretty(tc)), None)
    fn: dict[str, Any] = tc["function"] if isinstance(tc.get("function"), dict) else tc
    name = fn.get("name", "?")
    call_id = tc.get("id") or fn.get("id") or ""
    args = fn.get("arguments", fn.get("args", ""))
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            args = _pretty(parsed)
    else:
        args = _pretty(args)
    return ("tool_call", (str(name), str(call_id)), _clip(args))


def _pretty(value: Any) -> str:
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _group_note(recs: list[dict[str, Any]]) -> str:
    rewards = [r["total_reward"] for r in recs if isinstance(r["total_reward"], (int, float))]
    finite = [x for x in rewards if math.isfinite(x)]
    note = f"{len(recs)} trajectories"
    if finite:
        note += (
            f" · mean reward {sum(finite) / len(finite):.4g} (min {min(finite):.4g}, max {max(finite):.4g})"
        )
    return note


def _traj_row(r: dict[str, Any]) -> tuple[str, ...]:
    steps = r["steps"]
    ob = [s["ob_len"] for s in steps if s["ob_len"] is not None]
    ac = [s["ac_len"] for s in steps if s["ac_len"] is not None]
    metrics = ", ".join(f"{k}={_fmt(v)}" for k, v in r["trajectory_metrics"].items())
    return (
        str(r["traj_idx"]),
        _fmt(r["total_reward"]),
        _fmt(r["final_reward"]),
        str(len(steps)),
        _fmt(sum(ob)) if ob else "",
        _fmt(sum(ac)) if ac else "",
        _fmt(metrics),
    )
