"""tinker-cookbook's ``ml_log`` interface on top of :class:`rllog.RunLogger`.

A tinker-cookbook script switches by changing its import::

    from rllog.integrations.tinker import setup_logging   # was: from tinker_cookbook.utils.ml_log import setup_logging

    ml_logger = setup_logging(log_dir, config=cfg)
    ml_logger.log_metrics({"env/all/reward/total": r}, step=i)
    ml_logger.close()

tinker-cookbook's own RL loop (``tinker_cookbook.rl.train.main``) builds its logger with
``ml_log.setup_logging`` itself; :func:`use_rllog` makes that call return rllog's for the
duration of a block (it sets the one module attribute and puts it back; nothing is
patched at import)::

    from rllog.integrations.tinker import use_rllog
    from tinker_cookbook.rl import train

    with use_rllog():                       # RunLogger options go here, e.g. report_to="wandb"
        asyncio.run(train.main(config))

Inside ``rl/train.py`` everything goes through ``ml_logger.store``
(tinker-cookbook 0.6.1, ``rl/train.py`` ``_get_logtree_scope`` and
``_maybe_export_rollout_summary_jsonl``, ``checkpoint_utils.save_checkpoint_async``,
``utils/trace.py`` ``IterationWindow.save_timing``); :attr:`RllogMlLogger.store` is an
:class:`RllogRunStore` that routes each write into the rllog run:

- ``write_logtree(i, trace_dict, base_name)``: the iteration's logtree (tinker-cookbook's
  ``logtree.init_trace``, with everything its envs logged) becomes rllog's report of
  iteration ``i`` (``base_name`` ``"train"``, or ``"eval_<label>"`` for evaluator
  ``<label>``): sections, folded details, texts, tables and conversations are replayed
  into :mod:`rllog.logtree`, so the page is rllog's (all text escaped; raw HTML that an
  env logged with ``logtree.log_html`` is shown as text).
- ``write_rollouts(i, records, base_name)``: the rollout summaries tinker-cookbook made
  from its ``TrajectoryGroup`` objects become rllog's rollout summaries of iteration ``i``.
- ``write_checkpoint(record)``: :meth:`rllog.RunLogger.log_checkpoint` (name, batch,
  epoch, final, state_path, sampler_path, other keys as loop state).
- ``write_timing_spans(step, spans)``: ``timing_spans.jsonl`` rows
  ``{name, start, end, step}`` (from tinker's ``wall_start``/``wall_end``, seconds).
- ``truncate_metrics(step)``: rllog already moved the rows at or past the resume point
  aside at open (``resume=True`` is the default here); returns 0 and warns if tinker
  resumes elsewhere.

:func:`setup_logging` defaults to ``layout="tinker"`` (``iteration_NNNNNN/train.html``...):
tinker-cookbook's loop also writes its own HTML page to ``iteration_NNNNNN/train.html``
directly, which rllog's report then replaces, and its ``TrainingRunStore`` readers and
dashboard read the run.

:class:`RllogMlLogger` has ``ml_log.Logger``'s methods (tinker-cookbook 0.6.1,
``tinker_cookbook/utils/ml_log.py``): ``log_hparams(config)`` writes config.json,
``log_metrics(metrics, step=None)`` appends a row (``step=None``: the last step used, or 0),
``log_metrics_event``, ``log_summary`` (a no-op, as the base class), ``log_long_text(key,
text)`` (written to ``long_text/<key>.txt``, the key made file-name safe) and ``close``.
"""

from __future__ import annotations

import contextlib
import html
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rllog._format.codec import encode_json
from rllog._format.layout import TIMING_SPANS_FILE, safe_eval_name
from rllog._run import RunLogger

__all__ = ["RllogMlLogger", "RllogRunStore", "setup_logging", "use_rllog"]


class RllogMlLogger:
    """``ml_log.Logger``'s interface writing to an rllog run (:attr:`run_logger`)."""

    def __init__(self, run_logger: RunLogger) -> None:
        self.run_logger = run_logger
        self._last_step = 0
        self._store = RllogRunStore(run_logger)

    @property
    def store(self) -> RllogRunStore:
        """What tinker-cookbook's loop writes its reports, rollouts, checkpoints and timings through."""
        return self._store

    def get_logger_url(self) -> str | None:
        """None: rllog writes files, not a hosted run page (``ml_log.Logger``'s default)."""
        return None

    def sync(self) -> None:
        """Push what was logged to the backend (:meth:`rllog.RunLogger.flush`)."""
        self.run_logger.flush()

    def log_hparams(self, config: Any) -> None:
        """Write config.json (RunLogger's conversion and redaction)."""
        self.run_logger.log_config(config)

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Append ``{"step": step, **metrics}``; ``step=None`` uses the last step given (0 at first).

        Raises:
            TypeError, ValueError: as :meth:`rllog.RunLogger.log_metrics`.
        """
        if step is not None:
            self._last_step = step
        self.run_logger.log_metrics(self._last_step, metrics)

    def enable_event_steps(self) -> None:
        pass

    def log_metrics_event(
        self, metrics: dict[str, Any], step: int, step_metric: str, metric_axes: dict[str, str] | None = None
    ) -> None:
        self.log_metrics({**metrics, step_metric: step}, step=step)

    def log_summary(self, metrics: dict[str, Any]) -> None:
        pass  # ml_log: loggers without a summary channel leave this a no-op

    def log_long_text(self, key: str, text: str) -> None:
        """Write ``text`` to ``long_text/<safe key>.txt`` (replacing an earlier one of that key)."""
        storage = self.run_logger.storage
        if storage is None:  # a NullRunLogger (rank != 0)
            return
        try:
            storage.write(f"long_text/{safe_eval_name(key)}.txt", text.encode("utf-8", "surrogatepass"))
        except OSError as exc:
            self.run_logger._notes.warn_once("long_text", f"could not write long text {key!r}: {exc}")

    def close(self) -> None:
        self.run_logger.close()


def setup_logging(
    log_dir: str | os.PathLike[str],
    wandb_project: str | None = None,
    wandb_name: str | None = None,
    config: Any | None = None,
    do_configure_logging_module: bool = True,
    **options: Any,
) -> RllogMlLogger:
    """``ml_log.setup_logging``'s signature: an :class:`RllogMlLogger` writing ``log_dir``.
    ``options`` go to RunLogger, with ``layout="tinker"`` and ``resume=True`` as defaults
    (tinker-cookbook's loop resumes from the run's last checkpoint by itself).

    ``wandb_project``/``wandb_name`` (what tinker-cookbook's loop passes from its config)
    become the project and run name of the wandb sink in ``report_to`` (where that sink
    has none of its own). rllog writes no W&B run unless ``report_to`` names wandb: a
    ``wandb_project`` without it is warned about. ``do_configure_logging_module`` is
    accepted for compatibility and not used.

    Raises:
        TypeError, ValueError: as :class:`rllog.RunLogger` (an unknown option too).

    Warns:
        UserWarning: ``wandb_project`` is given and ``report_to`` has no wandb sink.
    """
    options.setdefault("layout", "tinker")
    options.setdefault("resume", True)
    if wandb_project or wandb_name:
        options["report_to"] = _with_wandb_names(options.get("report_to"), wandb_project, wandb_name)
    return RllogMlLogger(RunLogger(log_dir, config=config, **options))


def _with_wandb_names(report_to: Any, project: str | None, name: str | None) -> Any:
    """``report_to`` as sink objects, its wandb sink given ``project``/``name`` where it has none."""
    import dataclasses
    import warnings

    from rllog.sinks import Wandb, resolve_sinks

    sinks = resolve_sinks(report_to)
    if not any(isinstance(s, Wandb) for s in sinks):
        if project:
            warnings.warn(
                f"setup_logging(wandb_project={project!r}): rllog writes no W&B run unless report_to names "
                "wandb; pass report_to='wandb' (use_rllog(report_to='wandb')) to log this run to that project",
                UserWarning,
                stacklevel=3,
            )
        return report_to
    return [
        dataclasses.replace(s, project=s.project or project, run_name=s.run_name or name)
        if isinstance(s, Wandb)
        else s
        for s in sinks
    ]


@contextlib.contextmanager
def use_rllog(**options: Any) -> Iterator[None]:
    """While the block runs, ``tinker_cookbook.utils.ml_log.setup_logging`` (what
    ``tinker_cookbook.rl.train.main`` calls) returns an :class:`RllogMlLogger` made by
    :func:`setup_logging` with ``options``; the original is put back at the end.

    Raises:
        ImportError: tinker-cookbook is not installed.
    """
    from tinker_cookbook.utils import ml_log  # layer 5: an optional dependency, imported on use

    def _setup(
        log_dir: str,
        wandb_project: str | None = None,
        wandb_name: str | None = None,
        config: Any | None = None,
        do_configure_logging_module: bool = True,
    ) -> RllogMlLogger:
        return setup_logging(
            log_dir, wandb_project, wandb_name, config, do_configure_logging_module, **options
        )

    original = ml_log.setup_logging
    ml_log.setup_logging = _setup  # type: ignore[assignment]  # duck-typed: RllogMlLogger has Logger's methods, not its base
    try:
        yield
    finally:
        ml_log.setup_logging = original


class RllogRunStore:
    """The write side of tinker-cookbook's ``TrainingRunStore`` (0.6.1,
    ``tinker_cookbook/stores/training_store.py``) that its RL loop calls, writing into
    ``run_logger``'s run (see the module docstring for what each becomes). Reads are not
    provided: read the run with :func:`rllog.read_run`, or with tinker-cookbook's own
    ``TrainingRunStore`` on a ``layout="tinker"`` run.

    Nothing here raises into the training loop for a backend failure (RunLogger warns
    once and says what was not written); a malformed record raises as RunLogger does.
    """

    _WRITES = (
        "write_logtree",
        "write_rollouts",
        "write_checkpoint",
        "write_timing_spans",
        "truncate_metrics",
    )

    def __init__(self, run_logger: RunLogger) -> None:
        self.run_logger = run_logger

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(
            f"rllog's store for tinker-cookbook has no {name!r}: it provides the writes tinker-cookbook's "
            f"RL loop makes ({', '.join(self._WRITES)}); read the run with rllog.read_run"
        )

    def url(self, path: str = "") -> str:
        """The run's URL, or ``path``'s inside it."""
        return f"{self.run_logger.log_path}/{path}" if path else self.run_logger.log_path

    def write_logtree(self, iteration: int, data: Mapping[str, Any], base_name: str = "train") -> None:
        """Write tinker-cookbook's logtree trace ``data`` (``Trace.to_dict()``: ``{title,
        started_at, path, root}``) as rllog's report of ``iteration``.

        Raises:
            ValueError: ``base_name`` is neither ``"train"`` nor ``"eval_<label>"``.
        """
        eval_name = _eval_name(base_name)
        title = str(data.get("title") or "")
        logger = self.run_logger
        block = (
            logger.iteration(iteration, title=title or None)
            if eval_name is None
            else logger.evaluation(eval_name, iteration, title=title or None)
        )
        with block as trace:
            if trace is not None:  # None on a rank that does not write
                _replay(trace, (data.get("root") or {}).get("children") or [])

    def write_rollouts(
        self, iteration: int, records: Sequence[Mapping[str, Any]], base_name: str = "train"
    ) -> None:
        """Write tinker-cookbook's rollout summary records (``rl/rollout_logging.py``
        ``serialize_rollout_summaries_from_groups``) as rllog's of ``iteration``.

        Raises:
            ValueError: ``base_name`` is neither ``"train"`` nor ``"eval_<label>"``; TypeError,
                ValueError: a malformed record (as :meth:`rllog.RunLogger.log_rollouts`).
        """
        self.run_logger.log_rollouts(iteration, list(records), eval_name=_eval_name(base_name))

    def write_checkpoint(self, record: Mapping[str, Any]) -> None:
        """:meth:`rllog.RunLogger.log_checkpoint` from tinker-cookbook's
        ``CheckpointRecord.to_dict()``.

        Raises:
            TypeError: the record has no str ``name`` (or a value RunLogger refuses).
        """
        rest = dict(record)
        name = rest.pop("name", None)
        if not isinstance(name, str):
            raise TypeError(f"a tinker-cookbook checkpoint record needs a str 'name', got {record!r:.200}")
        known = {
            k: rest.pop(k) for k in ("batch", "epoch", "state_path", "sampler_path", "final") if k in rest
        }
        self.run_logger.log_checkpoint(name, **known, **rest)

    def write_timing_spans(self, step: int, spans: Sequence[Mapping[str, Any]]) -> None:
        """Append tinker-cookbook's timing spans (``name``, ``wall_start``, ``wall_end``,
        seconds since the epoch) to ``timing_spans.jsonl`` as ``{name, start, end, step}``."""
        storage = self.run_logger.storage
        if storage is None or not spans:
            return
        data = b"".join(
            encode_json(
                {"name": s.get("name"), "start": s.get("wall_start"), "end": s.get("wall_end"), "step": step}
            )
            + b"\n"
            for s in spans
        )
        try:
            storage.append(TIMING_SPANS_FILE, data)
        except OSError as exc:
            self.run_logger._notes.warn_once(
                "spans", f"could not append to {self.run_logger.log_path}/{TIMING_SPANS_FILE}: {exc}"
            )

    def truncate_metrics(self, from_step: int) -> int:
        """tinker-cookbook's resume drops rows at or past ``from_step`` (``epoch *
        n_batches + batch`` in its supervised loop); rllog moved them to
        metrics.superseded.jsonl when the logger opened (``resume=True``). Returns 0; warns
        when the logger moved rows from another step (or did not resume), since rows past
        ``from_step`` are then still in metrics.jsonl."""
        logger = self.run_logger
        state = getattr(logger, "resume_state", None)
        point = getattr(logger, "_resume_point", None)  # the step rllog moved rows aside from
        if logger.is_writer and (state is None or point != from_step):
            if state is None:
                why = "did not resume; open it with resume=True (setup_logging's default)"
            elif point is None:
                why = (
                    f"could not tell where checkpoint {state.name!r} stands among the rows (see its warning)"
                )
            else:
                why = f"moved the rows from step {point} on aside"
            logger._notes.warn_once(
                "tinker_resume",
                f"tinker-cookbook resumes at step {from_step}, but this logger {why}: rows logged past "
                f"step {from_step} before the resume may stand beside the re-run ones",
            )
        return 0


def _eval_name(base_name: str) -> str | None:
    if base_name == "train":
        return None
    if base_name.startswith("eval_") and len(base_name) > len("eval_"):
        return base_name[len("eval_") :]
    raise ValueError(f"tinker-cookbook base_name must be 'train' or 'eval_<label>', got {base_name!r}")


def _text_of(node: Any) -> str:
    """The plain text of a tinker-cookbook logtree node (its strings are HTML-escaped)."""
    if isinstance(node, str):
        return html.unescape(node)
    return "".join(_text_of(c) for c in node.get("children") or [])


def _replay(section: Any, children: Sequence[Any]) -> None:
    """Replay tinker-cookbook logtree nodes (``utils/logtree.py``: ``scope_header`` ->
    ``section`` with ``h2..h6`` + ``lt-section-body``; ``scope_details``/``details`` ->
    ``details`` + ``summary``; ``log_text`` -> ``p``; tables; formatters with ``data``)
    into an rllog logtree section."""
    for node in children:
        if isinstance(node, str):
            text = html.unescape(node).strip()
            if text:
                section.text(text)
            continue
        if not isinstance(node, Mapping):
            section.text(repr(node))
            continue
        data = node.get("data")
        tag = node.get("tag", "")
        cls = (node.get("attrs") or {}).get("class", "")
        kids = node.get("children") or []
        if isinstance(data, Mapping):
            if data.get("type") == "conversation":
                section.conversation(data.get("messages") or [])
            else:
                section.table(dict(data))
        elif cls in ("lt-title", "lt-subtitle"):
            continue  # rllog's page has its own title and time
        elif tag == "section" and kids and isinstance(kids[0], Mapping):
            with section.scope(_text_of(kids[0])) as sub:
                _replay(sub, kids[1:])
        elif tag == "details" and kids and isinstance(kids[0], Mapping) and kids[0].get("tag") == "summary":
            with section.details(_text_of(kids[0]), open="open" in (node.get("attrs") or {})) as sub:
                _replay(sub, kids[1:])
        elif tag == "table":
            _replay_table(section, node)
        elif tag in ("p", "pre", "h1", "h2", "h3", "h4", "h5", "h6") or all(isinstance(c, str) for c in kids):
            text = _text_of(node)
            if text.strip():
                section.text(text, code=tag == "pre")
        else:
            _replay(section, kids)


def _replay_table(section: Any, node: Mapping[str, Any]) -> None:
    columns: list[str] = []
    rows: list[list[str]] = []
    for part in node.get("children") or []:
        if not isinstance(part, Mapping):
            continue
        for tr in part.get("children") or []:
            if not isinstance(tr, Mapping):
                continue
            cells = [_text_of(c) for c in tr.get("children") or []]
            if part.get("tag") == "thead":
                columns = cells
            else:
                rows.append(cells)
    width = max([len(columns), *(len(r) for r in rows)], default=0)
    columns = columns or [str(i) for i in range(width)]
    section.table(rows, columns=columns)
