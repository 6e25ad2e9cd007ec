"""The logtree model: the trace tree, its sections and the current-section context.

:class:`Node` is one element of the tree; :class:`TraceDoc` is the ``*_logtree.json``
document (its field order is the file's key order); :class:`TraceView` is the read-only
snapshot a renderer gets (the document plus what only the page shows). :class:`Section`
and :class:`Trace` record content; the context managers here make a section current in
the :mod:`contextvars` variable that the module-level calls of :mod:`rllog.logtree`
write through.

Layering: this module knows no file format. ``Trace.to_json`` / ``Trace.to_html`` call
the functions installed with :func:`set_renderer` (``rllog.logtree._io`` installs
:mod:`rllog.logtree._render`'s at import), so the model never imports the renderer and
the renderer never sees a :class:`Trace`.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import inspect
import math
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from rllog.logtree._values import check_index, check_str, messages_of, safe_repr, table_of, trajectory_record

__all__ = [
    "BindCM",
    "Node",
    "ScopeCM",
    "Section",
    "Trace",
    "TraceDoc",
    "TraceView",
    "current_section",
    "open_trace",
    "set_renderer",
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


class TraceDoc(msgspec.Struct):
    """The ``*_logtree.json`` document: ``{"title", "started_at", "path", "root"}`` (in this order).

    ``started_at`` is ISO 8601 with seconds and the local UTC offset; ``path`` is the HTML
    file's URL or None; ``root`` is the ``body`` node, "Trajectory Details" last.
    """

    title: str
    started_at: str
    path: str | None
    root: Node


class TraceView(msgspec.Struct, frozen=True, gc=False):
    """A finished snapshot of a trace, everything a renderer needs (it never sees the :class:`Trace`).

    ``doc`` is the JSON document; ``trajectories`` the records of "Trajectory Details"
    (the same list as in its node), sorted by ``(group_idx, traj_idx)``; ``nav`` the
    ``(label, relative href)`` links at the top of the page; ``nonfinite`` whether a
    non-finite float was logged anywhere (the JSON then needs Python's encoder);
    ``strict_json`` writes those as ``null``.
    """

    doc: TraceDoc
    trajectories: list[dict[str, Any]]
    nav: tuple[tuple[str, str], ...]
    num_groups_to_log: int
    strict_json: bool
    nonfinite: bool

    @property
    def title(self) -> str:
        return self.doc.title

    @property
    def started_at(self) -> str:
        return self.doc.started_at

    @property
    def path(self) -> str | None:
        return self.doc.path

    @property
    def content(self) -> list[Any]:
        """The root's children before "Trajectory Details" (what was logged)."""
        return self.doc.root.children[:-1]


_encode_json: Callable[[TraceView], bytes] | None = None
_render_html: Callable[[TraceView], str] | None = None


def set_renderer(encode_json: Callable[[TraceView], bytes], render_html: Callable[[TraceView], str]) -> None:
    """Install what ``Trace.to_json`` / ``Trace.to_html`` render with.

    ``rllog.logtree._io`` installs :mod:`rllog.logtree._render`'s functions at import, so
    the model does not import the renderer.
    """
    global _encode_json, _render_html
    _encode_json, _render_html = encode_json, render_html


_state: contextvars.ContextVar[Section | None] = contextvars.ContextVar("rllog_logtree_section", default=None)
_open_traces: list[Trace] = []  # traces bound somewhere in the process (for threads without context)
_open_lock = threading.Lock()


def current_section() -> Section:
    """The section calls here write into: the context's, else the one open trace, else a no-op section."""
    sec = _state.get()
    if sec is not None:
        return sec
    traces = _open_traces
    return traces[0] if len(traces) == 1 else _NULL


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
        state = (
            "no trace" if self.trace is None else ("disabled" if self.node is None else f"level {self.level}")
        )
        return f"<logtree.Section {state} group={self.group_idx}>"

    # sections

    def scope(self, title: str) -> ScopeCM:
        """A nested section under this one, titled ``title`` (header level = depth + 1, at most h6)."""
        return ScopeCM(self, "scope", title, None)

    def details(self, summary: str, *, open: bool = False) -> ScopeCM:
        """A collapsible block (``<details>``) showing ``summary``; closed unless ``open``."""
        return ScopeCM(self, "details", summary, open)

    def group(self, group_idx: int, title: str | None = None) -> ScopeCM:
        """The section of trajectory group ``group_idx`` (collapsible; title "Group N").

        Full content only if ``group_idx < num_groups_to_log``; otherwise the section is
        disabled and only :meth:`trajectory_stats` inside it records.

        Raises:
            TypeError: ``group_idx`` is not an int.
            ValueError: ``group_idx`` < 0.
        """
        return ScopeCM(self, "group", title, check_index(group_idx, "group_idx"))

    def bind(self) -> BindCM:
        """Make this section the current one in this thread/task until the block ends."""
        return BindCM(self)

    # content

    def text(self, text: str, *, code: bool = False) -> None:
        """A paragraph of ``text`` (escaped; whitespace kept); ``code=True`` shows it monospace.

        Anything but a str is warned about once and shown as its repr; never raises.
        """
        node, trace = self.node, self.trace
        if node is None or trace is None:  # disabled section or no trace (a node implies a trace)
            return
        if type(text) is not str:
            if isinstance(text, str):
                text = str(text)
            else:
                trace._odd_input(f"logtree.text expects a str, got {type(text).__name__}; shown as its repr")
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
        node, trace = self.node, self.trace
        if node is None or trace is None:  # disabled section or no trace (a node implies a trace)
            return
        try:
            plain = messages_of(messages, trace._odd_input)
        except Exception as exc:  # a model_dump/__str__ that raises: show what we can
            trace._odd_input(
                f"logtree.conversation could not read its messages ({type(exc).__name__}: {exc}); shown as their repr"
            )
            plain = [safe_repr(messages, 50_000)]
        node.children.append(
            Node("div", {"class": "lt-conversation"}, [], {"type": "conversation", "messages": plain})
        )

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
        node, trace = self.node, self.trace
        if node is None or trace is None:  # disabled section or no trace (a node implies a trace)
            return
        odd = trace._odd_input
        try:
            cols, rows = table_of(data, columns, odd)
        except Exception as exc:  # e.g. a DataFrame whose to_dict raises
            odd(f"logtree.table could not read its data ({type(exc).__name__}: {exc}); shown as its repr")
            cols, rows = ["value"], [[safe_repr(data)]]
        cap = None if caption is None else self._str(caption, "table caption")
        if not trace._nonfinite and any(type(c) is float and not math.isfinite(c) for r in rows for c in r):
            trace._nonfinite = True
        node.children.append(
            Node(
                "table",
                {"class": "lt-table"},
                [],
                {"type": "table", "columns": cols, "rows": rows, "caption": cap},
            )
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
                raise ValueError(
                    "trajectory_stats needs a group: call it inside logtree.group(g) or pass group_idx="
                )
        if steps is None:
            steps = (
                []
                if ob_len is None and ac_len is None
                else [{"ob_len": ob_len, "ac_len": ac_len, "episode_done": True}]
            )
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
            node = Node(
                "section", {"class": "lt-section"}, [Node(f"h{level}", {}, [self._str(title, "scope title")])]
            )
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
        if self.trace is not None:
            self.trace._odd_input(
                f"logtree {what} must be a str, got {type(value).__name__}; shown as its repr"
            )
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


class ScopeCM:
    """Context manager (and decorator) for a section; resolves its parent on entry."""

    __slots__ = ("_arg", "_kind", "_parent", "_section", "_title", "_token")

    def __init__(self, parent: Section | None, kind: str, title: Any, arg: Any) -> None:
        self._parent = parent
        self._kind = kind
        self._title = title
        self._arg = arg
        self._token: contextvars.Token[Section | None] | None = None

    def __enter__(self) -> Section:
        parent = self._parent if self._parent is not None else current_section()
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
                with ScopeCM(parent, kind, title, arg):
                    return await fn(*args, **kwargs)

            return awrapper  # type: ignore[return-value]  # the wrapper has fn's signature; F cannot say so

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with ScopeCM(parent, kind, title, arg):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]  # the wrapper has fn's signature; F cannot say so


class BindCM:
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

    def bind(self) -> BindCM:
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

    def view(self) -> TraceView:
        """A snapshot of the trace for rendering: the document plus trajectories, links and flags.

        Puts concurrently started groups in index order (in place) and appends "Trajectory
        Details" to the snapshot's root (not to the trace's).
        """
        with self._lock:
            parents = list(self._group_parents.values())
        for parent in parents:  # concurrent groups are appended as they start: put them in order
            kids = parent.children
            slots = [i for i, c in enumerate(kids) if type(c) is Node and c.attrs.get("class") == "lt-group"]
            ordered = sorted((kids[i] for i in slots), key=_group_key)
            for i, c in zip(slots, ordered, strict=True):
                kids[i] = c
        trajectories = self.trajectories
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
                        "trajectories": trajectories,
                    },
                ),
            ],
        )
        root = Node(self.root.tag, self.root.attrs, [*self.root.children, details])
        doc = TraceDoc(self.title, self.started_at.isoformat(timespec="seconds"), self.path, root)
        return TraceView(
            doc, trajectories, tuple(self._nav), self.num_groups_to_log, self.strict_json, self._nonfinite
        )

    def document(self) -> TraceDoc:
        """The trace as the JSON document struct (groups sorted by index, details appended)."""
        return self.view().doc

    def to_dict(self) -> dict[str, Any]:
        """The JSON document as plain Python objects: ``{"title", "started_at", "path", "root"}``
        (what ``json.loads`` of :meth:`to_json` gives, except non-finite floats stay floats)."""
        return msgspec.to_builtins(self.document())

    def to_json(self) -> bytes:
        """The ``*_logtree.json`` bytes (UTF-8, compact; format in :mod:`rllog.logtree`).

        Raises:
            RuntimeError: no renderer installed (only if ``rllog.logtree`` itself was never imported).
        """
        if _encode_json is None:  # only if rllog.logtree._model is loaded without its package
            raise RuntimeError("rllog.logtree has no renderer installed; import rllog.logtree")
        return _encode_json(self.view())

    def to_html(self) -> str:
        """The self-contained HTML page (str; may hold lone surrogates, see ``html_bytes``).

        Raises:
            RuntimeError: no renderer installed (only if ``rllog.logtree`` itself was never imported).
        """
        if _render_html is None:
            raise RuntimeError("rllog.logtree has no renderer installed; import rllog.logtree")
        return _render_html(self.view())


def _group_key(node: Node) -> int:
    return int(node.attrs["id"][len("group-") :])


class _TraceBindCM(BindCM):
    __slots__ = ()

    def __enter__(self) -> Section:
        with _open_lock:
            if not _open_traces:
                _freeze_heap()
            _open_traces.append(self._section)  # type: ignore[arg-type]  # only Trace.bind makes a _TraceBindCM
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        with _open_lock:
            _open_traces.remove(self._section)  # type: ignore[arg-type]  # only Trace.bind makes a _TraceBindCM
            if not _open_traces:
                _unfreeze_heap()


_froze_heap = False  # True while the heap is frozen by _freeze_heap (guarded by _open_lock)


def _freeze_heap() -> None:
    """While traces are bound, keep Python's cyclic GC from rescanning the process heap.

    A big iteration adds ~10^5 containers to the tree; as they age they trigger full
    collections that scan every object of the process, so the cost per trajectory would
    grow with the tree (116 -> 256 us between 64x16 and 256x16). :func:`gc.freeze` moves
    what exists now to the permanent generation (O(1)); full collections then scan only
    what was allocated since, and :func:`_unfreeze_heap` hands it back when the last
    bound trace ends. Nothing is done when GC is off or someone else froze the heap
    (``gc.get_freeze_count() > 0``: unfreezing would undo their freeze). Garbage cycles
    made before the trace wait until then to be collected (forever, if a trace is bound
    and never unbound). Called under ``_open_lock``.
    """
    global _froze_heap
    if gc.isenabled() and gc.get_freeze_count() == 0:
        gc.freeze()
        _froze_heap = True


def _unfreeze_heap() -> None:
    global _froze_heap
    if _froze_heap:
        _froze_heap = False
        gc.unfreeze()


# lifecycle


@contextmanager
def open_trace(
    title: str, *, num_groups_to_log: int = 4, path: str | None = None, strict_json: bool = False
) -> Iterator[Trace]:
    """Create a :class:`Trace` and make it current for the block; nothing is written.

    An exception leaving the block is recorded in the trace and re-raised.

    Raises:
        TypeError: ``title`` is not a str, or ``num_groups_to_log`` not an int.
        ValueError: ``num_groups_to_log`` < 0.
    """
    trace = Trace(title, num_groups_to_log=num_groups_to_log, path=path, strict_json=strict_json)
    with trace.bind():
        try:
            yield trace
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                trace._record_exception(exc)
            raise
