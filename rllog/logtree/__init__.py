"""Logtree: scope-based tracing of rollouts, written as per-iteration HTML reports and JSON.

Rollout code says what happened, in nested sections; rllog writes it at the end of the
iteration as ``train_iteration_NNNNNN.html`` (for people) and
``train_iteration_NNNNNN_logtree.json`` (for programs), or ``eval_<name>_...`` for an
evaluator (README.md, "Files in a run")::

    from rllog import logtree

    with logger.iteration(i):                     # or logtree.iteration_trace(storage, i)
        for g, group in enumerate(groups):
            with logtree.group(g):                # full content for g < num_groups_to_log
                for t, traj in enumerate(group):
                    with logtree.scope(f"Trajectory {t}"):
                        logtree.conversation(traj.messages)
                        logtree.text(f"reward={traj.reward:.3f}")
                    logtree.trajectory_stats(t, total_reward=traj.reward, ob_len=150, ac_len=420)

Content: :func:`text`, :func:`conversation` (roles system/user/assistant/tool; content a
string, None, or a list of parts ``{"type": "text"|"thinking"|"tool_call"|"image", ...}``;
OpenAI-style ``tool_calls`` and ``role: "tool"`` results with ``tool_call_id``),
:func:`table` (list of dicts, dict of lists, dict of scalars, or rows), :func:`html`
(trusted markup only). **Content calls never raise for odd data**: a value of an
unexpected type is warned about once per trace (through ``RunLogger``'s warn-once) and
shown as its repr; only misuse of the structure (a ``group_idx`` that is not an int,
:func:`trajectory_stats` outside a group) raises. Sections: :func:`scope` (also a decorator), :func:`details`
(collapsed block), :func:`group` (a trajectory group).

**No active trace: every call is a cheap no-op** (~0.2 µs a call, ~0.5 µs a ``with
scope``; arguments are neither checked nor kept), so library code can call logtree
unconditionally; guard expensive argument building with :func:`is_active`. :func:`is_active` says whether
calls here are recorded; :func:`current` returns the current section or None.

Where content goes (the current section is held in a :mod:`contextvars` variable, set
and reset with tokens):

- asyncio tasks inherit the section that was current when they were created, so 64
  concurrent tasks each opening ``logtree.group(g)`` land in their own groups.
- threads do not inherit context variables. A worker thread with no section of its own
  logs at the top level of the one open trace, if exactly one trace is open in the
  process; with none or several open, its calls are no-ops. To keep nesting, pass a
  handle: ``sec = logtree.current()`` in the caller, then ``with sec.bind():`` in the
  worker, or call ``sec.text(...)`` directly, or submit with
  ``contextvars.copy_context().run``.
- explicit handles: :class:`Trace` and every :class:`Section` have the same methods as
  the module (``trace.text``, ``with trace.scope("A") as a: a.table(...)``), for code
  that prefers no ambient state.

An exception that leaves a scope is recorded in that scope (type, message, traceback)
and re-raised; one raised directly in the iteration (outside every scope) is recorded
first in the root, at the top of the page. :func:`iteration_trace` still writes the
report, with the exception in it.

``num_groups_to_log`` (default 4): groups with index ``< num_groups_to_log`` get full
content; inside the others every content call is a no-op, but
:func:`trajectory_stats` still records, and every group appears in the always-present
"Trajectory Details" section (reward, steps, ob/ac lengths per trajectory).

JSON format (``*_logtree.json``)::

    {"title": "Train iteration 3", "started_at": "2026-01-02T10:00:00+00:00",
     "path": "gs://b/run/train_iteration_000003.html",   (normalised: no "..")
     "root": {"tag": "body", "attrs": {"class": "lt-root"}, "children": [...]}}

A node is ``{"tag", "attrs", "children"[, "data"]}``; children are nodes or plain
(unescaped) text strings. A node with ``data`` is described by it and has no children:
``{"type": "conversation", "messages": [{"role": ..., "content": ...}, ...]}`` (messages
exactly as logged), ``{"type": "table", "columns", "rows", "caption"}``,
``{"type": "html", "html"}``, ``{"type": "exception", "exc_type", "message",
"traceback"}`` and, last in the root, ``{"type": "trajectory_details",
"num_groups_to_log", "trajectories": [...]}`` whose records use the rollout-summary
names (``group_idx``, ``traj_idx``, ``total_reward``, ``final_reward``,
``trajectory_metrics``, ``steps: [{step_idx, ob_len, ac_len, reward, episode_done}]``).
Scopes are ``section`` nodes whose first child is ``h2``..``h6``; groups and details are
``details`` nodes whose first child is ``summary``; text is ``p`` (``pre`` for code).
Non-finite floats in tables and stats follow the run's ``strict_json`` (tokens ``NaN``
by default); strings with lone surrogates are written with ``\\uXXXX`` escapes.

The HTML page is self-contained (inline CSS, no scripts, no external requests); all
logged text is escaped. Texts over 8,000 characters show their first 2,000 and fold the
rest; past 50,000 characters the HTML stops, and the full text stays in the JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from rllog.logtree._io import _normal_url as _normal_url  # re-exported: tests check URL normalising here
from rllog.logtree._io import iteration_trace, write_trace
from rllog.logtree._model import Node, ScopeCM, Section, Trace, current_section, open_trace
from rllog.logtree._values import check_index

__all__ = [
    "Node",
    "Section",
    "Trace",
    "add_trajectories",
    "conversation",
    "current",
    "details",
    "group",
    "html",
    "is_active",
    "iteration_trace",
    "open_trace",
    "scope",
    "table",
    "text",
    "trajectory_stats",
    "write_trace",
]

_F = TypeVar("_F", bound=Callable[..., Any])


def current() -> Section | None:
    """The section logtree calls here would write into, or None if they are no-ops.

    Pass it to a worker thread and use ``with section.bind():`` there (or call its
    methods) to keep the nesting. None inside a group past ``num_groups_to_log`` too.
    Never raises.
    """
    sec = current_section()
    return None if sec.node is None else sec


def is_active() -> bool:
    """True if logtree calls here are recorded (a trace is active and the group is logged).

    Use it to skip building expensive arguments. Never raises.
    """
    return current_section().node is not None


def scope(title: str | _F) -> Any:
    """A nested section titled ``title`` in the current section (context manager).

    Also a decorator: ``@logtree.scope("Grading")`` or bare ``@logtree.scope`` (titled by
    the function's name) runs every call of the function (sync or async) in its own
    section. No-op without an active trace. Header level is the depth + 1 (at most h6).
    A title that is not a str is warned about once and shown as its repr; never raises.
    The context manager yields the new :class:`Section`.
    """
    if callable(title) and not isinstance(title, str):
        return ScopeCM(None, "scope", title.__name__, None)(title)
    return ScopeCM(None, "scope", title, None)


def group(group_idx: int, title: str | None = None) -> ScopeCM:
    """The section of trajectory group ``group_idx`` (title default "Group N"); see :meth:`Section.group`.

    Full content only if ``group_idx < num_groups_to_log``; the block yields the group's
    :class:`Section` (disabled past ``num_groups_to_log``).

    Raises:
        TypeError: ``group_idx`` is not an int (numpy ints are accepted).
        ValueError: ``group_idx`` < 0.
    """
    return ScopeCM(None, "group", title, check_index(group_idx, "group_idx"))


def details(summary: str, *, open: bool = False) -> ScopeCM:
    """A collapsible ``<details>`` block showing ``summary``, closed unless ``open``; see
    :meth:`Section.details`. Never raises (a non-str summary is shown as its repr)."""
    return ScopeCM(None, "details", summary, open)


def text(text: str, *, code: bool = False) -> None:
    """Add a paragraph to the current section; see :meth:`Section.text`. No-op without a trace.

    Texts over 8,000 characters are folded in the page (kept whole in the JSON). Never raises.
    """
    current_section().text(text, code=code)


def conversation(messages: Sequence[Mapping[str, Any]]) -> None:
    """Add a conversation (a list of ``{"role", "content", ...}`` dicts) to the current
    section; see :meth:`Section.conversation`. Never raises."""
    current_section().conversation(messages)


def table(data: Any, *, columns: Sequence[str] | None = None, caption: str | None = None) -> None:
    """Add a table (list of dicts, dict of lists, dict of scalars, rows + ``columns``, or a
    DataFrame) to the current section; see :meth:`Section.table`. Never raises."""
    current_section().table(data, columns=columns, caption=caption)


def html(markup: str) -> None:
    """Add trusted raw HTML to the current section; see :meth:`Section.html`. Never raises."""
    current_section().html(markup)


def trajectory_stats(traj_idx: int, **kwargs: Any) -> None:
    """Record one trajectory's stats (rewards, per-step token lengths); see :meth:`Section.trajectory_stats`.

    Records even in groups past ``num_groups_to_log``; no-op without a trace.

    Raises:
        ValueError: no ``group_idx=`` and no enclosing group, or both ``steps`` and ``ob_len``/``ac_len``.
        TypeError: a value is not a number where one is expected.
    """
    current_section().trajectory_stats(traj_idx, **kwargs)


def add_trajectories(records: Iterable[Mapping[str, Any]]) -> None:
    """Feed rollout-summary records to the current trace's "Trajectory Details" (no-op
    without a trace); see :meth:`Trace.add_trajectories`. ``RunLogger.log_rollouts`` does
    not call it: inside an ``iteration()`` block, pass it the same records to fill the
    report's section.

    Raises:
        TypeError / ValueError: a field has the wrong type, naming the record.
    """
    trace = current_section().trace
    if trace is not None:
        trace.add_trajectories(records)
