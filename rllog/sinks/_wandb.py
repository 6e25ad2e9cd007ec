"""The wandb sink: history rows, config, checkpoints, reports, rollouts and findings.

Steps and resumes: wandb's own ``_step`` is rllog's count of what it logged to the wandb
run and only grows, across resumes too, so wandb never drops a row (it ignores a
``step=`` below its last one). A resume continues from the largest of the run's
``starting_step`` (online) and ``next_step`` in ``trackers.json``, which always lies past
every ``_step`` this process used: the sink reserves ``_step`` values in blocks of
:data:`STEP_BLOCK` and writes the end of the block to ``trackers.json`` before using it
(one small write per block), and the exact count at a clean close. After a kill -9 the
resumed run starts past the killed one's last ``_step`` (a gap of at most one block,
harmless to wandb), never on it. The training step is the row's ``step`` key, declared
with ``define_metric("*", step_metric="step")`` so charts use it as their x axis. On a
resume the same wandb run continues (its id is kept in the run's ``trackers.json``), and
every row after the resume also holds ``rllog/segment`` (1 for the first resume, 2 for
the next...), so a step that was re-run after a resume stands as a second, labelled
point, never as a silent duplicate; ``summary["rllog/resumed_at"]`` lists the resume steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rllog.sinks._common import ROLLOUT_COLUMNS, require, rollout_rows

__all__ = ["Wandb"]

#: ``_step`` values reserved per write of trackers.json (see the module docstring)
STEP_BLOCK = 1000

#: seconds between wandb's writes of the run's ``.wandb`` file (wandb's
#: ``x_transaction_log_flush_interval``; its default, 15 s in wandb 0.31, is what a kill -9
#: loses from an offline run's file: wandb-core dies with buffered records unwritten)
FLUSH_INTERVAL = 1.0


@dataclass
class Wandb:
    """Options of the wandb run (see ``wandb.init``).

    Args:
        project, entity, group, tags, notes: as ``wandb.init`` takes them.
        run_name: ``wandb.init``'s ``name`` (default: the run folder's name).
        mode: ``"online"``, ``"offline"`` or ``"disabled"`` (default: wandb's, i.e.
            ``$WANDB_MODE`` or online).
        dir: where wandb keeps its files (default: wandb's).
        id: the wandb run id for a new run (default: generated; on a resume the stored id).
        settings: extra ``wandb.Settings`` fields. rllog sets ``console="off"`` (wandb does
            not wrap the process's stdout/stderr from the sink thread) unless given here.
        init_kwargs: any other ``wandb.init`` arguments.
    """

    project: str | None = None
    entity: str | None = None
    run_name: str | None = None
    group: str | None = None
    tags: list[str] | None = None
    notes: str | None = None
    mode: str | None = None
    dir: str | None = None
    id: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    init_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = field(default="wandb", init=False, repr=False)
    #: wandb writes its own values under these keys; a row's own are sent as ``rllog/<key>``
    reserved_keys: tuple[str, ...] = field(
        default=("_step", "_runtime", "_timestamp", "_wandb"), init=False, repr=False
    )
    run: Any = field(default=None, init=False, repr=False)
    _segment: int = field(default=0, init=False, repr=False)
    _step: int = field(default=0, init=False, repr=False)
    _reserved: int = field(
        default=0, init=False, repr=False
    )  # trackers.json's next_step: no _step reaches it
    _save: Any = field(default=None, init=False, repr=False)
    _wandb: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in (None, "online", "offline", "disabled"):
            raise ValueError(
                f"Wandb(mode=...): expected 'online', 'offline' or 'disabled', got {self.mode!r}"
            )

    def check_installed(self) -> None:
        require("wandb", "wandb")

    def open(self, run: Any) -> dict[str, Any]:
        import wandb

        self._wandb = wandb
        state = run.state
        run_id = state.get("id") if run.resume and state.get("id") else self.id
        self._segment = int(state.get("segments", 0)) + 1 if run.resume and state.get("id") else 0
        defaults: dict[str, Any] = {"console": "off"}
        if "x_transaction_log_flush_interval" in getattr(wandb.Settings, "model_fields", {}):
            defaults["x_transaction_log_flush_interval"] = FLUSH_INTERVAL
        settings = wandb.Settings(**{**defaults, **self.settings})
        self.run = wandb.init(
            project=self.project or state.get("project"),
            entity=self.entity or state.get("entity"),
            name=self.run_name or run.name,
            group=self.group,
            tags=self.tags,
            notes=self.notes,
            mode=self.mode,  # type: ignore[arg-type]  # checked in __post_init__
            dir=self.dir,
            id=run_id,
            resume="allow",
            config=run.config,
            settings=settings,
            reinit="create_new",
            **self.init_kwargs,
        )
        # wandb's own step: online, wandb says where the resumed run stands; offline it does
        # not know, so trackers.json's next_step (past every _step used) is used
        self._step = (
            max(int(getattr(self.run, "starting_step", 0) or 0), int(state.get("next_step", 0)))
            if self._segment
            else 0
        )
        self._reserved = self._step + STEP_BLOCK  # open's state (saved by the dispatcher) holds it
        self._save = run.save_state
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        if self._segment:
            resumed = list(self.run.summary.get("rllog/resumed_at", None) or [])
            self.run.summary["rllog/resumed_at"] = [*resumed, run.resume_step or 0]
        return self.state()

    def state(self) -> dict[str, Any]:
        """What ``trackers.json`` keeps for a resume: the run id and wandb's next ``_step``."""
        run = self.run
        return {
            "id": run.id,
            "project": run.project,
            "entity": run.entity,
            "segments": self._segment,
            "next_step": self._reserved,
        }

    def _next_step(self) -> int:
        """The next ``_step``; reserves a new block in trackers.json before the last one runs out."""
        step = self._step
        if step >= self._reserved:
            self._reserved = step + STEP_BLOCK
            if self._save is not None:
                self._save(self.name, self.state())
        self._step = step + 1
        return step

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        data = {"step": step, **row}
        if self._segment:
            data["rllog/segment"] = self._segment
        self._log(data)

    def _log(self, data: dict[str, Any]) -> None:
        # commit=True: each call is a whole row; without it wandb holds the last row in this
        # process until a later step arrives, and a kill -9 loses it
        self.run.log(data, step=self._next_step(), commit=True)

    def log_config(self, config: dict[str, Any]) -> None:
        self.run.config.update(config, allow_val_change=True)

    def log_checkpoint(self, record: dict[str, Any]) -> None:
        """A history row ``{"step": batch, "checkpoint": record}`` (every record, in order)
        and the summary's ``rllog/last_checkpoint``."""
        self._log({"step": record.get("batch"), "checkpoint": record})
        self.run.summary["rllog/last_checkpoint"] = record

    def log_report(self, report: dict[str, Any]) -> None:
        """The iteration's HTML report as a ``wandb.Html`` panel (the file as written, no
        stylesheet injected) under ``reports/<split>``, at ``step`` = the iteration."""
        if not report["content"]:
            return  # not readable (the dispatcher warned); an empty panel would hide that
        html = self._wandb.Html(report["content"], inject=False)
        self._log({f"reports/{report['split']}": html, "step": report["iteration"]})

    def log_rollouts(self, rollouts: dict[str, Any]) -> None:
        """A ``wandb.Table`` of the iteration's trajectories (:data:`ROLLOUT_COLUMNS`) under
        ``rollouts/<split>``, at ``step`` = the iteration."""
        table = self._wandb.Table(columns=list(ROLLOUT_COLUMNS), data=rollout_rows(rollouts["records"]))
        self._log({f"rollouts/{rollouts['split']}": table, "step": rollouts["iteration"]})

    def log_finding(self, finding: dict[str, Any]) -> None:
        level = {"error": "ERROR", "warning": "WARN"}.get(finding["severity"], "INFO")
        self.run.alert(
            title=f"rllog doctor: {finding['check']} on {finding['metric']}",
            text=f"{finding['message']}. {finding['advice']}",
            level=getattr(self._wandb.AlertLevel, level),
        )
        value = finding["value"]
        self.run.summary[f"doctor/{finding['check']}/{finding['metric']}"] = (
            value if isinstance(value, float) and math.isfinite(value) else str(value)
        )

    def close(self) -> None:
        if self.run is not None:
            self._reserved = self._step  # a clean close: the next resume continues with no gap
            if self._save is not None:
                self._save(self.name, self.state())
            self.run.finish()
