"""Report a run's rows to the trackers a team watches: wandb, TensorBoard, trackio, the console.

``RunLogger(..., report_to=["wandb", "tensorboard", "trackio"])`` (or ``"all"`` for every installed
tracker, or option objects such as ``rllog.sinks.Wandb(project="p", mode="offline")``)
sends every metrics row, the config, each checkpoint record, the iteration reports and
rollout summaries, and the live doctor's findings to each sink. metrics.jsonl stays the
source of truth: sinks run on one background thread fed by a bounded queue
(:mod:`rllog.sinks._dispatch`), so a slow, failing or unreachable tracker never slows or
stops training, and whatever a sink did not receive is counted and said.

A sink is any object with a ``name`` and the methods of :class:`Sink`; subclass
:class:`BaseSink` to write one (every method defaults to doing nothing).

============  =============================  ==========================================
sink          extra                          what it gets
============  =============================  ==========================================
``wandb``     ``pip install 'rllog[wandb]'`` history rows, config, checkpoints (summary),
                                             reports (``wandb.Html``), rollouts
                                             (``wandb.Table``), findings (``run.alert``)
``tensorboard`` ``'rllog[tensorboard]'``     scalars, config (text + hparams),
                                             checkpoints, report links and findings (text)
``trackio``   ``'rllog[trackio]'``           rows and config in trackio's local store
                                             (``$TRACKIO_DIR``, never the network),
                                             findings (trackio alerts)
``console``   (none)                         one line per row, checkpoint and finding on stderr
============  =============================  ==========================================
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

from rllog.sinks._console import Console
from rllog.sinks._dispatch import SinkRun
from rllog.sinks._tensorboard import TensorBoard
from rllog.sinks._trackio import Trackio
from rllog.sinks._wandb import Wandb

__all__ = ["Sink", "BaseSink", "SinkRun", "Wandb", "TensorBoard", "Trackio", "Console", "resolve_sinks"]


@runtime_checkable
class Sink(Protocol):
    """What the dispatcher calls, always on its one background thread, in logging order.

    ``open`` returns the state to keep for a resume (e.g. ``{"id": "abc123"}``; stored in
    the run's ``trackers.json`` under the sink's ``name`` and given back in
    ``SinkRun.state`` when the run is resumed) or None. Rows are
    ``log_metrics(step, row)`` with ``row`` the keys logged (NaN/±Inf as floats, strings,
    bools, None). Any method may raise: the call is retried, then the sink is disabled.
    """

    name: str

    def open(self, run: SinkRun) -> dict[str, Any] | None: ...
    def log_metrics(self, step: int, row: dict[str, Any]) -> None: ...
    def log_config(self, config: dict[str, Any]) -> None: ...
    def log_checkpoint(self, record: dict[str, Any]) -> None: ...
    def log_report(self, report: dict[str, Any]) -> None: ...
    def log_rollouts(self, rollouts: dict[str, Any]) -> None: ...
    def log_finding(self, finding: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class BaseSink:
    """A sink that does nothing; subclass it and override what your tracker takes.

    ``log_report`` gets ``{"iteration", "split", "html": name of the report file,
    "json": name of the logtree file, "url": the report's full URL}``;
    ``log_rollouts`` gets ``{"iteration", "split", "file", "records": [trajectory
    summary dicts]}``; ``log_finding`` gets a doctor finding
    (:meth:`rllog.doctor.Finding.to_dict` plus ``"fired_at"``, the step it fired at).
    """

    name = "sink"

    def open(self, run: SinkRun) -> dict[str, Any] | None:
        return None

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        pass

    def log_config(self, config: dict[str, Any]) -> None:
        pass

    def log_checkpoint(self, record: dict[str, Any]) -> None:
        pass

    def log_report(self, report: dict[str, Any]) -> None:
        pass

    def log_rollouts(self, rollouts: dict[str, Any]) -> None:
        pass

    def log_finding(self, finding: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


#: the trackers ``report_to="all"`` picks when their package is installed, with that package
_TRACKERS = {
    "wandb": (Wandb, "wandb"),
    "tensorboard": (TensorBoard, "tensorboard"),
    "trackio": (Trackio, "trackio"),
}
_NAMES = (*_TRACKERS, "console")


def resolve_sinks(report_to: str | Any | Iterable[str | Any] | None) -> list[Any]:
    """The sink objects for ``report_to``: a name (``"wandb"``, ``"tensorboard"``,
    ``"trackio"``, ``"console"``), ``"all"`` (every tracker whose package is installed),
    ``"none"``/None/``[]``, a sink object, or a list of these.

    Raises:
        ValueError: an unknown name, or two sinks with the same name.
        TypeError: an item that is neither a name nor a sink object (a sink class too).
        ImportError: a named tracker's package is not installed (the message gives the
            ``pip install 'rllog[...]'`` line); raised here, at RunLogger construction.
        ValueError: also when trackio is named and a variable that would send its data off
            the machine (``TRACKIO_SPACE_ID``...) is set; see :mod:`rllog.sinks._trackio`.
    """
    if report_to is None or report_to == "none":
        return []
    items = (
        [report_to] if isinstance(report_to, str) or not isinstance(report_to, Iterable) else list(report_to)
    )
    sinks: list[Any] = []
    for item in items:
        if item == "all":
            sinks.extend(
                cls() for cls, pkg in _TRACKERS.values() if importlib.util.find_spec(pkg) is not None
            )
        elif item == "console":
            sinks.append(Console())
        elif isinstance(item, str):
            if item not in _TRACKERS:
                raise ValueError(
                    f"report_to: unknown sink {item!r}; expected one of {[*_NAMES, 'all', 'none']} or a sink object"
                )
            sinks.append(_TRACKERS[item][0]())
        elif isinstance(item, type):  # a class has the methods too: Sink's check would pass it
            raise TypeError(
                f"report_to: {item.__name__} is a class; pass an instance, e.g. {item.__name__}() "
                f"or {item.__name__}(...) with its options"
            )
        elif isinstance(item, Sink):
            sinks.append(item)
        else:
            raise TypeError(
                f"report_to: expected a sink name or a sink object (rllog.sinks.Wandb(...), a BaseSink subclass), "
                f"got {type(item).__name__} {item!r}"
            )
    names = [s.name for s in sinks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"report_to names sink(s) {dup} more than once; give each tracker once")
    for sink in sinks:
        check = getattr(sink, "check_installed", None)
        if check is not None:
            check()
    return sinks
