"""The trackio sink: rows, config and doctor findings into trackio's local store, never the network.

trackio (https://github.com/gradio-app/trackio) keeps every project in a SQLite file
under ``$TRACKIO_DIR`` (default ``$HF_HOME/trackio``, read once when trackio is
imported); ``trackio show`` serves the dashboard from it. This sink writes there with
trackio's own writer, ``trackio.sqlite_storage.SQLiteStorage.bulk_log``/``bulk_alert``
(what ``trackio.init``'s local mode runs on its sender thread), and not through
``trackio.init``/``trackio.Run``, because those reach the network in ways no argument
turns off (trackio 0.43, ``trackio/run.py`` and ``trackio/__init__.py``):

- ``Run.__init__`` calls ``huggingface_hub.whoami`` (a request to huggingface.co)
  whenever a Hugging Face token is set (``HF_TOKEN`` or ``hf auth login``), to put the
  user name in the run's config;
- ``TRACKIO_SPACE_ID``/``TRACKIO_SERVER_URL`` (or ``TRACKIO_BUCKET_ID``/``TRACKIO_DATASET_ID``)
  in the environment send the rows to a Space, a server or a bucket even when no
  ``space_id`` is passed;
- ``TRACKIO_WEBHOOK_URL`` posts every alert to a webhook.

The writer used here makes no request at all; the sink still refuses to start when one
of those variables is set (the user expects syncing that it would not do), with the
``trackio.sync`` line to sync the local project afterwards.

Steps and resumes: a row goes in at its training step; the trackio run id is kept in the
run's ``trackers.json``, so a resume continues the same trackio run, and every row after
the resume holds ``rllog/segment`` (1, 2, ...): a re-run step stands as a second,
labelled point (as in the wandb sink). Each row has a ``log_id``
(``<run id>-<segment>-<n>``, unique per process even after a kill -9, since the segment
is saved when the sink opens), so a retried write never doubles a row and a resumed
run's rows never collide with the killed process's. Findings are trackio alerts.

Besides metric rows, at their own rows in the same run (step = the iteration or the
checkpoint's batch): each iteration report as ``reports/<split>``, a ``trackio.Html``
whose file (the report as written) is saved under trackio's media folder; the
trajectories as ``rollouts/<split>``, a ``trackio.Table`` of :data:`ROLLOUT_COLUMNS`;
each checkpoint record as ``checkpoint``, a ``trackio.Markdown`` of its JSON. trackio
has no run summary and no artifact of a run folder, so nothing else of the run goes there.
"""

from __future__ import annotations

import io
import os
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rllog._format.codec import encode_json
from rllog.sinks._common import ROLLOUT_COLUMNS, require, rollout_rows

__all__ = ["Trackio"]

#: environment variables that make trackio send data off the machine (see the module docstring)
NETWORK_ENV = (
    "TRACKIO_SPACE_ID",
    "TRACKIO_SERVER_URL",
    "TRACKIO_BUCKET_ID",
    "TRACKIO_DATASET_ID",
    "TRACKIO_WEBHOOK_URL",
)


@dataclass
class Trackio:
    """Options of the trackio run.

    Args:
        project: the trackio project (default ``"rllog"``).
        run_name: the run's name in trackio (default: the run folder's name).
        group: trackio's run group (the dashboard can show a group at once).
        flush_every: rows buffered before one write to trackio's SQLite file (the
            buffer is also written when the sinks' queue is idle, at checkpoints and at close).

    Raises (at ``RunLogger`` construction):
        ImportError: trackio is not installed (the message gives the pip line).
        ValueError: a variable of :data:`NETWORK_ENV` is set: this sink writes trackio's
            local store only.
    """

    project: str = "rllog"
    run_name: str | None = None
    group: str | None = None
    flush_every: int = 50
    name: str = field(default="trackio", init=False, repr=False)
    #: trackio's reader puts its own timestamp under this key; a row's own are sent as ``rllog/<key>``
    reserved_keys: tuple[str, ...] = field(default=("timestamp",), init=False, repr=False)
    _storage: Any = field(default=None, init=False, repr=False)
    _run: str = field(default="", init=False, repr=False)
    _id: str = field(default="", init=False, repr=False)
    _segment: int = field(default=0, init=False, repr=False)
    _seq: int = field(default=0, init=False, repr=False)  # rows this process wrote (the next log_id)
    _config: dict[str, Any] | None = field(default=None, init=False, repr=False)  # sent with the next rows
    _rows: list[tuple[int, dict[str, Any]]] = field(default_factory=list, init=False, repr=False)

    def check_installed(self) -> None:
        require("trackio", "trackio")
        remote = [k for k in NETWORK_ENV if os.environ.get(k)]
        if remote or os.environ.get("SYSTEM") == "spaces":
            raise ValueError(
                f"report_to='trackio' writes trackio's local store only (no network), but {remote or ['SYSTEM=spaces']} "
                f"is set, which asks trackio to send data to a Space, server, bucket or webhook. Unset it, "
                f"and sync the project afterwards with trackio.sync(project={self.project!r}, space_id=...)"
            )

    def open(self, run: Any) -> dict[str, Any]:
        from trackio.sqlite_storage import SQLiteStorage

        self._storage = SQLiteStorage
        state = run.state
        resumed = bool(run.resume and state.get("id"))
        self._id = state["id"] if resumed else uuid.uuid4().hex
        self._run = state.get("run") if resumed else (self.run_name or run.name)
        self._segment = int(state.get("segments", 0)) + 1 if resumed else 0
        self._config = None  # a resume without a config keeps the stored one
        if run.config:
            self.log_config(run.config)
        return self.state()

    def state(self) -> dict[str, Any]:
        """What ``trackers.json`` keeps for a resume: the run id and name, the resumes so far."""
        return {
            "id": self._id,
            "run": self._run,
            "project": self.project,
            "segments": self._segment,
        }

    def _write(self) -> None:
        if not self._rows:
            return
        first = self._seq
        self._storage.bulk_log(
            project=self.project,
            run=self._run,
            run_id=self._id,
            metrics_list=[row for _, row in self._rows],
            steps=[step for step, _ in self._rows],
            config=self._config,
            log_ids=[f"{self._id}-{self._segment}-{first + i}" for i in range(len(self._rows))],
        )
        self._seq += len(self._rows)
        self._rows = []
        self._config = None

    # Each method writes what earlier calls buffered before adding its own item, so a call
    # the dispatcher retries after a failed write adds its item once.

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        if len(self._rows) >= self.flush_every:
            self._write()
        data = dict(row)
        if self._segment:
            data["rllog/segment"] = self._segment
        self._rows.append((step, data))

    def log_config(self, config: dict[str, Any]) -> None:
        self._write()
        base = self._config or {"_Created": datetime.now(timezone.utc).isoformat(), "_Group": self.group}
        self._config = {**base, **config}

    def log_checkpoint(self, record: dict[str, Any]) -> None:
        from trackio import Markdown

        self._write()
        text = f"```json\n{encode_json(record, indent=2).decode()}\n```"
        self._rows.append((int(record.get("batch") or 0), {"checkpoint": Markdown(text)._to_dict()}))

    def log_report(self, report: dict[str, Any]) -> None:
        from trackio import Html

        self._write()
        if not report["content"]:
            return  # not readable (the dispatcher warned)
        step = int(report["iteration"])
        html = Html(
            io.StringIO(report["content"]), inject=False, caption=report["html"]
        )  # never read as a path
        html._save(self.project, self._run, step)  # trackio's media folder, as trackio.log does
        self._rows.append((step, {f"reports/{report['split']}": html._to_dict()}))

    def log_rollouts(self, rollouts: dict[str, Any]) -> None:
        from trackio import Table

        self._write()
        step = int(rollouts["iteration"])
        table = Table(columns=list(ROLLOUT_COLUMNS), data=rollout_rows(rollouts["records"]))
        self._rows.append(
            (step, {f"rollouts/{rollouts['split']}": table._to_dict(self.project, self._run, step)})
        )

    def log_finding(self, finding: dict[str, Any]) -> None:
        self._write()
        self._storage.bulk_alert(
            project=self.project,
            run=self._run,
            run_id=self._id,
            titles=[f"rllog doctor: {finding['check']} on {finding['metric']}"],
            texts=[f"{finding['message']}. {finding['advice']}"],
            levels=[{"error": "error", "warning": "warn"}.get(finding["severity"], "info")],
            steps=[int(finding["fired_at"])],
            alert_ids=[
                f"{self._id}-{self._segment}-{finding['check']}-{finding['metric']}-{finding['fired_at']}"
            ],
        )

    def idle(self) -> None:
        """The queue is empty: write what is buffered."""
        self._write()

    def close(self) -> None:
        self._write()
