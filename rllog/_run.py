"""RunLogger: the object a training loop holds to write one run.

Example::

    with RunLogger("runs/exp1", config=cfg, resume=True) as logger:
        start = logger.resume_state.batch if logger.resume_state else 0
        for i in range(start, n_batches):
            ...
            logger.log_metrics(i, {"progress/batch": i, "env/all/reward/total": r})
            if (i + 1) % 10 == 0:
                logger.log_checkpoint(f"{i + 1:06d}", batch=i + 1, state_path=path)

What survives a crash: locally, every row ``log_metrics`` returned from is in the OS
(``os.write`` on an ``O_APPEND`` descriptor) and survives a killed process; checkpoint
records and everything before them are fsynced. On object stores, rows are uploaded by
the storage's flush (see :mod:`rllog.storage`); a checkpoint record is appended only
after everything before it was uploaded.

Failures of the backend (disk full, bucket down) never raise out of ``log_metrics``:
rows are kept in memory and retried on the next call, a warning is given once per kind,
and ``close`` says what could not be written and where it was saved instead. Misuse
(a metric that is not a number or string, a bad step) raises at the call.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, cast

from rllog._format.codec import MetricsEncoder, encode_json
from rllog._format.layout import (
    CHECKPOINTS_FILE,
    CODE_DIFF_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    artifact_name,
    check_layout,
)
from rllog._format.records import METRICS_AT_KEY, ResumeState
from rllog._storage.local import remove_stale_tmp
from rllog._storage.staged import run_at_exit
from rllog._write.checkpoints import CheckpointCommitter, checkpoint_record, read_checkpoints
from rllog._write.metrics import MetricsWriter
from rllog._write.noclobber import NoClobberStorage
from rllog._write.notes import Notes
from rllog._write.rank import RankStorage, process_rank
from rllog._write.resume import lock_run, repair_torn_tail, supersede, timestamped, unlock_run
from rllog._write.rollouts import RolloutFiles, encode_rollouts
from rllog._write.timing import Timings
from rllog.errors import StorageError
from rllog.storage import FsspecStorage, LocalStorage, Storage, open_storage

__all__ = ["RunLogger", "NullRunLogger"]

#: seconds ``close`` waits for uploads when neither it nor the storage says (a local run never waits)
_DEFAULT_CLOSE_TIMEOUT = 60.0
#: seconds without upload progress after which ``close`` stops waiting (a bucket that is down)
_NO_PROGRESS_TIMEOUT = 5.0
#: bytes of metrics.jsonl up to which ``close`` writes index.html itself (~0.1 s); past
#: it a detached process writes the page, so close costs the same for any run length
INLINE_INDEX_BYTES = 2 << 20


class RunLogger:
    """Writes one run's files into ``log_path`` (a folder or a URL: ``gs://``, ``s3://``, ``memory://``).

    Args:
        log_path: where the run lives; or a :class:`rllog.Storage`.
        config: a config to write to config.json at start (see :meth:`log_config`).
        resume: continue a run: find the last checkpoint record with ``resume_key``,
            expose it as :attr:`resume_state`, and move metric rows at or past
            ``resume_state.batch`` (all rows when there is no checkpoint) to
            ``metrics.superseded.jsonl`` so re-run steps do not stand twice. A row's
            position is its ``progress/batch`` when it logs one (so a ``step`` that
            counts samples or tokens works), else its ``step``.
        resume_key: the checkpoint key that holds the next batch (default ``"batch"``);
            metric steps are compared with it.
        resume_require: the key a record must have to be resumed from (default
            ``"state_path"``, tinker-cookbook's ``get_last_checkpoint`` rule: sampler-only
            records are skipped); None takes the last record with ``resume_key``. For
            records with an ``epoch`` see :mod:`rllog._write.resume_point` (the point is
            the last step logged before the checkpoint, or tinker's
            ``epoch * batches_per_epoch + batch``; when it cannot be told nothing moves
            and a warning says so). On resume, the iteration reports and rollout
            summaries at or past the point are moved to ``superseded/``.
        strict_json: write NaN/±Infinity as ``null`` (strict JSON) instead of the
            ``NaN``/``Infinity`` tokens.
        code_diff: write code.diff (commit, ``git diff HEAD``, untracked files) at start.
        rank: this process's rank; default from torch.distributed when initialised, else
            the first of ``$RANK``, ``$SLURM_PROCID``, ``$OMPI_COMM_WORLD_RANK``,
            ``$PMI_RANK``, ``$LOCAL_RANK``, else 0. Only rank 0 writes unless ``all_ranks=True``; on other
            ranks ``RunLogger(...)`` returns a :class:`NullRunLogger`, whose every method
            is a cheap no-op (:attr:`is_writer` is False).
        all_ranks: write from every rank into the same run: rank ``r > 0`` writes its own
            rank-tagged run files (``metrics.rank<r>.jsonl``, ``checkpoints.rank<r>.jsonl``,
            ``config.rank<r>.json``, ``run_status.rank<r>.json``; docs/FORMATS.md), read
            back with ``read_run(path, rank=r)``; its reports and rollout summaries go
            into the run's iterations like a worker's. No code.diff or index.html.
        console: also print a one-line summary of each metrics row to stderr.
        index: write ``index.html`` (charts of the main metrics, the stability doctor's
            findings, links to every report; see ``rllog index``) at close, and set
            :attr:`index_url`. Up to :data:`INLINE_INDEX_BYTES` of metrics (2 MiB) the
            page is written inside ``close``; for a longer run a detached low-priority
            process writes it (close stays ~ms whatever the run's length; the page
            appears when that process finishes). ``memory://`` runs are indexed inside
            ``close`` (another process cannot see them).
        index_every: also rewrite ``index.html`` every this many seconds while the run
            goes on (a background thread; a killed run keeps its last page). None
            (default): only at close. Needs ``index=True``.
        shared: join a run that another process is writing (e.g. a separate evaluation
            process adding its reports): no lock, no start-up repair or resume; rows
            are appended to the same files. Without it, opening a local run that
            another live RunLogger holds raises RuntimeError.
        report_to: trackers that also get every row, the config, checkpoint records,
            reports and findings: ``"wandb"``, ``"tensorboard"``, ``"console"``, ``"all"``
            (every installed tracker), sink objects (``rllog.sinks.Wandb(project=...)``,
            ``rllog.sinks.TensorBoard(logging_dir=...)``, a ``rllog.sinks.BaseSink``
            subclass) or a list of these; see :mod:`rllog.sinks`. They run on one
            background thread; ``log_metrics`` only queues the encoded row (~0.2 us).
        doctor: run the stability doctor's rules live on each row (on the sinks'
            thread): ``True`` (default thresholds), a :class:`rllog.doctor.Thresholds`, a
            JSON or TOML file of thresholds (a path, as ``rllog doctor --config`` reads) or
            a mapping of threshold names to values. Each new finding is
            warned about once, appended to ``doctor.jsonl`` (one JSON object per finding,
            as :meth:`rllog.doctor.Finding.to_dict` plus ``fired_at``), sent to the sinks
            and to ``on_finding``. At close doctor.jsonl is rewritten with every finding's
            full step ranges: what ``rllog doctor --json`` prints for the run.
        on_finding: ``on_finding(finding_dict)``, called on the background thread for each
            new finding (e.g. set a flag the loop reads to stop or lower its learning rate).
            Needs ``doctor``.
        sink_timeout: seconds ``close`` waits for the sinks before saying what each did
            not receive (at most its own ``timeout``).
        sink_queue_size: items the sinks' queue holds; past it rows are dropped from the
            sinks (counted and reported; metrics.jsonl keeps them).
        timing_spans: also write each :meth:`timer` span to ``timing_spans.jsonl``.
        layout: how per-iteration files are named: ``"flat"`` (default,
            ``train_iteration_NNNNNN.html``...) or ``"tinker"`` (tinker-cookbook 0.6's
            ``iteration_NNNNNN/train.html``, ``iteration_NNNNNN/train_rollout_summaries.jsonl``,
            ``iteration_NNNNNN/eval_<name>_logtree.json``...), so tinker-cookbook's
            ``TrainingRunStore`` and dashboard read the run. ValueError for any other value.
        storage_options: passed to fsspec for URLs (``token=``, ``endpoint_url=``...).

    Raises:
        TypeError, ValueError: on a bad ``log_path`` or argument; TypeError for an
            unknown keyword argument with a local path (the valid ones are listed).
            ValueError also for bad doctor thresholds or ``on_finding`` without ``doctor``.
        OSError: the ``doctor`` thresholds file cannot be read.
        RuntimeError: another live process writes this (local) run and ``shared`` is not set.
        StorageError: ``resume=True`` and the run's files cannot be read (a bucket that
            does not answer); StoragePermanentError: the bucket is missing or access is
            denied (found at open).
        ImportError: when the URL's fsspec backend is missing (names the package), or a
            tracker in ``report_to`` is not installed (gives the ``pip install
            'rllog[wandb]'`` line).
    """

    def __new__(
        cls, *args: Any, rank: int | None = None, all_ranks: bool = False, **kwargs: Any
    ) -> RunLogger:
        if cls is RunLogger and not all_ranks and (process_rank() if rank is None else int(rank)) != 0:
            return object.__new__(NullRunLogger)
        return object.__new__(cls)

    def __init__(
        self,
        log_path: str | os.PathLike[str] | Storage,
        *,
        config: Any = None,
        resume: bool = False,
        resume_key: str = "batch",
        resume_require: str | None = "state_path",
        strict_json: bool = False,
        code_diff: bool = True,
        rank: int | None = None,
        all_ranks: bool = False,
        console: bool = False,
        shared: bool = False,
        index: bool = True,
        index_every: float | None = None,
        report_to: Any = None,
        doctor: bool | Any = False,
        on_finding: Any = None,
        sink_timeout: float = 30.0,
        sink_queue_size: int = 10_000,
        timing_spans: bool = False,
        layout: str = "flat",
        _worker: bool = False,
        **storage_options: Any,
    ) -> None:
        if shared and resume:
            raise ValueError(
                "RunLogger(shared=True, resume=True): a shared logger joins a run another process "
                "writes, and that process owns its resume; pass one of them"
            )
        _check_index_every(index_every, index)
        _reject_local_options(log_path, storage_options)
        self.layout = check_layout(layout)
        sinks = _resolve_sinks(report_to)  # misuse and missing trackers fail before anything is opened
        thresholds = _doctor_thresholds(doctor, on_finding)
        self.rank = process_rank() if rank is None else int(rank)
        self.is_writer = True
        self.strict_json = strict_json
        self.resume_key = resume_key
        self.resume_require = resume_require
        # the highest row position logged (epoch checkpoint records keep it)
        self.resume_state: ResumeState | None = None
        self._resume_point: int | None = None  # the step rows were moved aside from on resume
        self._notes = Notes()
        self.warnings = self._notes.messages
        self._storage_options = storage_options
        self._owns_storage = isinstance(log_path, (str, os.PathLike))
        self._closed = False
        self._written: set[tuple[str, Any, str | None]] = set()  # iteration artifacts written by this logger
        self._diff_thread: threading.Thread | None = None
        self.storage: Storage = open_storage(log_path, **storage_options)
        self._all_ranks = all_ranks and self.rank != 0
        if self._all_ranks:  # rank r > 0 writes its own rank-tagged files of the same run
            self.storage = self._rank_view(self.storage)
            code_diff = index = False  # the code and the run's index page are rank 0's
        self.log_path = self.storage.url
        self._run_lock: int | None = None
        self._resumed = resume and not (_worker or shared)
        self._worker = _worker or shared
        self._index = index
        self.index_url: str | None = None
        if not self._worker:
            self._run_lock, holder = lock_run(self.storage)
            if holder is not None:
                self._abandon_open()
                raise RuntimeError(
                    f"{self.log_path} is being written by process {holder} (it holds .rllog.lock): "
                    f"{'a resume' if resume else 'a second run'} there would mix both processes' rows. Stop "
                    "that process first (a requeued job whose old copy still runs), log to another path, or "
                    "pass shared=True to add this process's rows and reports to the same run on purpose"
                )
            try:
                self._start(resume)
            except BaseException:
                self._abandon_open()
                raise
            self._status_started()
        warn = self._notes.warn_once
        self._metrics = MetricsWriter(
            self.storage, strict_json=strict_json, console=console, warn=warn, size=self._metrics_size()
        )
        self._timings = Timings(timing_spans)
        self._sink_timeout = sink_timeout
        self._sinks: Any = None
        if sinks or thresholds is not None:
            self._sinks = self._start_sinks(sinks, thresholds, on_finding, sink_queue_size)
        # iteration artifacts: a worker logger keeps another writer's file (see _write.noclobber)
        self._artifacts: Storage = (
            cast(Storage, NoClobberStorage(self.storage, warn)) if self._worker else self.storage
        )
        self._rollouts = RolloutFiles(self._artifacts, warn)
        self._checkpoints = CheckpointCommitter(
            self.storage,
            self._metrics,
            self._rollouts,
            strict_json=strict_json,
            background=not isinstance(self.storage, LocalStorage),
            warn=warn,
        )
        self._close_at_exit()
        if config is not None:
            self.log_config(config)
        if code_diff and not self._worker:
            self._diff_thread = threading.Thread(
                target=self._write_code_diff, name="rllog-code-diff", daemon=True
            )
            self._diff_thread.start()
        self._start_index_thread(index_every)

    @property
    def console(self) -> bool:
        """Print a one-line summary of each metrics row to stderr."""
        return self._metrics.console

    @console.setter
    def console(self, value: bool) -> None:
        self._metrics.console = value

    def _rank_view(self, storage: Storage) -> Storage:
        """The run as this rank (> 0) writes it: ``metrics.rank<r>.jsonl``, ``checkpoints.rank<r>.jsonl``...
        (:class:`rllog._write.rank.RankStorage`)."""
        return cast(Storage, RankStorage(storage, self.rank))

    # -- start of a run -------------------------------------------------------------

    def _abandon_open(self) -> None:
        """``__init__`` is raising: release the run lock and close the storage it opened
        without waiting (an open bucket handle would otherwise wait out its close timeout
        at exit; bytes it adopted stay in their spill journal)."""
        if self._run_lock is not None:
            unlock_run(self.storage, self._run_lock)
            self._run_lock = None
        if self._owns_storage:
            try:
                self.storage.close(timeout=0)
            except OSError:
                pass

    def _start(self, resume: bool) -> None:
        storage = self.storage
        outage = getattr(storage, "outage_at_open", None)  # FsspecStorage's probe did not get through
        if outage is not None:  # each start-up read would wait request_timeout x 5 attempts: skip them
            if resume:
                raise StorageError(f"cannot resume {storage.url}: it is unreachable ({outage})")
            self._notes.note(
                f"{storage.url} is unreachable at open ({outage}); skipped the check for torn last lines. "
                "Rows are kept locally and uploaded when it answers."
            )
            return
        try:
            self._start_checks(resume)
        except OSError as exc:
            if isinstance(storage, LocalStorage) and isinstance(exc, StorageError):
                raise  # a planted symlink or a folder that may not be written: nothing can be logged
            if resume:
                raise StorageError(f"cannot resume {storage.url}: its files cannot be read ({exc})") from exc
            self._notes.note(
                f"could not read {storage.url} at start ({exc}); skipped the check for torn last lines. "
                "Rows are kept and uploaded when it answers."
            )

    def _start_checks(self, resume: bool) -> None:
        storage = self.storage
        self._remove_stale_tmp()
        for name in (METRICS_FILE, CHECKPOINTS_FILE):
            repaired = repair_torn_tail(storage, name)
            if repaired:
                self._notes.note(repaired)
        if resume:
            self._resume(storage)
        elif storage.exists(METRICS_FILE) and storage.size(METRICS_FILE) > 0:
            self._notes.note(
                f"{storage.url}/{METRICS_FILE} already has rows; new rows are appended after them. "
                "Pass resume=True to continue from the last checkpoint instead."
            )

    def _metrics_size(self) -> int | None:
        """(storages without a local descriptor) metrics.jsonl's size at open, so checkpoint
        records can say where it stood (``metrics_at``); None when it cannot be read
        (unreachable at open, a worker logger that shares the file with its writer)."""
        if isinstance(self.storage, LocalStorage) or self._worker:
            return None
        if getattr(self.storage, "outage_at_open", None) is not None:
            return None
        try:
            return self.storage.size(METRICS_FILE)
        except FileNotFoundError:
            return 0
        except OSError:
            return None

    def _remove_stale_tmp(self) -> None:
        """Delete temp files that writes of killed processes left in a local run folder."""
        if isinstance(self.storage, LocalStorage) and self.storage.root.is_dir():
            removed = remove_stale_tmp(self.storage.root)
            if removed:
                self._notes.note(
                    f"removed {len(removed)} temp file(s) left by killed writers in {self.log_path}: "
                    f"{removed[:5]}{' ...' if len(removed) > 5 else ''}",
                    problem=False,
                )

    def _resume(self, storage: Storage) -> None:
        """Choose the record and the point (rllog._write.resume_point), then move rows
        (supersede) and the crashed run's reports (move_reports_aside) past it."""
        from rllog._write.resume import damaged_lines
        from rllog._write.resume_point import choose_record, move_reports_aside, resume_point

        damaged = damaged_lines(storage, CHECKPOINTS_FILE)  # metrics.jsonl's: in supersede's one pass
        if damaged:
            more = f"; and {len(damaged) - 3} more" if len(damaged) > 3 else ""
            self._notes.note(
                f"{storage.url}/{CHECKPOINTS_FILE} has {len(damaged)} damaged line(s) that every reader skips "
                f"(the rows on them are lost to readers): {'; '.join(damaged[:3])}{more}"
            )
        records = read_checkpoints(storage, self.warnings)
        rec = choose_record(records, self.resume_key, self.resume_require, self._notes.note)
        if rec is not None:
            self.resume_state = ResumeState.from_record(rec, self.resume_key)
        point = self._resume_point = resume_point(storage, rec, self.resume_key, self._notes.note)
        supersede(storage, point, self._notes.note, rec)  # one pass: damage, the gap check, moving rows
        if point is not None:
            move_reports_aside(storage, point, self._notes.note)

    def _write_code_diff(self) -> None:
        from rllog._write.codediff import code_diff

        try:
            data = code_diff()
            storage = self.storage
            if storage.exists(CODE_DIFF_FILE):
                if storage.read(CODE_DIFF_FILE) == data:
                    return
                name = timestamped("code", ".diff", storage)
            else:
                name = CODE_DIFF_FILE
            storage.write(name, data)
        except Exception as exc:  # telemetry never kills training
            self._notes.warn_once("code.diff", f"could not write code.diff: {exc}")

    # -- the loop's calls -----------------------------------------------------------

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one row ``{"step": step, **metrics}`` to metrics.jsonl.

        Args:
            step: the iteration (batch) index, an int >= 0.
            metrics: str keys to numbers, bools, strings or None; numpy scalars and
                one-element arrays/tensors are converted; NaN and ±Infinity are kept.
                Secrets in string values (and every string under a secret-named key)
                are written as ``<redacted>``, to the file, the console and every sink.

        The row is in the OS (locally) when this returns; on object stores it is
        staged for the next upload. Costs ~10-25 us for 100 floats.

        Raises:
            TypeError: a value or key that cannot be written (the key and step are
                named); nothing is written for that call.
            ValueError: a negative step or a ``"step"`` key in ``metrics``.
            RuntimeError: the logger is closed.
        """
        if self._timings.totals:
            metrics = {**metrics, **self._timings.take()}
            if self._timings.spans:
                self._write_spans(step)
        self._metrics.write(step, metrics)

    def _check_open(self, call: str) -> None:
        """Every writing call after :meth:`close` raises the same error, on every backend."""
        if self._closed:
            raise RuntimeError(f"{call} on a closed RunLogger for {self.log_path}")

    def _check_rewrite(self, what: str, iteration: Any, eval_name: str | None) -> None:
        """Warn (once per kind) when this logger writes an iteration's artifact a second time:
        the new file replaces the old one, which is right after a resume but is usually a
        bug (a wrong iteration number) within one run."""
        key = (what, iteration, eval_name)
        if key in self._written:
            split = "train" if eval_name is None else f"evaluator {eval_name!r}"
            self._notes.warn_once(
                f"rewrite:{what}",
                f"iteration {iteration}'s {what} ({split}) was already written by this logger; the new "
                "file replaces it. Pass each iteration its own number.",
            )
        self._written.add(key)

    def log_config(self, config: Any) -> None:
        """Write config.json (atomically) from a chz object, dataclass, pydantic model,
        argparse namespace or mapping; see :mod:`rllog._write.config` for the conversion and
        redaction rules. When config.json already exists with different content the old
        file is kept as ``config.<UTC time>.json``.

        Raises:
            ConfigError: the config is not an object with fields or a mapping.
        """
        self._check_open("log_config")
        from rllog._write.config import config_to_dict

        plain = config_to_dict(config)
        if self._sinks is not None:
            self._sinks.put("log_config", plain)
        data = encode_json(plain, indent=2, strict_json=self.strict_json) + b"\n"
        storage = self.storage
        try:
            old = storage.read(CONFIG_FILE) if storage.exists(CONFIG_FILE) else None
            if old == data:
                return
            if old is not None:
                storage.write(timestamped("config", ".json", storage), old)
            storage.write(CONFIG_FILE, data)
        except OSError as exc:
            self._notes.warn_once("config", f"could not write {self.log_path}/{CONFIG_FILE}: {exc}")

    def log_checkpoint(
        self,
        name: str,
        *,
        batch: int | None = None,
        epoch: int | None = None,
        state_path: str | None = None,
        sampler_path: str | None = None,
        final: bool | None = None,
        **loop_state: Any,
    ) -> None:
        """Append a checkpoint record to checkpoints.jsonl, after everything logged before
        it is durable (fsync locally; uploaded on object stores).

        Args:
            name: the checkpoint's name, e.g. ``"000010"`` or ``"final"``.
            batch: the next batch to run when resuming from this checkpoint.
            epoch, state_path, sampler_path, final: loop state, left out when None.
            loop_state: any extra JSON-able keys (numpy values converted); they come
                back in :attr:`ResumeState.loop_state`.

        Locally it returns after the fsyncs (~1 ms). On an object store it returns at
        once with the record staged (memory and the spill journal) right after the rows
        logged before it; the storage uploads it only after those, so a slow or
        unreachable bucket never stalls the loop and a record never precedes its rows.

        A backend failure does not raise: when what was logged before cannot be made
        durable, the record is held back (so a resume never points past data that was
        lost), a warning is given once, and it is written at the next checkpoint,
        ``flush`` or ``close`` that succeeds; ``close`` says which records never were.

        Raises:
            TypeError: ``name`` is not a str, ``batch`` not an int, or a loop-state
                value is not JSON-able (the key is named).
            RuntimeError: the logger is closed.
        """
        self._check_open(f"log_checkpoint({name!r})")
        fields = {"epoch": epoch, "final": final, "state_path": state_path, "sampler_path": sampler_path}
        record = checkpoint_record(name, batch, fields, loop_state)
        last_logged = self._metrics.last_position()
        if epoch is not None and last_logged is not None and "last_logged_step" not in record:
            # ``batch`` counts within the epoch: the last position logged says where a resume starts
            record["last_logged_step"] = last_logged
        shown = dict(record)  # what the trackers get: the record without rllog's bookkeeping
        at = self._metrics.file_position()
        if at is not None and METRICS_AT_KEY not in record:
            # rows after this point were logged after the checkpoint: a resume reads only them
            record[METRICS_AT_KEY] = {"bytes": at[0], "last_line_crc32": at[1]}
        self._checkpoints.add(record)
        if self._sinks is not None:
            self._sinks.put("log_checkpoint", shown)

    # -- logtree reports (rllog.logtree) ---------------------------------------------

    def iteration(self, iteration: int, *, num_groups_to_log: int = 4, title: str | None = None) -> Any:
        """Trace training iteration ``iteration`` with :mod:`rllog.logtree`; at the end of
        the block write ``train_iteration_NNNNNN.html`` and ``..._logtree.json``.

        ``with logger.iteration(i) as trace:`` makes a fresh :class:`rllog.logtree.Trace`
        current, so ``logtree.scope/group/text/conversation/...`` calls inside (also from
        asyncio tasks it starts) go into it. Groups with index ``< num_groups_to_log``
        get full content; every group appears in "Trajectory Details". An exception in
        the block is recorded in the report, which is still written, and re-raised. A
        storage failure while writing is warned about once, never raised.

        On ranks that do not write (:class:`NullRunLogger`) it is a cheap no-op
        (``trace`` is None and logtree calls inside are no-ops).
        """
        self._check_open(f"iteration({iteration!r})")
        artifact_name(iteration, "html")  # a bad iteration raises here, at the call
        self._check_rewrite("report", iteration, None)
        from rllog.logtree import iteration_trace

        return self._reported(
            iteration_trace(
                self._rollouts.writer(),  # a refused report is kept and retried like a row
                iteration,
                num_groups_to_log=num_groups_to_log,
                title=title,
                strict_json=self.strict_json,
                warn=self._notes.warn_once,
                layout=self.layout,
            ),
            iteration,
            None,
        )

    def evaluation(
        self, name: str, iteration: int, *, num_groups_to_log: int = 4, title: str | None = None
    ) -> Any:
        """Like :meth:`iteration` for evaluator ``name``: writes
        ``eval_<name>_iteration_NNNNNN.html`` and ``..._logtree.json`` (``<name>`` made
        file-name safe by :func:`rllog._format.layout.safe_eval_name`).

        Raises:
            TypeError: ``name`` is not a str (``None`` included: use :meth:`iteration` for
                training), or ``iteration`` is not an int; raised at the call.
            ValueError: ``iteration`` outside ``0 <= iteration < 2**63``; raised at the call.
        """
        self._check_open(f"evaluation({name!r}, {iteration!r})")
        _check_evaluation(name, iteration)
        self._check_rewrite("report", iteration, name)
        from rllog.logtree import iteration_trace

        return self._reported(
            iteration_trace(
                self._rollouts.writer(),  # a refused report is kept and retried like a row
                iteration,
                eval_name=name,
                num_groups_to_log=num_groups_to_log,
                title=title,
                strict_json=self.strict_json,
                warn=self._notes.warn_once,
                layout=self.layout,
            ),
            iteration,
            name,
        )

    # -- rollout summaries --------------------------------------------

    # -- rollout summaries ------------------------------------------------------------

    def log_rollouts(
        self,
        iteration: int,
        groups: Any,
        *,
        eval_name: str | None = None,
        split: str | None = None,
        tags: Any = None,
        sampling_client_step: Any = None,
    ) -> None:
        """Write ``train_iteration_NNNNNN_rollout_summaries.jsonl`` (or, with
        ``eval_name``, ``eval_<name>_iteration_NNNNNN_rollout_summaries.jsonl``): one
        record per trajectory, written atomically; calling again for the same iteration
        and split (after a resume) replaces the file.

        ``groups`` is a list of trajectory groups (lists of trajectory dicts or
        tinker-cookbook-like ``TrajectoryGroup`` objects) or ready-made records; see
        :func:`rllog.build_rollout_summaries` for the shapes, ``tags`` and
        ``sampling_client_step``. ``split`` defaults to ``"train"``, or
        ``"eval/<eval_name>"``.

        A backend failure does not raise: the file's bytes are kept in memory, a warning
        is given once, and the write is retried on the next ``log_rollouts`` call.

        Raises:
            TypeError, ValueError: a value of the wrong type or shape (the message names
                the group, trajectory, step and key); nothing is written.
        """
        self._check_open(f"log_rollouts({iteration!r}, ...)")
        name, _, data = encode_rollouts(
            iteration,
            groups,
            split=split,
            eval_name=eval_name,
            tags=tags,
            sampling_client_step=sampling_client_step,
            strict_json=self.strict_json,
            layout=self.layout,
        )
        self._check_rewrite(
            "rollout summaries file", iteration, eval_name
        )  # after the checks: nothing written yet
        self._rollouts.add(name, data)  # a newer file for the same name replaces an unwritten one
        if self._sinks is not None:
            split_name = split or ("train" if eval_name is None else f"eval/{eval_name}")
            self._sinks.put(
                "log_rollouts", {"iteration": iteration, "split": split_name, "file": name, "data": data}
            )

    def flush(self, durable: bool = False) -> None:
        """Push everything logged so far to the backend; ``durable=True`` also fsyncs
        local files and waits for object-store uploads. Backend errors are warned about
        once and kept for retry, never raised."""
        self._flush(durable)

    def _flush(self, durable: bool, timeout: float | None = None) -> bool:
        """:meth:`flush`; True when everything (held checkpoint records included) went out.
        ``timeout``: seconds the whole flush may wait (None: the storage's ``flush_timeout``
        on object stores; a local flush never waits)."""
        if self._closed:
            return True
        if timeout is None and isinstance(self.storage, FsspecStorage):
            timeout = self.storage.flush_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        self._metrics.drain()
        self._rollouts.write()  # reports and rollout files a backend refused earlier
        try:
            self.storage.flush(durable=durable, timeout=_left(deadline))
        except OSError as exc:
            self._notes.warn_once(f"flush:{type(exc).__name__}", f"could not flush {self.log_path}: {exc}")
            return False
        return self._checkpoints.commit(_left(deadline)) and not self._metrics.pending

    def close(self, timeout: float | None = None) -> None:
        """Flush durably and close the storage. Idempotent. Rows that still cannot be
        written are saved to a local rescue file, and a warning says where.

        Also called at interpreter exit for a logger that was never closed (a loop that
        ended with an uncaught exception and no ``with``): its rows are uploaded then.

        Args:
            timeout: seconds the whole close may take at most (default: the storage's
                ``close_timeout``, 60 s; a local run does not wait). Close keeps
                flushing while the upload makes progress (a backlog after an outage)
                and stops after 5 s without any (a bucket that is down: the spill
                journal keeps the rows for the next writer), so it never hangs long;
                the warning says what was left where.
        """
        if self._closed:
            return
        if timeout is None:
            timeout = (
                self.storage.close_timeout
                if isinstance(self.storage, FsspecStorage)
                else _DEFAULT_CLOSE_TIMEOUT
            )
        deadline = time.monotonic() + timeout
        if self._diff_thread is not None:
            self._diff_thread.join(timeout=min(30.0, _left(deadline) or 0.0))
        if self._sinks is not None:
            for message in self._sinks.close(min(self._sink_timeout, _left(deadline) or 0.0)):
                self._notes.note(message)
            self._rewrite_findings()
        self._checkpoints.stop(timeout=min(1.0, _left(deadline) or 0.0))
        self._stop_index_thread()
        progressed = self._final_flush(deadline)
        self._status_ended()  # before the last page: it shows the run finished, not running
        if progressed and self._index and not self._worker:
            self._write_index()
        self._closed = self._metrics.closed = True
        _OPEN_LOGGERS.discard(self)
        for message in (
            self._rollouts.save_elsewhere(),
            self._metrics.rescue(),
            self._checkpoints.unwritten_message(),
        ):
            if message is not None:
                self._notes.note(message)
        if self._owns_storage:
            left = _left(deadline) or 0.0
            try:
                self.storage.close(timeout=left if progressed else min(left, _NO_PROGRESS_TIMEOUT))
            except OSError as exc:
                self._notes.note(f"closing {self.log_path} failed: {exc}")
        if self._run_lock is not None:
            unlock_run(self.storage, self._run_lock)  # releases the flock, removes .rllog.lock
            self._run_lock = None

    # -- trackers, live doctor, timers (rllog.sinks) ----------------------------------

    def _start_sinks(self, sinks: list[Any], thresholds: Any, on_finding: Any, queue_size: int) -> Any:
        from rllog._format.layout import DOCTOR_FILE
        from rllog.sinks._dispatch import Dispatcher, SinkRun

        engine = None
        if thresholds is not None:
            from rllog._format.rules import RuleEngine

            engine = RuleEngine(thresholds)
        state = self.resume_state
        run = SinkRun(
            log_path=self.log_path,
            storage=self.storage,
            name=self.log_path.rstrip("/").rsplit("/", 1)[-1],
            resume=state is not None or self._resumed,
            resume_step=state.batch if state is not None else (0 if self._resumed else None),
        )
        dispatcher = Dispatcher(
            sinks,
            run,
            warn=self._notes.warn_once,
            queue_size=queue_size,
            doctor=engine,
            on_finding=on_finding,
            findings_file=DOCTOR_FILE if engine is not None else None,
            replay=(METRICS_FILE, self._replay_size() if self._resumed else 0)
            if engine is not None
            else None,
        )
        self._metrics.tap = dispatcher.put_row
        return dispatcher

    def _replay_size(self) -> int:
        """Bytes of metrics.jsonl before this process logs (what the live doctor replays on a resume)."""
        try:
            return self.storage.size(METRICS_FILE) if self.storage.exists(METRICS_FILE) else 0
        except OSError:
            return 0

    def _rewrite_findings(self) -> None:
        """At close: doctor.jsonl becomes every finding with its full step ranges."""
        from rllog._format.layout import DOCTOR_FILE

        final = self._sinks.final_findings
        if final is None:
            return
        try:
            self.storage.write(DOCTOR_FILE, b"".join(encode_json(f) + b"\n" for f in final))
        except OSError as exc:
            self._notes.warn_once("doctor:file", f"could not write {self.log_path}/{DOCTOR_FILE}: {exc}")

    def _reported(self, trace: Any, iteration: int, eval_name: str | None) -> Any:
        """``trace`` (a context manager); when the sinks are on, they hear of the report after it."""
        if self._sinks is None:
            return trace
        return _Reported(trace, self, iteration, eval_name)

    def timer(self, name: str) -> Any:
        """Time a block: ``with logger.timer("sample"):`` (or ``@logger.timer("sample")`` on
        a function) adds ``time/sample`` (seconds, wall clock) to the next row logged;
        nested timers give ``time/<outer>/<inner>``; repeats before the row add up. With
        ``timing_spans=True`` each also gives a span in ``timing_spans.jsonl``.

        Raises:
            ValueError: an empty name or one starting or ending with ``/``.
        """
        timers = self._timings.timers  # one reusable Timer per name: no allocation after the first call
        return timers[name] if name in timers else self._timings.timer(name)

    def _write_spans(self, step: int) -> None:
        from rllog._format.layout import TIMING_SPANS_FILE

        spans, self._timings.spans = self._timings.spans, []
        data = b"".join(
            encode_json({"name": n, "start": a, "end": b, "step": step}) + b"\n" for n, a, b in spans
        )
        try:
            self.storage.append(TIMING_SPANS_FILE, data)
        except OSError as exc:
            self._notes.warn_once("spans", f"could not append to {self.log_path}/{TIMING_SPANS_FILE}: {exc}")

    def _final_flush(self, deadline: float) -> bool:
        """The durable flush of :meth:`close`; True when everything went out. It keeps
        flushing while the upload makes progress, until ``deadline`` (``time.monotonic``),
        each flush waiting at most 5 s."""
        pending = self.storage.pending
        while True:
            before = sum(pending().values())
            if self._flush(durable=True, timeout=min(_left(deadline) or 0.0, _NO_PROGRESS_TIMEOUT)):
                return True
            if sum(pending().values()) >= before or time.monotonic() >= deadline:
                return False

    def _close_at_exit(self) -> None:
        """Have this logger closed at interpreter exit if the program never closes it
        (only the process that opened it: a forked child's copy is not closed there)."""
        if self._owns_storage:
            self._exit_pid = os.getpid()
            _OPEN_LOGGERS.add(self)
            run_at_exit(_close_open_loggers)

    def _write_index(self, final: bool = True) -> None:
        """Write index.html (charts, doctor findings, report links) for the run as it now is.

        A metrics file up to :data:`INLINE_INDEX_BYTES` is indexed here (bounded cost);
        a larger one by a detached low-priority process (``python -m rllog._indexjob``), so
        close never re-reads a long run inside training. :attr:`index_url` is set either
        way; from the job the page appears when it finishes (seconds to a minute).
        ``final=False`` (the periodic rewrite of ``index_every``) starts no job while the
        previous one still runs."""
        try:
            size = self.storage.size(METRICS_FILE)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._notes.warn_once("index", f"could not write index.html for {self.log_path}: {exc}")
            return
        if size > INLINE_INDEX_BYTES and not self.log_path.startswith("memory://"):
            self._start_index_job(final)
            return
        from rllog.index import write_index

        try:
            self.index_url, _findings = write_index(self.storage)
        except Exception as exc:  # the run's data is safe; the page is a convenience
            self._notes.warn_once(
                "index", f"could not write index.html for {self.log_path}: {type(exc).__name__}: {exc}"
            )

    # -- run status marker and live index page (rllog serve, rllog index) ------------

    def _status_started(self) -> None:
        """Write run_status.json ``running`` (see :mod:`rllog._write.status`)."""
        from rllog._write.status import mark_started

        reachable = getattr(self.storage, "outage_at_open", None) is None  # see _start
        self._status_record = mark_started(self.storage, self._notes.warn_once, read_previous=reachable)

    def _status_ended(self) -> None:
        """Rewrite run_status.json as ``finished`` (``failed`` when the ``with`` block raised)."""
        record = getattr(self, "_status_record", None)
        if record is not None and not self._worker:
            from rllog._write.status import mark_ended

            state = "failed" if getattr(self, "_exit_error", False) else "finished"
            mark_ended(self.storage, record, state, self._notes.warn_once)

    def _start_index_thread(self, every: float | None) -> None:
        """Rewrite index.html every ``every`` seconds in a daemon thread until close."""
        self._index_stop = threading.Event()
        self._index_thread: threading.Thread | None = None
        if every is None or self._worker:
            return

        def loop() -> None:
            while not self._index_stop.wait(every):
                self._write_index(final=False)

        self._index_thread = threading.Thread(target=loop, name="rllog-index", daemon=True)
        self._index_thread.start()

    def _stop_index_thread(self) -> None:
        stop, thread = getattr(self, "_index_stop", None), getattr(self, "_index_thread", None)
        if stop is not None:
            stop.set()
        if thread is not None:
            thread.join(timeout=60)

    def _start_index_job(self, final: bool = True) -> None:
        """Start ``python -m rllog._indexjob`` detached and at low priority: through ``sh``'s
        ``&``, so the job is no child of the training process (nothing to reap, no zombie)
        and outlives it. Its stdout is discarded; its stderr is this process's, for its
        one-line failure message. The run's URL and storage options go in a private temp
        file (mode 0600) that the job deletes on reading, never on a command line. A
        failure to start is warned about.

        At most one job writes at a time: while the previous job (its pid, echoed by
        ``sh``) is alive, a periodic rewrite (``final=False``) starts none, and the final
        one (at close) starts a job that first waits for the previous one to exit."""
        import pickle
        import subprocess
        import sys
        import tempfile

        previous = getattr(self, "_index_job_pid", None)
        if previous is not None and not _pid_alive(previous):
            previous = None
        if previous is not None and not final:
            return

        options = getattr(self.storage, "storage_options", self._storage_options)
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="rllog-index-job-", suffix=".pickle")
            with os.fdopen(fd, "wb") as f:
                pickle.dump({"url": self.log_path, "options": dict(options), "after": previous}, f)
            started = subprocess.run(
                [
                    "sh",
                    "-c",
                    '"$@" >/dev/null </dev/null & echo $!',
                    "sh",
                    sys.executable,
                    "-m",
                    "rllog._indexjob",
                    path,
                ],
                env=env,
                check=True,
                timeout=10,
                capture_output=True,
            )
            self._index_job_pid: int | None = int(started.stdout.split()[-1])
        except (
            OSError, subprocess.SubprocessError, pickle.PicklingError, TypeError, AttributeError, ValueError, IndexError,
        ) as exc:  # fmt: skip
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            self._notes.warn_once(
                "index", f"could not start the index.html job for {self.log_path}: {exc}; run `rllog index`"
            )
            return
        self.index_url = f"{self.log_path.rstrip('/')}/index.html"

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._exit_error = exc_info[0] is not None
        self.close()

    def __repr__(self) -> str:
        return f"RunLogger({self.log_path!r}, {'closed' if self._closed else 'writer'})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as configuration: a worker gets a logger for the same run that writes
        its own artifacts (and can append rows) but does not redo start-of-run work."""
        where = self.log_path if self._owns_storage else self.storage
        rank = self.rank if getattr(self, "_all_ranks", False) else 0
        if isinstance(where, RankStorage):
            where = where.inner  # the run itself; the worker makes its own rank view
        return (
            _worker_logger,
            (where, self.strict_json, self._storage_options, os.getpid(), self.layout, rank),
        )


def _doctor_thresholds(doctor: Any, on_finding: Any) -> Any:
    """The live doctor's :class:`rllog.doctor.Thresholds` for ``RunLogger(doctor=...)``, or None
    when it is off; raises for what ``doctor``/``on_finding`` cannot mean (see RunLogger)."""
    if on_finding is not None and not callable(on_finding):
        raise TypeError(f"on_finding must be callable, got {type(on_finding).__name__}")
    if doctor is None or doctor is False:
        if on_finding is not None:
            raise ValueError("on_finding is called with the live doctor's findings: pass doctor=True too")
        return None
    from rllog._format.rules import Thresholds

    if doctor is True:
        return Thresholds()
    if isinstance(doctor, Thresholds):
        return doctor
    if isinstance(doctor, (str, os.PathLike)):
        from rllog.doctor import thresholds_from_file

        return thresholds_from_file(doctor)
    if isinstance(doctor, Mapping):
        return Thresholds().with_overrides(doctor)
    raise TypeError(
        "doctor= takes True, a rllog.doctor.Thresholds, a JSON/TOML thresholds file or a mapping of "
        f"threshold names to values, got {type(doctor).__name__} {doctor!r:.100}"
    )


def _resolve_sinks(report_to: Any) -> list[Any]:
    if report_to is None:
        return []
    from rllog.sinks import resolve_sinks

    return resolve_sinks(report_to)


class _Reported:
    """An iteration's trace context; on exit the sinks are told its report was written."""

    __slots__ = ("_trace", "_logger", "_iteration", "_eval_name")

    def __init__(self, trace: Any, logger: RunLogger, iteration: int, eval_name: str | None) -> None:
        self._trace, self._logger, self._iteration, self._eval_name = trace, logger, iteration, eval_name

    def __enter__(self) -> Any:
        return self._trace.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        out = self._trace.__exit__(*exc)
        logger = self._logger
        html = artifact_name(self._iteration, "html", self._eval_name, logger.layout)
        logger._sinks.put(
            "log_report",
            {
                "iteration": self._iteration,
                "split": "train" if self._eval_name is None else f"eval/{self._eval_name}",
                "html": html,
                "json": artifact_name(self._iteration, "logtree", self._eval_name, logger.layout),
                "url": f"{logger.log_path}/{html}",
            },
        )
        return out


_OPEN_LOGGERS: weakref.WeakSet[RunLogger] = weakref.WeakSet()


def _close_open_loggers() -> None:
    for logger in list(_OPEN_LOGGERS):
        if getattr(logger, "_exit_pid", None) == os.getpid():
            logger.close()


def _check_evaluation(name: Any, iteration: Any) -> None:
    """Raises at the call what :meth:`RunLogger.evaluation` raises for a bad name or iteration."""
    if not isinstance(name, str):
        raise TypeError(
            f"evaluation(name, iteration): name must be the evaluator's name, a str; got "
            f"{type(name).__name__} {name!r:.40} (use iteration({iteration!r}) for a training iteration)"
        )
    artifact_name(iteration, "html", name)


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (``time.monotonic``), at least 0; None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class NullRunLogger(RunLogger):
    """What ``RunLogger(...)`` returns on a rank that does not write (rank != 0 without
    ``all_ranks``): the same methods, each a cheap no-op, so a loop needs no rank checks.
    Arguments are checked as on the writing rank (a bad step, key, name or iteration
    raises the same error on every rank), and calls after ``close`` raise RuntimeError.

    ``is_writer`` is False, ``resume_state`` None, ``warnings`` empty, ``storage`` None;
    ``iteration``/``evaluation`` give a null context (logtree calls inside are no-ops).
    Nothing is opened, locked or read.
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str] | Storage,
        *,
        rank: int | None = None,
        strict_json: bool = False,
        resume_key: str = "batch",
        console: bool = False,
        layout: str = "flat",
        **_: Any,
    ) -> None:
        if not isinstance(log_path, (str, os.PathLike, Storage)):
            raise TypeError(f"log_path must be a path, a URL or a Storage, got {type(log_path).__name__}")
        self.layout = check_layout(layout)
        self.rank = process_rank() if rank is None else int(rank)
        self.strict_json = strict_json
        self.resume_key = resume_key
        self._console = console
        self.is_writer = False
        self.resume_state = None
        self.warnings = []
        self.index_url = None
        self.storage = None  # type: ignore[assignment]  # a null logger has no storage
        self.log_path = os.fspath(log_path) if isinstance(log_path, (str, os.PathLike)) else log_path.url
        self._closed = False
        self._encoder = MetricsEncoder(strict_json)

    @property
    def console(self) -> bool:
        return self._console

    @console.setter
    def console(self, value: bool) -> None:
        self._console = value

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        self._check_open(f"log_metrics(step={step!r})")
        self._encoder.encode_row(step, metrics)  # the same errors as on the writing rank

    def log_config(self, config: Any) -> None:
        self._check_open("log_config")

    def log_checkpoint(  # type: ignore[override]  # the same keywords, passed through
        self, name: str, *, batch: int | None = None, **fields: Any
    ) -> None:
        self._check_open(f"log_checkpoint({name!r})")
        known = {k: fields.pop(k, None) for k in ("epoch", "final", "state_path", "sampler_path")}
        checkpoint_record(name, batch, known, fields)

    def log_rollouts(self, iteration: int, groups: Any, **kwargs: Any) -> None:  # type: ignore[override]  # accepts all
        self._check_open(f"log_rollouts({iteration!r}, ...)")
        artifact_name(iteration, "rollout_summaries", kwargs.get("eval_name"))

    def iteration(self, iteration: int, **kwargs: Any) -> Any:
        self._check_open(f"iteration({iteration!r})")
        artifact_name(iteration, "html")
        return contextlib.nullcontext()

    def evaluation(self, name: str, iteration: int, **kwargs: Any) -> Any:
        self._check_open(f"evaluation({name!r}, {iteration!r})")
        _check_evaluation(name, iteration)
        return contextlib.nullcontext()

    def flush(self, durable: bool = False) -> None:
        pass

    def timer(self, name: str) -> Any:
        return contextlib.nullcontext()

    def close(self, timeout: float | None = None) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"NullRunLogger({self.log_path!r}, rank {self.rank}, not writing)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NullRunLogger, (self.log_path,), {"rank": self.rank})


def _pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (signal 0 probes without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else (the pid was reused): not our job
        return False
    return True


def _check_index_every(every: Any, index: bool) -> None:
    """Raise ValueError unless ``index_every`` is None or seconds > 0 with ``index=True``."""
    if every is None:
        return
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not every > 0:
        raise ValueError(f"RunLogger(index_every=...) must be a number of seconds > 0 or None, got {every!r}")
    if not index:
        raise ValueError("RunLogger(index_every=...) needs index=True (it rewrites index.html)")


def _public_signature(init: Any) -> inspect.Signature:
    """``RunLogger.__init__``'s signature without ``self`` and private keywords: what
    ``help(RunLogger)`` and IDEs show (``__new__`` takes ``*args, **kwargs`` to pick the class)."""
    sig = inspect.signature(init)
    return sig.replace(
        parameters=[p for n, p in sig.parameters.items() if n != "self" and not n.startswith("_")]
    )


RunLogger.__signature__ = _public_signature(RunLogger.__init__)  # type: ignore[attr-defined]  # read by inspect


def _reject_local_options(log_path: Any, storage_options: dict[str, Any]) -> None:
    """A local path takes no storage options: an unknown keyword is a typo or a misplaced
    option, never silently ignored.

    Raises:
        TypeError: naming the unknown keywords and listing the valid ones.
    """
    if not storage_options or not isinstance(log_path, (str, os.PathLike)):
        return
    url = os.fspath(log_path)
    if "://" in url and not url.startswith("file://"):
        return
    raise TypeError(
        f"RunLogger({url!r}): unknown keyword argument(s) {sorted(storage_options)}; a local path takes "
        f"only: {', '.join(list(inspect.signature(RunLogger).parameters)[1:])} (storage options such as token= or endpoint_url= are for gs://, s3://... URLs)"
    )


def _worker_logger(
    log_path: str | Storage,
    strict_json: bool,
    storage_options: dict[str, Any],
    pid: int | None = None,
    layout: str = "flat",
    rank: int = 0,
) -> RunLogger:
    """The logger a pickled :class:`RunLogger` becomes (a worker of the same run).

    Raises:
        RuntimeError: the run is ``memory://`` and this is another process than the one
            that pickled it (its files would go to this process's memory and be lost).
    """
    url = log_path if isinstance(log_path, str) else log_path.url
    if url.startswith("memory://") and pid is not None and pid != os.getpid():
        raise RuntimeError(
            f"a RunLogger for {url} was unpickled in process {os.getpid()}, but memory:// runs live in "
            f"the memory of the process that opened them ({pid}): what this process wrote would be lost. "
            "Give workers in other processes a local path shared by them or a bucket URL (gs://, s3://)"
        )
    return RunLogger(
        log_path,
        strict_json=strict_json,
        code_diff=False,
        rank=rank,
        all_ranks=rank > 0,  # a rank's worker writes that rank's files
        layout=layout,
        _worker=True,
        **storage_options,
    )
