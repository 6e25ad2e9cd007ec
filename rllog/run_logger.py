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
from rllog.encoding import MetricsEncoder, encode_json, to_jsonable
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
            expose it as :attr:`resume_state`, and move metric rows with
            ``step >= resume_state.batch`` (all rows when there is no checkpoint) to
            ``metrics.superseded.jsonl`` so re-run steps do not stand twice.
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
        storage_options: passed to fsspec for URLs (``token=``, ``endpoint_url=``...).

    Raises:
        TypeError, ValueError: on a bad ``log_path`` or argument.
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
        _worker: bool = False,
        **storage_options: Any,
    ) -> None:
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
        self._pending: list[bytes] = []  # rows the backend refused, retried in order
        self._pending_offset = 0  # bytes of _pending[0] already written
        self._lock = threading.Lock()
        self._encoder = MetricsEncoder(strict_json=strict_json)
        self._diff_thread: threading.Thread | None = None
        if not self.is_writer:
            self.storage: Storage | None = None
            self.log_path = os.fspath(log_path) if isinstance(log_path, (str, os.PathLike)) else log_path.url
            return
        self.storage = open_storage(log_path, **storage_options)
        self.log_path = self.storage.url
        if not _worker:
            self._start(resume)
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

    def _start(self, resume: bool) -> None:
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
                step = row_step(line)
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
                name = f"code.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.diff"
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
                storage.write(f"config.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json", old)
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

        Raises:
            TypeError: ``name`` is not a str, ``batch`` not an int, or a loop-state
                value is not JSON-able (the key is named).
            StorageError: the record or the data before it could not be made durable
                (the record is then not written, so a resume never points past data
                that was lost).
        """
        if not self.is_writer:
            return
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
        line = encode_json(to_jsonable(record, f"checkpoint {name!r}", self.strict_json)) + b"\n"
        self.flush(durable=True)
        if self._pending:
            from rllog.errors import StorageError

            raise StorageError(
                f"checkpoint {name!r} not recorded: {len(self._pending)} metric row(s) are not yet "
                f"written to {self.log_path}"
            )
        self.storage.append(CHECKPOINTS_FILE, line)
        self.storage.flush(durable=True)

    def flush(self, durable: bool = False) -> None:
        """Push everything logged so far to the backend; ``durable=True`` also fsyncs
        local files and waits for object-store uploads. Backend errors are warned about
        once and kept for retry, never raised."""
        if not self.is_writer or self._closed:
            return
        with self._lock:
            self._drain()
        try:
            self.storage.flush(durable=durable)
        except OSError as exc:
            self._warn_once(f"flush:{type(exc).__name__}", f"could not flush {self.log_path}: {exc}")

    def close(self) -> None:
        """Flush durably and close the storage. Idempotent. Rows that still cannot be
        written are saved to a local rescue file, and a warning says where."""
        if self._closed or not self.is_writer:
            self._closed = True
            return
        if self._diff_thread is not None:
            self._diff_thread.join(timeout=30)
        self.flush(durable=True)
        self._closed = True
        if self._pending:
            self._rescue()
        if self._owns_storage:
            try:
                self.storage.close()
            except OSError as exc:
                self._note(f"closing {self.log_path} failed: {exc}")

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


def _worker_logger(log_path: str, strict_json: bool, storage_options: dict[str, Any]) -> RunLogger:
    return RunLogger(log_path, strict_json=strict_json, code_diff=False, rank=0, _worker=True, **storage_options)

