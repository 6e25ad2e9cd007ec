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
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from typing import Any

from rllog._jsonl import iter_lines, repair_torn_tail, row_step
from rllog._rank import process_rank
from rllog.checkpoints import CHECKPOINTS_FILE, ResumeState, last_checkpoint, read_checkpoints
from rllog.encoding import MetricsEncoder, decode_json, encode_json
from rllog.errors import StorageError
from rllog.storage import LocalStorage, Storage, open_storage

__all__ = ["RunLogger", "METRICS_FILE", "SUPERSEDED_FILE", "CONFIG_FILE", "CODE_DIFF_FILE"]

METRICS_FILE = "metrics.jsonl"
#: rows moved out of metrics.jsonl on resume (steps at or past the resume point), appended byte for byte
SUPERSEDED_FILE = "metrics.superseded.jsonl"
CONFIG_FILE = "config.json"
CODE_DIFF_FILE = "code.diff"


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
        strict_json: write NaN/±Infinity as ``null`` (strict JSON) instead of the
            ``NaN``/``Infinity`` tokens.
        code_diff: write code.diff (commit, ``git diff HEAD``, untracked files) at start.
        rank: this process's rank; default from torch.distributed, ``$RANK`` or
            ``$LOCAL_RANK``. Only rank 0 writes unless ``all_ranks=True``; on other
            ranks every method is a cheap no-op and :attr:`is_writer` is False.
        all_ranks: write from every rank (then give each rank its own ``log_path``).
        console: also print a one-line summary of each metrics row to stderr.
        index: write ``index.html`` (charts of the main metrics, the stability doctor's
            findings, links to every report; see ``rllog index``) at close, and set
            :attr:`index_url`.
        shared: join a run that another process is writing (e.g. a separate evaluation
            process adding its reports): no lock, no start-up repair or resume; rows
            are appended to the same files. Without it, opening a local run that
            another live RunLogger holds raises RuntimeError.
        storage_options: passed to fsspec for URLs (``token=``, ``endpoint_url=``...).

    Raises:
        TypeError, ValueError: on a bad ``log_path`` or argument.
        RuntimeError: another live process writes this (local) run and ``shared`` is not set.
        StorageError: ``resume=True`` and the run's files cannot be read (a bucket that
            does not answer); StoragePermanentError: the bucket is missing or access is
            denied (found at open).
        ImportError: when the URL's fsspec backend is missing (names the package).
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str] | Storage,
        *,
        config: Any = None,
        resume: bool = False,
        resume_key: str = "batch",
        strict_json: bool = False,
        code_diff: bool = True,
        rank: int | None = None,
        all_ranks: bool = False,
        console: bool = False,
        shared: bool = False,
        index: bool = True,
        _worker: bool = False,
        **storage_options: Any,
    ) -> None:
        if shared and resume:
            raise ValueError("RunLogger(shared=True, resume=True): a shared logger joins a run another process "
                             "writes, and that process owns its resume; pass one of them")
        self.rank = process_rank() if rank is None else int(rank)
        self.is_writer = all_ranks or self.rank == 0
        self.strict_json = strict_json
        self.resume_key = resume_key
        self.resume_state: ResumeState | None = None
        self.warnings: list[str] = []
        self.console = console
        self._storage_options = storage_options
        self._owns_storage = isinstance(log_path, (str, os.PathLike))
        self._closed = False
        self._warned: set[str] = set()
        self._written: set[tuple[str, Any, str | None]] = set()  # iteration artifacts written by this logger
        self._pending: list[bytes] = []  # rows the backend refused, retried in order
        self._pending_offset = 0  # bytes of _pending[0] already written
        self._unwritten_rollouts: dict[str, bytes] = {}  # rollout summary files the backend refused
        self._pending_checkpoints: list[tuple[str, bytes]] = []  # records waiting for durable data
        self._ckpt_lock = threading.RLock()  # one commit at a time (the loop, the committer thread, close)
        self._ckpt_wake = threading.Event()
        self._committer: threading.Thread | None = None
        self._committer_stop = False
        self._fd: int | None = None
        self._lock = threading.Lock()
        self._encoder = MetricsEncoder(strict_json=strict_json)
        self._diff_thread: threading.Thread | None = None
        if not self.is_writer:
            self.storage: Storage | None = None
            self.log_path = os.fspath(log_path) if isinstance(log_path, (str, os.PathLike)) else log_path.url
            return
        self.storage = open_storage(log_path, **storage_options)
        self.log_path = self.storage.url
        self._run_lock: int | None = None
        if shared:
            _worker = True
        self._worker = _worker
        self._index = index
        self.index_url: str | None = None
        if not _worker:
            holder = self._lock_run()
            if holder is None:
                self._start(resume)
            else:
                raise RuntimeError(
                    f"{self.log_path} is being written by process {holder} (it holds .rllog.lock): "
                    f"{'a resume' if resume else 'a second run'} there would mix both processes' rows. Stop "
                    "that process first (a requeued job whose old copy still runs), log to another path, or "
                    "pass shared=True to add this process's rows and reports to the same run on purpose"
                )
        self._fd = self.storage.append_fd(METRICS_FILE) if isinstance(self.storage, LocalStorage) else None
        if config is not None:
            self.log_config(config)
        if code_diff and not _worker:
            self._diff_thread = threading.Thread(target=self._write_code_diff, name="rllog-code-diff", daemon=True)
            self._diff_thread.start()

    # -- start of a run -------------------------------------------------------------

    def _note(self, message: str, problem: bool = True) -> None:
        """Record ``message`` in :attr:`warnings`; warn when it is a problem, else log it at INFO."""
        self.warnings.append(message)
        if problem:
            warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=4)
        else:
            logging.getLogger("rllog").info(message)

    def _lock_run(self) -> str | None:
        """Take the run's lock (local runs: ``flock`` on ``.rllog.lock``, held until close or
        death). Returns None when taken (or not applicable), else the holder's pid as text.

        The lock keeps two loggers from repairing or rewriting files the other is appending
        to. Object stores have no such lock; see :mod:`rllog.storage` for their writers.
        """
        if not isinstance(self.storage, LocalStorage):
            return None
        import fcntl

        path = self.storage.root / ".rllog.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            return holder
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._run_lock = fd
        return None

    def _start(self, resume: bool) -> None:
        storage = self.storage
        try:
            self._start_checks(resume)
        except OSError as exc:
            if resume:
                raise StorageError(f"cannot resume {storage.url}: its files cannot be read ({exc})") from exc
            self._note(
                f"could not read {storage.url} at start ({exc}); skipped the check for torn last lines. "
                "Rows are kept and uploaded when it answers."
            )

    def _start_checks(self, resume: bool) -> None:
        storage = self.storage
        for name in (METRICS_FILE, CHECKPOINTS_FILE):
            repaired = repair_torn_tail(storage, name)
            if repaired:
                self._note(repaired)
        if resume:
            records = read_checkpoints(storage, self.warnings)
            rec = last_checkpoint(records, self.resume_key)
            if rec is not None:
                self.resume_state = ResumeState.from_record(rec, self.resume_key)
            self._supersede(self.resume_state.batch if self.resume_state else 0)
        elif storage.exists(METRICS_FILE) and storage.size(METRICS_FILE) > 0:
            self._note(
                f"{storage.url}/{METRICS_FILE} already has rows; new rows are appended after them. "
                "Pass resume=True to continue from the last checkpoint instead."
            )

    def _supersede(self, point: int) -> None:
        """Move metric rows with step >= point to metrics.superseded.jsonl (copy first, then cut)."""
        storage = self.storage
        try:
            data = storage.read(METRICS_FILE)
        except FileNotFoundError:
            return
        keep, moved = [], []
        for lineno, line in iter_lines(data):
            try:
                step = _resume_position(line)
            except ValueError:
                self._note(f"{storage.url}/{METRICS_FILE} line {lineno}: not JSON; kept in place")
                step = None
            (moved if isinstance(step, (int, float)) and step >= point else keep).append(line + b"\n")
        if not moved:
            return
        storage.append(SUPERSEDED_FILE, b"".join(moved))
        storage.flush(durable=True)
        storage.write(METRICS_FILE, b"".join(keep))
        self._note(
            f"resuming at step {point}: moved {len(moved)} metric rows with step >= {point} "
            f"to {SUPERSEDED_FILE} ({len(keep)} rows kept)",
            problem=False,
        )

    def _write_code_diff(self) -> None:
        from rllog._codediff import code_diff

        try:
            data = code_diff()
            storage = self.storage
            if storage.exists(CODE_DIFF_FILE):
                if storage.read(CODE_DIFF_FILE) == data:
                    return
                name = _timestamped("code", ".diff", storage)
            else:
                name = CODE_DIFF_FILE
            storage.write(name, data)
        except Exception as exc:  # telemetry never kills training
            self._warn_once("code.diff", f"could not write code.diff: {exc}")

    # -- the loop's calls -----------------------------------------------------------

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one row ``{"step": step, **metrics}`` to metrics.jsonl.

        Args:
            step: the iteration (batch) index, an int >= 0.
            metrics: str keys to numbers, bools, strings or None; numpy scalars and
                one-element arrays/tensors are converted; NaN and ±Infinity are kept.

        The row is in the OS (locally) when this returns; on object stores it is
        staged for the next upload. Costs ~10-25 us for 100 floats.

        Raises:
            TypeError: a value or key that cannot be written (the key and step are
                named); nothing is written for that call.
            ValueError: a negative step or a ``"step"`` key in ``metrics``.
            RuntimeError: the logger is closed.
        """
        if not self.is_writer:
            return
        if self._closed:
            raise RuntimeError(f"log_metrics(step={step!r}) on a closed RunLogger for {self.log_path}")
        with self._lock:
            row = self._encoder.encode_row(step, metrics)
            if self._pending:
                self._pending.append(bytes(row))
                self._drain()
            else:
                try:
                    if self._fd is None:
                        self.storage.append(METRICS_FILE, bytes(row))
                    else:
                        n = os.write(self._fd, row)
                        if n != len(row):  # a short write: the rest goes out with the backlog
                            self._pending.append(bytes(row))
                            self._pending_offset = n
                            self._drain()
                except OSError as exc:
                    self._pending.append(bytes(row))
                    self._pending_offset = 0
                    self._backend_failed(exc)
        if self.console:
            self._print_row(step, metrics)

    def _drain(self) -> None:
        """Write rows held back by an earlier failure, in order; keep what still fails.

        ``_pending_offset`` bytes of the first held row are already in the file (a short
        write); only the rest is written, so no row is cut or doubled.
        """
        while self._pending:
            row = self._pending[0]
            try:
                if self._fd is None:
                    self.storage.append(METRICS_FILE, row)
                else:
                    while self._pending_offset < len(row):
                        self._pending_offset += os.write(self._fd, row[self._pending_offset :])
            except OSError as exc:
                self._backend_failed(exc)
                return
            self._pending.pop(0)
            self._pending_offset = 0

    def _backend_failed(self, exc: BaseException) -> None:
        self._warn_once(
            f"metrics:{type(exc).__name__}",
            f"could not write to {self.log_path}/{METRICS_FILE}: {exc}. Training goes on; "
            f"{len(self._pending)} row(s) are kept in memory and retried on the next call.",
        )

    def _check_rewrite(self, what: str, iteration: Any, eval_name: str | None) -> None:
        """Warn (once per kind) when this logger writes an iteration's artifact a second time:
        the new file replaces the old one, which is right after a resume but is usually a
        bug (a wrong iteration number) within one run."""
        key = (what, iteration, eval_name)
        if key in self._written:
            split = "train" if eval_name is None else f"evaluator {eval_name!r}"
            self._warn_once(
                f"rewrite:{what}",
                f"iteration {iteration}'s {what} ({split}) was already written by this logger; the new "
                "file replaces it. Pass each iteration its own number.",
            )
        self._written.add(key)

    def _warn_once(self, kind: str, message: str) -> None:
        """Warn once per ``kind`` (later failures of that kind are counted silently)."""
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.warnings.append(message)
        warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=3)

    _CONSOLE_KEYS = ("env/all/reward/total", "reward", "env/all/correct", "entropy", "kl_sample_train_v1", "kl", "loss")

    def _print_row(self, step: int, metrics: dict[str, Any]) -> None:
        parts = [f"step {step}"]
        for k in self._CONSOLE_KEYS:
            v = metrics.get(k)
            if v is not None:
                parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
        if len(parts) == 1:
            parts.extend(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(metrics.items())[:6])
        print(" | ".join(parts), file=sys.stderr)

    def log_config(self, config: Any) -> None:
        """Write config.json (atomically) from a chz object, dataclass, pydantic model,
        argparse namespace or mapping; see :mod:`rllog.config` for the conversion and
        redaction rules. When config.json already exists with different content the old
        file is kept as ``config.<UTC time>.json``.

        Raises:
            ConfigError: the config is not an object with fields or a mapping.
        """
        if not self.is_writer:
            return
        from rllog.config import config_to_dict

        data = encode_json(config_to_dict(config), indent=2, strict_json=self.strict_json) + b"\n"
        storage = self.storage
        try:
            old = storage.read(CONFIG_FILE) if storage.exists(CONFIG_FILE) else None
            if old == data:
                return
            if old is not None:
                storage.write(_timestamped("config", ".json", storage), old)
            storage.write(CONFIG_FILE, data)
        except OSError as exc:
            self._warn_once("config", f"could not write {self.log_path}/{CONFIG_FILE}: {exc}")

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
        once and a background thread appends the record when the upload of everything
        before it has completed, so a slow or unreachable bucket never stalls the loop.

        A backend failure does not raise: when what was logged before cannot be made
        durable, the record is held back (so a resume never points past data that was
        lost), a warning is given once, and it is written at the next checkpoint,
        ``flush`` or ``close`` that succeeds; ``close`` says which records never were.

        Raises:
            TypeError: ``name`` is not a str, ``batch`` not an int, or a loop-state
                value is not JSON-able (the key is named).
            RuntimeError: the logger is closed.
        """
        if not self.is_writer:
            return
        if self._closed:
            raise RuntimeError(f"log_checkpoint({name!r}) on a closed RunLogger for {self.log_path}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"checkpoint name must be a non-empty str, got {name!r}")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)):
            item = getattr(batch, "item", None)
            batch = item() if callable(item) else batch
            if isinstance(batch, bool) or not isinstance(batch, int):
                raise TypeError(f"log_checkpoint({name!r}): batch must be an int, got {type(batch).__name__}")
        record: dict[str, Any] = {"name": name}
        for key, value in (("batch", batch), ("epoch", epoch), ("final", final),
                           ("state_path", state_path), ("sampler_path", sampler_path)):
            if value is not None:
                record[key] = value
        for key, value in loop_state.items():
            record[key] = value
        line = encode_json(record, where=f"checkpoint {name!r}", strict_json=self.strict_json) + b"\n"
        self._pending_checkpoints.append((name, line))  # list append/pop(0) are atomic: no lock, no wait
        if self._fd is not None:  # local: an fsync or two, done here
            self._commit_checkpoints()
        else:  # object store: waiting for the upload would stall the loop; a thread does it, in order
            self._start_committer()
            self._ckpt_wake.set()

    def _start_committer(self) -> None:
        if self._committer is None:
            self._committer = threading.Thread(target=self._commit_loop, name="rllog-checkpoints", daemon=True)
            self._committer.start()

    def _commit_loop(self) -> None:
        """Background: commit held checkpoint records; retry every few seconds while some wait."""
        while not self._committer_stop:
            self._ckpt_wake.wait(timeout=5.0 if self._pending_checkpoints else None)
            self._ckpt_wake.clear()
            if not self._committer_stop:
                self._commit_checkpoints()

    def _commit_checkpoints(self) -> bool:
        """Append held checkpoint records once everything logged before them is durable.

        Returns True when none is left. On a backend failure nothing raises: the records
        wait (a resume never points past data that was lost), a warning is given once, and
        they are tried again (next checkpoint, ``flush``, ``close``, and every few seconds
        on object stores).
        """
        with self._ckpt_lock:
            return self._commit_checkpoints_locked()

    def _commit_checkpoints_locked(self) -> bool:
        if not self._pending_checkpoints:
            return True
        try:
            with self._lock:
                self._drain()
            if self._pending:
                raise StorageError(f"{len(self._pending)} metric row(s) are not written yet")
            if self._unwritten_rollouts and not self._write_rollout_files():
                raise StorageError(f"{len(self._unwritten_rollouts)} rollout summary file(s) are not written yet")
            self.storage.flush(durable=True)
            while self._pending_checkpoints:
                self.storage.append(CHECKPOINTS_FILE, self._pending_checkpoints[0][1])
                self._pending_checkpoints.pop(0)
            self.storage.flush(durable=True)
        except OSError as exc:
            names = [n for n, _ in self._pending_checkpoints]
            self._warn_once(
                f"checkpoint:{type(exc).__name__}",
                f"checkpoint record(s) {names} held back: what was logged before them is not durable in "
                f"{self.log_path} ({exc}). Training goes on; they are written once it is.",
            )
            return False
        return True

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

        On ranks that do not write it is a cheap no-op (``trace`` is None and logtree
        calls inside are no-ops).
        """
        if not self.is_writer:
            return contextlib.nullcontext()
        self._check_rewrite("report", iteration, None)
        from rllog.logtree import iteration_trace

        return iteration_trace(
            self.storage, iteration, num_groups_to_log=num_groups_to_log, title=title,
            strict_json=self.strict_json, warn=self._warn_once,
        )

    def evaluation(self, name: str, iteration: int, *, num_groups_to_log: int = 4, title: str | None = None) -> Any:
        """Like :meth:`iteration` for evaluator ``name``: writes
        ``eval_<name>_iteration_NNNNNN.html`` and ``..._logtree.json`` (``<name>`` made
        file-name safe by :func:`rllog._names.safe_eval_name`).

        Raises:
            TypeError: ``name`` is not a str (raised at the ``with``, before the block runs).
        """
        if not self.is_writer:
            return contextlib.nullcontext()
        self._check_rewrite("report", iteration, name)
        from rllog.logtree import iteration_trace

        return iteration_trace(
            self.storage, iteration, eval_name=name, num_groups_to_log=num_groups_to_log, title=title,
            strict_json=self.strict_json, warn=self._warn_once,
        )

    # -- rollout summaries (rllog.rollouts) --------------------------------------------

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
        :func:`rllog.rollouts.build_rollout_summaries` for the shapes, ``tags`` and
        ``sampling_client_step``. ``split`` defaults to ``"train"``, or
        ``"eval/<eval_name>"``.

        A backend failure does not raise: the file's bytes are kept in memory, a warning
        is given once, and the write is retried on the next ``log_rollouts`` call.

        Raises:
            TypeError, ValueError: a value of the wrong type or shape (the message names
                the group, trajectory, step and key); nothing is written.
        """
        if not self.is_writer:
            return
        from rllog.rollouts import encode_rollouts

        self._check_rewrite("rollout summaries file", iteration, eval_name)
        name, _, data = encode_rollouts(
            iteration, groups, split=split, eval_name=eval_name, tags=tags,
            sampling_client_step=sampling_client_step, strict_json=self.strict_json,
        )
        self._unwritten_rollouts[name] = data  # a newer file for the same name replaces an unwritten one
        self._write_rollout_files()

    def _write_rollout_files(self) -> bool:
        """Write the kept rollout summary files in order; False if the backend refused one."""
        unwritten = self._unwritten_rollouts
        for name in list(unwritten):
            try:
                self.storage.write(name, unwritten[name])
            except OSError as exc:
                self._warn_once(
                    f"rollouts:{type(exc).__name__}",
                    f"could not write {self.log_path}/{name}: {exc}. Training goes on; "
                    f"{len(unwritten)} rollout summary file(s) are kept in memory and retried on the "
                    "next log_rollouts call and at close.",
                )
                return False
            del unwritten[name]
        return True

    def flush(self, durable: bool = False) -> None:
        """Push everything logged so far to the backend; ``durable=True`` also fsyncs
        local files and waits for object-store uploads. Backend errors are warned about
        once and kept for retry, never raised."""
        self._flush(durable)

    def _flush(self, durable: bool) -> bool:
        """:meth:`flush`; True when everything (held checkpoint records included) went out."""
        if not self.is_writer or self._closed:
            return True
        with self._lock:
            self._drain()
        try:
            self.storage.flush(durable=durable)
        except OSError as exc:
            self._warn_once(f"flush:{type(exc).__name__}", f"could not flush {self.log_path}: {exc}")
            return False
        return self._commit_checkpoints() and not self._pending

    def close(self) -> None:
        """Flush durably and close the storage. Idempotent. Rows that still cannot be
        written are saved to a local rescue file, and a warning says where."""
        if self._closed or not self.is_writer:
            self._closed = True
            return
        if self._diff_thread is not None:
            self._diff_thread.join(timeout=30)
        if self._committer is not None:
            self._committer_stop = True
            self._ckpt_wake.set()
            self._committer.join()  # bounded: one commit waits at most the storage's flush timeout
        if self._final_flush():
            if self._index and not self._worker:
                self._write_index()
        self._closed = True
        if self._unwritten_rollouts and not self._write_rollout_files():
            what = f"{len(self._unwritten_rollouts)} rollout summary file(s) could not be written to {self.log_path}"
            try:
                folder = tempfile.mkdtemp(prefix="rllog-unwritten-rollouts-")
                for name, data in self._unwritten_rollouts.items():
                    with open(os.path.join(folder, name), "wb") as f:
                        f.write(data)
            except OSError as exc:
                self._note(f"{what}, nor to a temp folder ({exc}): {sorted(self._unwritten_rollouts)} are lost")
            else:
                self._note(f"{what}; they were saved to {folder}")
        if self._pending:
            self._rescue()
        if self._pending_checkpoints:
            self._note(
                f"checkpoint record(s) not written to {self.log_path}/{CHECKPOINTS_FILE}, because the data "
                f"before them never became durable: {b''.join(line for _, line in self._pending_checkpoints).decode()}"
            )
        if self._owns_storage:
            try:
                self.storage.close()
            except OSError as exc:
                self._note(f"closing {self.log_path} failed: {exc}")
        if self._run_lock is not None:
            os.close(self._run_lock)  # releases the flock
            self._run_lock = None

    def _final_flush(self) -> bool:
        """The durable flush of :meth:`close`. On an object store it keeps waiting while the
        upload makes progress (a backlog after an outage, up to the storage's
        ``close_timeout``) and gives up after 5 s without any (a bucket that is down: the
        spill journal keeps the rows for the next writer), so close never hangs long."""
        storage = self.storage
        pending = getattr(storage, "pending", None)
        close_timeout = getattr(storage, "close_timeout", None)
        if pending is None or close_timeout is None:
            return self._flush(durable=True)
        deadline = time.monotonic() + close_timeout
        flush_timeout = storage.flush_timeout
        storage.flush_timeout = min(flush_timeout, 5.0)
        try:
            while True:
                before = sum(pending().values())
                if self._flush(durable=True):
                    return True
                if sum(pending().values()) >= before or time.monotonic() >= deadline:
                    storage.close_timeout = min(close_timeout, 5.0)  # no progress: do not wait again in close
                    return False
        finally:
            storage.flush_timeout = flush_timeout

    def _write_index(self) -> None:
        """Write index.html (charts, doctor findings, report links) for the run as it now is."""
        if not self.storage.exists(METRICS_FILE):
            return
        from rllog.index import write_index

        try:
            self.index_url, _findings = write_index(self.storage)
        except Exception as exc:  # the run's data is safe; the page is a convenience
            self._warn_once("index", f"could not write index.html for {self.log_path}: {type(exc).__name__}: {exc}")

    def _rescue(self) -> None:
        """Save rows the backend never took to a local temp file, else print them to stderr."""
        what = f"{len(self._pending)} metric row(s) could not be written to {self.log_path}/{METRICS_FILE}"
        if self._pending_offset:
            what += f" (the first was cut after {self._pending_offset} bytes; a reader skips that torn line)"
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="rllog-unwritten-", suffix=".jsonl")
            with os.fdopen(fd, "wb") as f:
                f.writelines(self._pending)
        except OSError as exc:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            sys.stderr.write(f"rllog: {what}, nor to a temp file ({exc}); here they are:\n")
            sys.stderr.write(b"".join(self._pending).decode("utf-8", "replace"))
            self._note(f"{what}, nor to a temp file ({exc}); they were printed to stderr")
        else:
            self._note(f"{what}; they were saved to {path}")

    def __enter__(self) -> RunLogger:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("writer" if self.is_writer else f"rank {self.rank}, not writing")
        return f"RunLogger({self.log_path!r}, {state})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as configuration: a worker gets a logger for the same run that writes
        its own artifacts (and can append rows) but does not redo start-of-run work."""
        return (_worker_logger, (self.log_path, self.strict_json, self._storage_options))


def _resume_position(line: bytes) -> Any:
    """Where a metrics row stands in the loop: its ``progress/batch`` when it has a number
    there (the loop's batch index, what checkpoint ``batch`` counts), else its ``step``."""
    if b'"progress/batch"' in line:
        row = decode_json(line)
        value = row.get("progress/batch") if isinstance(row, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
    return row_step(line)


def _timestamped(stem: str, suffix: str, storage: Storage) -> str:
    """``stem.<UTC time>suffix``, with ``-2``, ``-3``... when that name is taken."""
    base = f"{stem}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    name, n = base + suffix, 1
    while storage.exists(name):
        n += 1
        name = f"{base}-{n}{suffix}"
    return name


def _worker_logger(log_path: str, strict_json: bool, storage_options: dict[str, Any]) -> RunLogger:
    return RunLogger(log_path, strict_json=strict_json, code_diff=False, rank=0, _worker=True, **storage_options)

