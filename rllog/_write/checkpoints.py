"""Checkpoint records: appended to checkpoints.jsonl only after everything logged before them is durable.

A resume must never point past data that was lost, so a record reaches the backend only
after the metric rows and rollout summary files logged before it. Locally the record is
appended after an fsync of those (an fsync or two in the caller's thread, ~1 ms). On an
object store the record is staged right after them: the storage uploads checkpoints.jsonl
appends only once nothing staged before them is left (:data:`rllog._storage.staged.ORDERED_FILES`),
so a record is never behind unrelated files logged after it, and it is in the spill
journal at once (a close that gives up leaves it there, after its rows, for the next
writer on this machine). A background thread ("rllog-checkpoints") waits for the upload,
so a slow bucket never stalls the loop. Records are appended in the order they were logged.

Record format (docs/FORMATS.md, checkpoints.jsonl)::

    {"name": "000010", "batch": 10, "state_path": "gs://b/ckpt/000010.npz", "final": false, "lr": 0.0003}
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from rllog._format.codec import encode_json
from rllog._format.layout import CHECKPOINTS_FILE, METRICS_FILE
from rllog._format.records import parse_checkpoints
from rllog._format.redact import redact_tree
from rllog._write.metrics import MetricsWriter
from rllog._write.rollouts import RolloutFiles
from rllog.errors import StorageError
from rllog.storage import Storage

__all__ = ["CheckpointCommitter", "checkpoint_record", "read_checkpoints"]


def checkpoint_record(
    name: Any, batch: Any, fields: dict[str, Any], loop_state: dict[str, Any]
) -> dict[str, Any]:
    """The record :meth:`rllog.RunLogger.log_checkpoint` appends: ``name``, then the
    known fields that are not None (``batch, epoch, final, state_path, sampler_path``),
    then the loop's extra keys; secrets redacted (:func:`rllog._format.redact.redact_tree`).

    Raises:
        TypeError: ``name`` is not a non-empty str, ``batch`` not an int (numpy ints
            are converted), or ``epoch`` not a number (an int, or a float such as
            transformers' fractional ``state.epoch``).
        ValueError: ``batch`` or ``epoch`` is negative or >= 2**63 (a resume could not
            use it).
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"checkpoint name must be a non-empty str, got {name!r}")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)):
        item = getattr(batch, "item", None)
        batch = item() if callable(item) else batch
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise TypeError(f"log_checkpoint({name!r}): batch must be an int, got {type(batch).__name__}")
    if batch is not None and not 0 <= batch < 2**63:
        raise ValueError(f"log_checkpoint({name!r}): batch must be an int in [0, 2**63), got {batch!r}")
    epoch = fields.get("epoch")
    if epoch is not None:  # an int, or a float for trainers that count fractional epochs (transformers)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
            raise TypeError(f"log_checkpoint({name!r}): epoch must be a number, got {type(epoch).__name__}")
        if not 0 <= epoch < 2**63:  # also refuses NaN
            raise ValueError(f"log_checkpoint({name!r}): epoch must be in [0, 2**63), got {epoch!r}")
    record: dict[str, Any] = {"name": name}
    for key, value in {"batch": batch, **fields}.items():
        if value is not None:
            record[key] = value
    record.update(loop_state)
    return redact_tree(record)  # loop state may hold a client's key or a signed URL


def read_checkpoints(storage: Storage, warnings_out: list[str] | None = None) -> list[dict[str, Any]]:
    """All records of the run's checkpoints.jsonl, in file order; ``[]`` when it is missing."""
    try:
        data = storage.read(CHECKPOINTS_FILE)
    except FileNotFoundError:
        return []
    return parse_checkpoints(data, f"{storage.url}/{CHECKPOINTS_FILE}", warnings_out)


class CheckpointCommitter:
    """Holds checkpoint records until what was logged before them is durable, then appends them.

    Args:
        storage: the run's storage.
        metrics: the run's metric row path (its held-back rows must be written first).
        rollouts: the run's rollout summary files and reports (likewise).
        background: commit on a background thread (object stores: the record is staged
            after the rows and uploaded after them) instead of in the caller's thread
            (local disk, also through a rank view: the record is appended after an fsync).
        warn: ``warn(kind, message)``, told once per kind of failure.

    Concurrency: the loop, user threads, the background thread and ``close`` may commit
    at once. The lock is held only to hand data to the storage, never while waiting for
    an upload, so ``close`` is never stuck behind a background commit; each record is
    appended once, in the order records were added, and only after a durability barrier
    that started after it was added. In a forked child the lock and the thread are
    renewed (a lock held by a parent's thread at the fork would otherwise never be
    released in the child).
    """

    def __init__(
        self,
        storage: Storage,
        metrics: MetricsWriter,
        rollouts: RolloutFiles,
        *,
        strict_json: bool,
        background: bool,
        warn: Callable[[str, str], None],
    ) -> None:
        self._storage = storage
        self._metrics = metrics
        self._rollouts = rollouts
        self._strict_json = strict_json
        self._background = background
        self._warn = warn
        self.pending: list[tuple[int, str, bytes]] = []  # (number, name, line), oldest first
        self._added = 0  # records added so far; a record's number is its position
        self._unflushed = False  # records appended whose durability nobody has waited for yet
        self._unconfirmed: list[tuple[int, str]] = []  # records staged (object stores), not yet seen uploaded
        self._cut_to: int | None = None  # checkpoints.jsonl must be cut back to this size first
        self._fork_safe()

    def _fork_safe(self) -> None:
        """(Re)create the lock, the wake event and the thread handle for this process."""
        self._pid = os.getpid()
        self._lock = threading.RLock()  # hands records to the storage (the loop, the thread, close)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = False

    def _check_fork(self) -> None:
        if self._pid != os.getpid():
            self._fork_safe()

    def add(self, record: dict[str, Any]) -> None:
        """Encode ``record`` and commit it (now, or on the background thread).

        Raises:
            TypeError: a value of the record is not JSON-able (the key is named).
        """
        self._check_fork()
        name = record["name"]
        line = encode_json(record, where=f"checkpoint {name!r}", strict_json=self._strict_json) + b"\n"
        with self._lock:
            self._added += 1
            self.pending.append((self._added, name, line))
            if self._background:  # staged now, in logging order: after the rows and files logged before it
                try:
                    self._stage(self._added)
                except OSError:
                    pass  # the background commit retries and warns
        if not self._background:
            self.commit()
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="rllog-checkpoints", daemon=True)
            self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        """Background: commit held records; retry every few seconds while some wait."""
        while not self._stop:
            self._wake.wait(timeout=5.0 if self.pending else None)
            self._wake.clear()
            if not self._stop:
                self.commit()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the background thread: it appends nothing after this returns. Waits at
        most ``timeout`` seconds for it (a commit waiting on a slow upload is left to
        finish on its own; it holds no lock while it waits)."""
        self._check_fork()
        with self._lock:  # a commit handing records over finishes first
            self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def commit(self, timeout: float | None = None) -> bool:
        """Append held records once everything logged before them is durable; True when
        none is left. ``timeout``: seconds the whole commit may wait for the storage (None:
        twice its flush timeout at most: one barrier before the records, one after).

        On a backend failure nothing raises: the records wait (a resume never points past
        data that was lost), a warning is given once, and they are tried again (next
        checkpoint, ``flush``, ``close``, and every few seconds on object stores).
        """
        import time

        self._check_fork()
        in_thread = threading.current_thread() is self._thread
        deadline = None if timeout is None else time.monotonic() + timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        try:
            with self._lock:
                if not self.pending and not self._unflushed:
                    return True
                upto = self._added  # records added before the barrier below
                if self._background:  # the storage uploads the records after what was staged before them
                    if in_thread and self._stop:
                        return False  # close took over
                    self._stage(upto)
                else:
                    self._drain()
            if not self._background:
                self._storage.flush(durable=True, timeout=left())  # rows and files before the records
                with self._lock:
                    if in_thread and self._stop:
                        return False  # close took over
                    self._append(upto)
            with self._lock:
                confirming = self._unconfirmed[-1][0] if self._unconfirmed else 0
            self._storage.flush(durable=True, timeout=left())
            with self._lock:
                self._unconfirmed = [(n, name) for n, name in self._unconfirmed if n > confirming]
                if not self.pending:
                    self._unflushed = False
        except OSError as exc:
            names = [n for _, n, _ in self.pending]
            if self._unconfirmed and not names:
                what = (
                    f"checkpoint record(s) {[name for _, name in self._unconfirmed]} are not uploaded to {self._storage.url} yet ({exc}); "
                    "they are kept after their rows (memory and the spill journal) and uploaded after them."
                )
            elif names:
                what = (
                    f"checkpoint record(s) {names} held back: what was logged before them is not durable in "
                    f"{self._storage.url} ({exc}). Training goes on; they are written once it is."
                )
            else:
                what = (
                    f"checkpoint record(s) appended to {self._storage.url}/{CHECKPOINTS_FILE} are not uploaded "
                    f"yet ({exc}); they are kept with the rows and retried."
                )
            self._warn(f"checkpoint:{type(exc).__name__}", what)
            return False
        return not self.pending

    def _drain(self) -> None:
        """(under the lock) Hand held metric rows and rollout files to the storage.

        Raises:
            StorageError: some are still refused by the backend.
        """
        if not self._metrics.drain():
            raise StorageError(f"{len(self._metrics.pending)} metric row(s) are not written yet")
        if not self._rollouts.write():
            raise StorageError(
                f"{len(self._rollouts.unwritten)} rollout summary file(s) or report(s) are not written yet"
            )

    def _stage(self, upto: int) -> None:
        """(under the lock, object stores) Stage the records numbered up to ``upto`` right
        after the rows and files logged before them; the storage uploads checkpoints.jsonl
        only after everything staged before it. The storage is also asked to keep a
        server-side copy of metrics.jsonl as it stands at the records (where it has
        ``snapshot``: GCS; no request here, and a failed copy never holds a record back),
        so a resume from them cuts the file without sending its rows again."""
        if self.pending and self.pending[0][0] <= upto:
            self._drain()
            snapshot = getattr(self._storage, "snapshot", None)
            if snapshot is not None:
                try:
                    snapshot(METRICS_FILE)
                except (OSError, ValueError):
                    pass  # best effort: the record goes on without it
            self._append(upto)

    def _append(self, upto: int) -> None:
        """(under the lock) Append the held records numbered up to ``upto``, oldest first.
        A failed local append is cut back to the file's size before it, so a short write
        (ENOSPC, EIO) never leaves a torn record for the retry to append after."""
        storage = self._storage
        local = not self._background
        while self.pending and self.pending[0][0] <= upto:
            line = self.pending[0][2]
            if not local:
                storage.append(CHECKPOINTS_FILE, line)  # staged whole: never torn
            else:
                if self._cut_to is not None:  # an earlier cut-back failed: do it first
                    storage.truncate(CHECKPOINTS_FILE, self._cut_to)
                    self._cut_to = None
                before = storage.size(CHECKPOINTS_FILE) if storage.exists(CHECKPOINTS_FILE) else 0
                try:
                    storage.append(CHECKPOINTS_FILE, line)
                except OSError:
                    self._cut_to = before
                    storage.truncate(CHECKPOINTS_FILE, before)
                    self._cut_to = None
                    raise
            number, name, _ = self.pending.pop(0)
            if not local:
                self._unconfirmed.append((number, name))
            self._unflushed = True

    def unwritten_message(self) -> str | None:
        """At close: which records never became durable, or None."""
        if not self.pending and self._unconfirmed:
            return (
                f"checkpoint record(s) {[name for _, name in self._unconfirmed]} were not uploaded to {self._storage.url}/"
                f"{CHECKPOINTS_FILE} before close; they are in the spill journal after the rows before them, "
                "and the next writer of this run on this machine uploads them after those rows"
            )
        if not self.pending:
            return None
        lines = b"".join(line for _, _, line in self.pending).decode()
        return (
            f"checkpoint record(s) not written to {self._storage.url}/{CHECKPOINTS_FILE}, because the data "
            f"before them never became durable: {lines}"
        )
