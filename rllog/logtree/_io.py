"""Writing logtree reports through a Storage: ``write_trace`` and ``iteration_trace``.

The one place where the model meets the renderer: a :class:`~rllog.logtree._model.Trace`
gives its :class:`~rllog.logtree._model.TraceView`, :mod:`rllog.logtree._render` turns
that into the ``*_logtree.json`` and ``*.html`` bytes, and the storage writes them. At
import this module installs the renderer that ``Trace.to_json`` / ``Trace.to_html`` use.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rllog._format.layout import artifact_name
from rllog.logtree._model import Trace, open_trace, set_renderer
from rllog.logtree._render import encode_json, gc_paused, render_html
from rllog.logtree._render import html_bytes as _page_bytes

__all__ = ["html_bytes", "iteration_trace", "write_trace"]

set_renderer(encode_json, render_html)


def html_bytes(trace: Trace) -> bytes:
    """``trace``'s HTML page as UTF-8 bytes (what :func:`write_trace` writes; lone surrogates
    become visible ``\\udXXX`` escapes, so the bytes are always valid UTF-8)."""
    with gc_paused():
        return _page_bytes(trace.view())


def write_trace(
    storage: Any, trace: Trace, iteration: int, eval_name: str | None = None, layout: str = "flat"
) -> tuple[str, str]:
    """Write ``trace`` as the iteration's HTML report and logtree JSON through ``storage``.

    Files (README.md, "Files in a run"): ``train_iteration_NNNNNN.html`` + ``..._logtree.json``, or
    ``eval_<safe name>_iteration_NNNNNN...`` when ``eval_name`` is given; with
    ``layout="tinker"`` ``iteration_NNNNNN/train.html``, ``iteration_NNNNNN/eval_<safe name>.html``
    (:func:`rllog._format.layout.artifact_name`). Each is
    written atomically (``storage.write``); the JSON first. The page links the run's
    ``index.html`` and, for a train report, the previous and next iteration's report.

    Returns:
        ``(html_name, json_name)`` as written.

    Raises:
        OSError: the storage failed (nothing half-written is visible).
        TypeError / ValueError: a bad ``iteration`` or ``eval_name``.
    """
    html_name = artifact_name(iteration, "html", eval_name, layout)
    json_name = artifact_name(iteration, "logtree", eval_name, layout)
    with gc_paused():  # the view, the JSON and the page: rllog's code only, no cycles made
        trace._nav = _neighbours(iteration, eval_name, layout)
        if trace.path is None:
            trace.path = _normal_url(f"{storage.url}/{html_name}")
        view = trace.view()
        json_bytes = encode_json(view)
        page = _page_bytes(view)
    storage.write(json_name, json_bytes)
    storage.write(html_name, page)
    return html_name, json_name


def _neighbours(iteration: int, eval_name: str | None, layout: str = "flat") -> list[tuple[str, str]]:
    """Links of a written report: the run's ``index.html`` (written by ``rllog index``) and,
    for a train report, the previous and next iteration's report by their conventional
    names. The next one does not exist yet when this one is written (a static site may
    show "not found" for the last iteration; the index lists what exists). Evaluations
    run at intervals the report cannot know, so an eval report links the index only."""
    here = posixpath.dirname(artifact_name(iteration, "html", eval_name, layout))

    def rel(name: str) -> str:  # links are relative to the page's own folder
        return posixpath.relpath(name, here) if here else name

    nav = [("Run index", rel("index.html"))]
    if eval_name is None:
        if iteration > 0:
            nav.append(
                (f"← iteration {iteration - 1}", rel(artifact_name(iteration - 1, "html", None, layout)))
            )
        nav.append((f"iteration {iteration + 1} →", rel(artifact_name(iteration + 1, "html", None, layout))))
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
    layout: str = "flat",
) -> Iterator[Trace]:
    """Trace one iteration (or one evaluation) and write its report at the end.

    The body runs with a fresh :class:`Trace` current (module calls go into it). When the
    block ends, normally or by an exception (recorded in the trace, at the top of the
    page when raised outside every scope, then re-raised), :func:`write_trace` writes
    the HTML and JSON (file names by ``layout``, see :func:`write_trace`). Odd data given to content calls is reported through ``warn`` too. A storage failure there never
    propagates: it is reported through ``warn(kind, message)`` (``RunLogger._warn_once``;
    default :func:`warnings.warn`) naming the files not written.

    Raises:
        TypeError / ValueError: bad ``iteration``, ``eval_name``, ``num_groups_to_log`` or
            ``layout`` (at entry, before the body runs).
    """
    artifact_name(iteration, "html", eval_name, layout)  # validate before the body runs
    if title is None:
        title = (
            f"Train iteration {iteration}"
            if eval_name is None
            else f"Evaluation {eval_name}, iteration {iteration}"
        )
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
                write_trace(storage, trace, iteration, eval_name, layout)
            except Exception as exc:
                names = f"{artifact_name(iteration, 'html', eval_name, layout)} and _logtree.json"
                message = f"the logtree report {names} was not written to {storage.url}: {type(exc).__name__}: {exc}"
                if warn is None:
                    import warnings

                    warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=3)
                else:
                    warn("logtree_write", message)
