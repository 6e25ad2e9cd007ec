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

import contextvars
import functools
import inspect
import math
import os
import posixpath
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from rllog.logtree._values import check_index, check_str, messages_of, safe_repr, table_of, trajectory_record
from rllog._names import artifact_name

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

F = TypeVar("F", bound=Callable[..., Any])


class Node(msgspec.Struct, omit_defaults=True, gc=False):
    """One element of the trace tree, encoded as ``{"tag", "attrs", "children"[, "data"]}``.

    ``children`` holds nodes and plain text strings; a node with ``data`` has none.
    """

    tag: str
    attrs: dict[str, str]
    children: list[Any]
    data: dict[str, Any] | None = None


class _TraceDoc(msgspec.Struct):
    title: str
    started_at: str
    path: str | None
    root: Node


_state: contextvars.ContextVar[Section | None] = contextvars.ContextVar("rllog_logtree_section", default=None)
_open_traces: list[Trace] = []  # traces bound somewhere in the process (for threads without context)
_open_lock = threading.Lock()


def _current_section() -> Section:
    sec = _state.get()
    if sec is not None:
        return sec
    traces = _open_traces
    return traces[0] if len(traces) == 1 else _NULL


def current() -> Section | None:
    """The section logtree calls here would write into, or None if they are no-ops.

    Pass it to a worker thread and use ``with section.bind():`` there (or call its
    methods) to keep the nesting.
    """
    sec = _current_section()
    return None if sec.node is None else sec


def is_active() -> bool:
    """True if logtree calls here are recorded (a trace is active and the group is logged)."""
    return _current_section().node is not None


class Section:
    """A place in a trace that content goes into; the handle form of the module API.

    Obtained from ``with trace.scope(...) as section`` / :func:`current`. A section inside a
    group past ``num_groups_to_log`` is disabled: content calls are no-ops, but
    :meth:`trajectory_stats` still records. Methods are safe to call from several
    threads and tasks at once.
    """

    __slots__ = ("group_idx", "level", "node", "trace")

    def __init__(self, trace: Trace | None, node: Node | None, level: int, group_idx: int | None) -> None:
        self.trace = trace
        self.node = node
        self.level = level
        self.group_idx = group_idx

    def __repr__(self) -> str:
        state = "no trace" if self.trace is None else ("disabled" if self.node is None else f"level {self.level}")
        return f"<logtree.Section {state} group={self.group_idx}>"

    # sections

    def scope(self, title: str) -> _ScopeCM:
        """A nested section under this one, titled ``title`` (header level = depth + 1, at most h6)."""
        return _ScopeCM(self, "scope", title, None)

    def details(self, summary: str, *, open: bool = False) -> _ScopeCM:
        """A collapsible block (``<details>``) showing ``summary``; closed unless ``open``."""
        return _ScopeCM(self, "details", summary, open)

    def group(self, group_idx: int, title: str | None = None) -> _ScopeCM:
        """The section of trajectory group ``group_idx`` (collapsible; title "Group N").

        Full content only if ``group_idx < num_groups_to_log``; otherwise the section is
        disabled and only :meth:`trajectory_stats` inside it records.

        Raises:
            TypeError: ``group_idx`` is not an int.
        """
        return _ScopeCM(self, "group", title, check_index(group_idx, "group_idx"))

    def bind(self) -> _BindCM:
        """Make this section the current one in this thread/task until the block ends."""
        return _BindCM(self)

    # content

    def text(self, text: str, *, code: bool = False) -> None:
        """A paragraph of ``text`` (escaped; whitespace kept); ``code=True`` shows it monospace.

        Anything but a str is warned about once and shown as its repr; never raises.
        """
        node = self.node
        if node is None:
            return
        if type(text) is not str:
            if isinstance(text, str):
                text = str(text)
            else:
                self.trace._odd_input(f"logtree.text expects a str, got {type(text).__name__}; shown as its repr")
                text = safe_repr(text, 50_000)
        node.children.append(Node("pre" if code else "p", {"class": "lt-code" if code else "lt-p"}, [text]))

    def conversation(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """A conversation: messages ``{"role": str, "content": str | list[part] | None, ...}``.

        Parts are dicts with ``"type"``: ``"text"`` (``text``), ``"thinking"``
        (``thinking``, shown folded), ``"tool_call"`` (``tool_call`` with
        ``function.name``/``function.arguments``, or ``name``/``arguments``),
        ``"image"``/``"image_url"`` (shown as a placeholder, never loaded). OpenAI
        chat messages are shown as such: an assistant message with ``content: None``
        and ``tool_calls: [{"id", "type": "function", "function": {"name",
        "arguments"}}]`` shows each call (arguments pretty-printed when they are
        JSON), a ``role: "tool"`` message names its ``tool_call_id`` and ``name``.
        The JSON keeps every message exactly as given (pydantic models, dataclasses
        and numpy values made plain; bytes and images as a ``"<N bytes>"`` /
        ``"<image>"`` placeholder).

        Never raises: a message that is not a dict, has no str ``role`` or content of
        an unexpected type is warned about once and shown as its repr.
        """
        node = self.node
        if node is None:
            return
        try:
            plain = messages_of(messages, self.trace._odd_input)
        except Exception as exc:  # a model_dump/__str__ that raises: show what we can
            self.trace._odd_input(f"logtree.conversation could not read its messages ({type(exc).__name__}: {exc}); shown as their repr")
            plain = [safe_repr(messages, 50_000)]
        node.children.append(Node("div", {"class": "lt-conversation"}, [], {"type": "conversation", "messages": plain}))

    def table(
        self,
        data: Any,
        *,
        columns: Sequence[str] | None = None,
        caption: str | None = None,
    ) -> None:
        """A table from a list of dicts, a dict of equal-length lists, a dict of scalars
        (two columns: key, value), a sequence of rows (``columns`` names them), or a
        pandas DataFrame. Cells keep numbers as numbers in the JSON; other objects
        become ``str(obj)``. The page scrolls a wide table sideways.

        Never raises: other shapes (ragged columns or rows, a scalar) are warned about
        once and shown as well as they go (padded with empty cells, one cell).
        """
        node = self.node
        if node is None:
            return
        odd = self.trace._odd_input
        try:
            cols, rows = table_of(data, columns, odd)
        except Exception as exc:  # e.g. a DataFrame whose to_dict raises
            odd(f"logtree.table could not read its data ({type(exc).__name__}: {exc}); shown as its repr")
            cols, rows = ["value"], [[safe_repr(data)]]
        cap = None if caption is None else self._str(caption, "table caption")
        if not self.trace._nonfinite and any(type(c) is float and not math.isfinite(c) for r in rows for c in r):
            self.trace._nonfinite = True
        node.children.append(
            Node("table", {"class": "lt-table"}, [], {"type": "table", "columns": cols, "rows": rows, "caption": cap})
        )

    def html(self, markup: str) -> None:
        """Raw HTML inserted as it is. **Trusted markup only**: never pass model output.

        Anything but a str is warned about once and shown as escaped text (its repr).
        """
        node = self.node
        if node is None:
            return
        if not isinstance(markup, str):
            self.text(markup)
            return
        node.children.append(Node("div", {"class": "lt-html"}, [], {"type": "html", "html": str(markup)}))

    def trajectory_stats(
        self,
        traj_idx: int,
        *,
        total_reward: float | None = None,
        final_reward: float | None = None,
        steps: Sequence[Mapping[str, Any]] | None = None,
        ob_len: int | None = None,
        ac_len: int | None = None,
        group_idx: int | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one trajectory's stats for the "Trajectory Details" section (every group).

        Args:
            traj_idx: index of the trajectory in its group.
            total_reward: the episode return; default: sum of step rewards + final_reward.
            final_reward: the group-level reward added at the end (e.g. the verifier's).
            steps: per-step ``{ob_len, ac_len, reward, episode_done}`` (tokens, as in
                rollout summaries); or give ``ob_len``/``ac_len`` for a one-step episode.
            group_idx: default: the enclosing :meth:`group`.
            metrics: per-trajectory scalar metrics (``trajectory_metrics``).

        Recording the same ``(group_idx, traj_idx)`` again replaces the record.

        Raises:
            ValueError: no ``group_idx`` and no enclosing group.
            TypeError: a value is not a number where one is expected.
        """
        trace = self.trace
        if trace is None:
            return
        if group_idx is None:
            group_idx = self.group_idx
            if group_idx is None:
                raise ValueError("trajectory_stats needs a group: call it inside logtree.group(g) or pass group_idx=")
        if steps is None:
            steps = [] if ob_len is None and ac_len is None else [{"ob_len": ob_len, "ac_len": ac_len, "episode_done": True}]
        elif ob_len is not None or ac_len is not None:
            raise ValueError("trajectory_stats takes either steps=[...] or ob_len/ac_len, not both")
        trace.add_trajectories(
            [
                {
                    "group_idx": group_idx,
                    "traj_idx": traj_idx,
                    "total_reward": total_reward,
                    "final_reward": final_reward,
                    "trajectory_metrics": dict(metrics) if metrics else {},
                    "steps": steps,
                }
            ]
        )

    # internals

    def _open(self, kind: str, title: str | None, arg: Any) -> Section:
        trace = self.trace
        if trace is None:
            return self
        level = min(6, self.level + 1)
        group_idx = self.group_idx
        if kind == "group":
            group_idx = arg
            if self.node is None or group_idx >= trace.num_groups_to_log:
                return Section(trace, None, level, group_idx)
            title = f"Group {group_idx}" if title is None else self._str(title, "group title")
            node = Node("details", {"class": "lt-group", "id": f"group-{group_idx}", "open": ""}, [])
            node.children.append(Node("summary", {}, [Node(f"h{level}", {}, [title])]))
            trace._note_group_parent(self.node)
        elif self.node is None:
            return Section(trace, None, level, group_idx)
        elif kind == "scope":
            node = Node("section", {"class": "lt-section"}, [Node(f"h{level}", {}, [self._str(title, "scope title")])])
        else:  # details
            attrs = {"class": "lt-details", "open": ""} if arg else {"class": "lt-details"}
            node = Node("details", attrs, [Node("summary", {}, [self._str(title, "details summary")])])
            level = self.level
        self.node.children.append(node)
        return Section(trace, node, level, group_idx)

    def _str(self, value: Any, what: str) -> str:
        """``value`` if a str, else its repr (warned about once)."""
        if isinstance(value, str):
            return str(value)
        self.trace._odd_input(f"logtree {what} must be a str, got {type(value).__name__}; shown as its repr")
        return safe_repr(value)

    def _record_exception(self, exc: BaseException) -> None:
        trace = self.trace
        node = self.node
        if trace is None or node is None or id(exc) in trace._recorded_exceptions:
            return
        trace._recorded_exceptions.add(id(exc))
        try:
            message = str(exc)
        except Exception as e:  # a broken __str__ must not hide the original exception
            message = f"<str() failed: {type(e).__name__}>"
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        data = {"type": "exception", "exc_type": type(exc).__qualname__, "message": message, "traceback": tb}
        box = Node("details", {"class": "lt-exception", "open": ""}, [], data)
        if node is trace.root:  # raised in the iteration itself: first thing on the page
            node.children.insert(0, box)
        else:
            node.children.append(box)


_NULL = Section(None, None, 1, None)


class _ScopeCM:
    """Context manager (and decorator) for a section; resolves its parent on entry."""

    __slots__ = ("_arg", "_kind", "_parent", "_section", "_title", "_token")

    def __init__(self, parent: Section | None, kind: str, title: Any, arg: Any) -> None:
        self._parent = parent
        self._kind = kind
        self._title = title
        self._arg = arg
        self._token: contextvars.Token[Section | None] | None = None

    def __enter__(self) -> Section:
        parent = self._parent if self._parent is not None else _current_section()
        if parent.trace is None:
            self._section = _NULL
            return _NULL
        section = self._section = parent._open(self._kind, self._title, self._arg)
        self._token = _state.set(section)
        return section

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        token, self._token = self._token, None
        if token is not None:
            _reset(token)
        if exc is not None and exc_type is not GeneratorExit:
            self._section._record_exception(exc)

    def __call__(self, fn: F) -> F:
        """Use the section as a decorator: each call of ``fn`` runs in a fresh section."""
        parent, kind, title, arg = self._parent, self._kind, self._title, self._arg
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                with _ScopeCM(parent, kind, title, arg):
                    return await fn(*args, **kwargs)

            return awrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _ScopeCM(parent, kind, title, arg):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class _BindCM:
    __slots__ = ("_section", "_token")

    def __init__(self, section: Section) -> None:
        self._section = section

    def __enter__(self) -> Section:
        self._token = _state.set(self._section)
        return self._section

    def __exit__(self, *exc: object) -> None:
        _reset(self._token)


def _reset(token: contextvars.Token[Section | None]) -> None:
    try:
        _state.reset(token)
    except ValueError:  # exited in another context (e.g. a generator resumed elsewhere)
        _state.set(token.old_value if token.old_value is not contextvars.Token.MISSING else None)


class Trace(Section):
    """The trace of one iteration or evaluation: a tree of sections plus trajectory stats.

    It is also its own top-level :class:`Section` (``trace.text(...)``). Build one with
    :func:`open_trace` or :func:`iteration_trace` (which also make it current), or
    directly and use its methods.

    Args:
        title: the page title, e.g. ``"Train iteration 3"``.
        num_groups_to_log: groups with a smaller index get full content (default 4).
        path: what the JSON's ``path`` field says (the HTML file's URL), or None.
        strict_json: write non-finite floats as ``null`` instead of ``NaN`` tokens.

    Raises:
        TypeError / ValueError: ``num_groups_to_log`` is not an int >= 0.
    """

    __slots__ = (
        "_group_parents",
        "_lock",
        "_nav",
        "_nonfinite",
        "_recorded_exceptions",
        "_trajectories",
        "_warn",
        "_warned",
        "num_groups_to_log",
        "path",
        "root",
        "started_at",
        "strict_json",
        "title",
    )

    def __init__(
        self, title: str, *, num_groups_to_log: int = 4, path: str | None = None, strict_json: bool = False
    ) -> None:
        self.title = check_str(title, "title")
        self.started_at = datetime.now().astimezone()
        self.path = path
        self.num_groups_to_log = check_index(num_groups_to_log, "num_groups_to_log")
        self.strict_json = strict_json
        self.root = Node("body", {"class": "lt-root"}, [])
        self._trajectories: dict[tuple[int, int], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._group_parents: dict[int, Node] = {}
        self._recorded_exceptions: set[int] = set()
        self._nonfinite = False
        self._warn: Callable[[str, str], None] | None = None
        self._nav: list[tuple[str, str]] = []  # (label, relative href) links at the top of the page
        self._warned = False
        super().__init__(self, self.root, 1, None)

    def __repr__(self) -> str:
        return f"<logtree.Trace {self.title!r}>"

    def _odd_input(self, message: str) -> None:
        """Odd data given to a content call: warn once per trace (through ``warn`` of
        :func:`iteration_trace`, else :func:`warnings.warn`); the call goes on."""
        with self._lock:
            if self._warned:
                return
            self._warned = True
        message += " (warned once per report)"
        if self._warn is not None:
            self._warn("logtree_input", message)
        else:
            import warnings

            warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=4)

    def bind(self) -> _BindCM:
        """Make this trace current in this thread/task, and the fallback for threads
        without one while it is the only trace bound in the process."""
        return _TraceBindCM(self)

    def add_trajectories(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Add per-trajectory records (rollout-summary shape) to "Trajectory Details".

        Each record has ``group_idx``, ``traj_idx`` and optionally ``total_reward``,
        ``final_reward``, ``trajectory_metrics`` and ``steps`` (list of ``{ob_len,
        ac_len, reward, episode_done}``); other keys are ignored. A record for a
        ``(group_idx, traj_idx)`` already present replaces it. This is how rollout
        summaries logged in the same iteration feed the section.

        Raises:
            TypeError / ValueError: a field has the wrong type, naming the record.
        """
        clean = [trajectory_record(r) for r in records]
        with self._lock:
            for rec in clean:
                if rec.pop("_nonfinite", False):
                    self._nonfinite = True
                self._trajectories[rec["group_idx"], rec["traj_idx"]] = rec

    @property
    def trajectories(self) -> list[dict[str, Any]]:
        """The trajectory records, sorted by ``(group_idx, traj_idx)``."""
        with self._lock:
            return [self._trajectories[k] for k in sorted(self._trajectories)]

    def _note_group_parent(self, parent: Node) -> None:
        with self._lock:
            self._group_parents[id(parent)] = parent

    def document(self) -> _TraceDoc:
        """The trace as the JSON document struct (groups sorted by index, details appended)."""
        with self._lock:
            parents = list(self._group_parents.values())
        for parent in parents:  # concurrent groups are appended as they start: put them in order
            kids = parent.children
            slots = [i for i, c in enumerate(kids) if type(c) is Node and c.attrs.get("class") == "lt-group"]
            ordered = sorted((kids[i] for i in slots), key=_group_key)
            for i, c in zip(slots, ordered):
                kids[i] = c
        details = Node(
            "section",
            {"class": "lt-section lt-trajectory-details", "id": "trajectory-details"},
            [
                Node("h2", {}, ["Trajectory Details"]),
                Node(
                    "table",
                    {"class": "lt-table"},
                    [],
                    {
                        "type": "trajectory_details",
                        "num_groups_to_log": self.num_groups_to_log,
                        "trajectories": self.trajectories,
                    },
                ),
            ],
        )
        root = Node(self.root.tag, self.root.attrs, [*self.root.children, details])
        return _TraceDoc(self.title, self.started_at.isoformat(timespec="seconds"), self.path, root)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document as plain Python objects (what ``json.loads`` of :meth:`to_json` gives,
        except non-finite floats stay floats)."""
        return msgspec.to_builtins(self.document())

    def to_json(self) -> bytes:
        """The ``*_logtree.json`` bytes (UTF-8, compact)."""
        from rllog.logtree._render import encode_trace

        return encode_trace(self.document(), self.strict_json, self._nonfinite)

    def to_html(self) -> str:
        """The self-contained HTML page (str)."""
        from rllog.logtree._render import render_html

        return render_html(self)


def _group_key(node: Node) -> int:
    return int(node.attrs["id"][len("group-") :])


class _TraceBindCM(_BindCM):
    __slots__ = ()

    def __enter__(self) -> Section:
        with _open_lock:
            _open_traces.append(self._section)  # type: ignore[arg-type]
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        with _open_lock:
            _open_traces.remove(self._section)  # type: ignore[arg-type]


# module-level API: the current section's methods


def scope(title: str | F) -> Any:
    """A nested section titled ``title`` in the current section (context manager).

    Also a decorator: ``@logtree.scope("Grading")`` or bare ``@logtree.scope`` (titled by
    the function's name) runs every call of the function (sync or async) in its own
    section. No-op without an active trace.
    """
    if callable(title) and not isinstance(title, str):
        return _ScopeCM(None, "scope", title.__name__, None)(title)
    return _ScopeCM(None, "scope", title, None)


def group(group_idx: int, title: str | None = None) -> _ScopeCM:
    """The section of trajectory group ``group_idx``; see :meth:`Section.group`."""
    return _ScopeCM(None, "group", title, check_index(group_idx, "group_idx"))


def details(summary: str, *, open: bool = False) -> _ScopeCM:
    """A collapsible block in the current section; see :meth:`Section.details`."""
    return _ScopeCM(None, "details", summary, open)


def text(text: str, *, code: bool = False) -> None:
    """Add a paragraph to the current section; see :meth:`Section.text`. No-op without a trace."""
    _current_section().text(text, code=code)


def conversation(messages: Sequence[Mapping[str, Any]]) -> None:
    """Add a conversation to the current section; see :meth:`Section.conversation`."""
    _current_section().conversation(messages)


def table(data: Any, *, columns: Sequence[str] | None = None, caption: str | None = None) -> None:
    """Add a table to the current section; see :meth:`Section.table`."""
    _current_section().table(data, columns=columns, caption=caption)


def html(markup: str) -> None:
    """Add trusted raw HTML to the current section; see :meth:`Section.html`."""
    _current_section().html(markup)


def trajectory_stats(traj_idx: int, **kwargs: Any) -> None:
    """Record one trajectory's stats; see :meth:`Section.trajectory_stats`."""
    _current_section().trajectory_stats(traj_idx, **kwargs)


def add_trajectories(records: Iterable[Mapping[str, Any]]) -> None:
    """Feed rollout-summary records to the current trace's "Trajectory Details" (no-op
    without a trace); see :meth:`Trace.add_trajectories`. ``RunLogger.log_rollouts``
    calls this so a loop that logs rollout summaries gets the section filled."""
    trace = _current_section().trace
    if trace is not None:
        trace.add_trajectories(records)


# lifecycle


@contextmanager
def open_trace(
    title: str, *, num_groups_to_log: int = 4, path: str | None = None, strict_json: bool = False
) -> Iterator[Trace]:
    """Create a :class:`Trace` and make it current for the block; nothing is written.

    An exception leaving the block is recorded in the trace and re-raised.
    """
    trace = Trace(title, num_groups_to_log=num_groups_to_log, path=path, strict_json=strict_json)
    with trace.bind():
        try:
            yield trace
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                trace._record_exception(exc)
            raise


def write_trace(storage: Any, trace: Trace, iteration: int, eval_name: str | None = None) -> tuple[str, str]:
    """Write ``trace`` as the iteration's HTML report and logtree JSON through ``storage``.

    Files (README.md, "Files in a run"): ``train_iteration_NNNNNN.html`` + ``..._logtree.json``, or
    ``eval_<safe name>_iteration_NNNNNN...`` when ``eval_name`` is given. Each is
    written atomically (``storage.write``); the JSON first. The page links the run's
    ``index.html`` and, for a train report, the previous and next iteration's report.

    Returns:
        ``(html_name, json_name)`` as written.

    Raises:
        OSError: the storage failed (nothing half-written is visible).
        TypeError / ValueError: a bad ``iteration`` or ``eval_name``.
    """
    html_name = artifact_name(iteration, "html", eval_name)
    json_name = artifact_name(iteration, "logtree", eval_name)
    trace._nav = _neighbours(iteration, eval_name)
    if trace.path is None:
        trace.path = _normal_url(f"{storage.url}/{html_name}")
    from rllog.logtree._render import html_bytes

    storage.write(json_name, trace.to_json())
    storage.write(html_name, html_bytes(trace))
    return html_name, json_name


def _neighbours(iteration: int, eval_name: str | None) -> list[tuple[str, str]]:
    """Links of a written report: the run's ``index.html`` (written by ``rllog index``) and,
    for a train report, the previous and next iteration's report by their conventional
    names. The next one does not exist yet when this one is written (a static site may
    show "not found" for the last iteration; the index lists what exists). Evaluations
    run at intervals the report cannot know, so an eval report links the index only."""
    nav = [("Run index", "index.html")]
    if eval_name is None:
        if iteration > 0:
            nav.append((f"← iteration {iteration - 1}", artifact_name(iteration - 1, "html")))
        nav.append((f"iteration {iteration + 1} →", artifact_name(iteration + 1, "html")))
    return nav


def _normal_url(url: str) -> str:
    """``url`` with ``.`` and ``..`` segments resolved (``/a/../b`` -> ``/b``; ``gs://x/a/../b`` -> ``gs://x/b``)."""
    scheme, sep, rest = url.rpartition("://")
    if sep:
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.normpath(url)


@contextmanager
def iteration_trace(
    storage: Any,
    iteration: int,
    *,
    eval_name: str | None = None,
    num_groups_to_log: int = 4,
    title: str | None = None,
    strict_json: bool = False,
    warn: Callable[[str, str], None] | None = None,
) -> Iterator[Trace]:
    """Trace one iteration (or one evaluation) and write its report at the end.

    The body runs with a fresh :class:`Trace` current (module calls go into it). When the
    block ends, normally or by an exception (recorded in the trace, at the top of the
    page when raised outside every scope, then re-raised), :func:`write_trace` writes
    the HTML and JSON. Odd data given to content calls is reported through ``warn`` too. A storage failure there never
    propagates: it is reported through ``warn(kind, message)`` (``RunLogger._warn_once``;
    default :func:`warnings.warn`) naming the files not written.

    Raises:
        TypeError / ValueError: bad ``iteration``, ``eval_name`` or ``num_groups_to_log``
            (at entry, before the body runs).
    """
    artifact_name(iteration, "html", eval_name)  # validate before the body runs
    if title is None:
        title = f"Train iteration {iteration}" if eval_name is None else f"Evaluation {eval_name}, iteration {iteration}"
    with open_trace(title, num_groups_to_log=num_groups_to_log, strict_json=strict_json) as trace:
        trace._warn = warn
        try:
            yield trace
        except BaseException as exc:  # record before the report is written below
            if not isinstance(exc, GeneratorExit):
                trace._record_exception(exc)
            raise
        finally:
            try:
                write_trace(storage, trace, iteration, eval_name)
            except Exception as exc:
                names = f"{artifact_name(iteration, 'html', eval_name)} and _logtree.json"
                message = f"the logtree report {names} was not written to {storage.url}: {type(exc).__name__}: {exc}"
                if warn is None:
                    import warnings

                    warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=3)
                else:
                    warn("logtree_write", message)
