"""The metrics row path: encode one row, put it in the OS, keep what the backend refused.

Locally a row is one ``os.write`` on the run's kept-open ``O_APPEND`` descriptor of
metrics.jsonl (in the OS page cache when :meth:`MetricsWriter.write` returns, so a
killed process loses nothing); on object stores it is staged by the storage (memory and
a local spill journal) for the background upload.

A backend failure (disk full, bucket down) never raises into the loop: the row is kept
in memory with every later one, written in order on the next call (:meth:`drain`), and
the failure is warned about once. Rows the backend never takes are saved to a local temp
file at close (:meth:`rescue`).
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from rllog._format.codec import MetricsEncoder
from rllog._format.jsonl import TAIL_WINDOW, last_line_crc
from rllog._format.layout import METRICS_FILE
from rllog._format.terminal import escape_controls
from rllog._format.vocab import CONSOLE_KEYS
from rllog.errors import StorageError
from rllog.storage import LocalStorage, Storage

__all__ = ["MetricsWriter"]


class MetricsWriter:
    """Appends metric rows to ``metrics.jsonl`` of ``storage``.

    Args:
        storage: the run's storage; for a :class:`LocalStorage` rows go straight to its
            ``O_APPEND`` descriptor.
        size: (other storages) bytes in metrics.jsonl when the writer opens, None when
            unknown; kept up to date with the rows appended (:meth:`file_position`).
        strict_json: write NaN/±Infinity as ``null``.
        console: also print a one-line summary of each row to stderr.
        warn: ``warn(kind, message)``, told once per kind of backend failure.

    Attributes:
        pending: rows the backend refused, oldest first (retried in order).
        closed: set by the owner at close; :meth:`write` then raises.
    """

    __slots__ = (
        "storage",
        "console",
        "closed",
        "pending",
        "tap",
        "_offset",
        "_fd",
        "_lock",
        "_encoder",
        "_warn",
        "_pid",
        "_last_step",
        "_last_row",
        "_size",
        "_last_line",
    )

    def __init__(
        self,
        storage: Storage,
        *,
        strict_json: bool,
        console: bool,
        warn: Callable[[str, str], None],
        size: int | None = None,
    ) -> None:
        self.storage = storage
        self.console = console
        self.closed = False
        self.pending: list[bytes] = []
        #: called with each encoded row (bytes, in logging order) after it is written: the sinks' queue
        self.tap: Callable[[bytes], None] | None = None
        self._offset = 0  # bytes of pending[0] already written (a short write)
        self._last_step: int | None = None  # the step of the last row, and its values (same-step check)
        self._last_row: dict[str, Any] = {}
        self._fd = storage.append_fd(METRICS_FILE) if isinstance(storage, LocalStorage) else None
        # without a descriptor (buckets): the file's size as this writer knows it (``size``:
        # at open; None: unknown) and the last row it appended, for file_position()
        self._size = size
        self._last_line: bytes | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._encoder = MetricsEncoder(strict_json=strict_json)
        self._warn = warn

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        """Append ``{"step": step, **metrics}``; see :meth:`rllog.RunLogger.log_metrics`.

        Raises:
            TypeError, ValueError: from :class:`MetricsEncoder` (nothing is written).
            RuntimeError: after close.
        """
        if self.closed:
            raise RuntimeError(f"log_metrics(step={step!r}) on a closed RunLogger for {self.storage.url}")
        self._check_fork()
        with self._lock:
            row = self._encoder.encode_row(step, metrics)
            written = self._encoder.last  # the values as written (converted, secrets redacted)
            if step == self._last_step:
                self._same_step(step, written)
            else:
                self._last_step, self._last_row = step, written
            if self.pending:
                self.pending.append(bytes(row))
                self._drain()
            else:
                try:
                    if self._fd is None:
                        data = bytes(row)
                        self.storage.append(METRICS_FILE, data)
                        self._appended(data)
                    else:
                        n = os.write(self._fd, row)
                        if n != len(row):  # a short write: the rest goes out with the backlog
                            self.pending.append(bytes(row))
                            self._offset = n
                            self._drain()
                except OSError as exc:
                    self.pending.append(bytes(row))
                    self._offset = 0
                    self._failed(exc)
            if self.tap is not None:
                self.tap(bytes(row))
        if self.console:
            _print_row(step, written)

    def _check_fork(self) -> None:
        """In a forked child, a new lock: the parent's may have been held by another thread at the fork."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()

    def _same_step(self, step: int, row: dict[str, Any]) -> None:
        """A second row for the step just logged: fine when its keys are new (an eval row,
        a summary row), but a key with another value makes readers take the later row as a
        restart and set the earlier one aside (docs/FORMATS.md, the repeated-step rule)."""
        last = self._last_row
        for k, v in row.items():
            if k in last and last[k] != v and not (v != v and last[k] != last[k]):
                self._warn(
                    "same-step",
                    f"step {step} was logged twice with different values for {k!r} ({last[k]!r}, then "
                    f"{v!r}): readers take the later row as a restart of the run and set the earlier row "
                    "aside. Log one row per step (merge the dicts) or give each row its own step.",
                )
                return
        self._last_row = {**last, **row}

    def last_position(self) -> int | float | None:
        """Where the last row logged by this writer stands in the loop: its ``progress/batch``
        when it logged a number there, else its step; None before the first row. Derived at
        the call (a checkpoint), nothing is kept per row for it."""
        if self._last_step is None:
            return None
        position = self._last_row.get("progress/batch", self._last_step)
        if isinstance(position, bool) or not isinstance(position, (int, float)):
            return self._last_step
        return position

    def _appended(self, row: bytes) -> None:
        if self._size is not None:
            self._size += len(row)
        self._last_line = row

    def file_position(self) -> tuple[int, int] | None:
        """Where metrics.jsonl stands now that the rows written so far are in it:
        ``(bytes, CRC-32 of its last line)`` (:func:`rllog._format.jsonl.last_line_crc`),
        what a checkpoint record keeps so a resume reads only the rows after it. Locally
        one ``fstat`` and one ``pread`` of the last 4 KiB; on a bucket what the writer
        kept (no request). None when it cannot be told: a bucket whose size was unknown
        at open or that got no row from this writer yet, an empty file, a last line
        without newline, a failed read."""
        with self._lock:
            if self._fd is None:
                if self._size is None or self._last_line is None:
                    return None
                size, tail = self._size, self._last_line
            else:
                try:
                    size = os.fstat(self._fd).st_size
                    tail = os.pread(self._fd, min(size, TAIL_WINDOW), size - min(size, TAIL_WINDOW))
                except OSError:
                    return None
        crc = last_line_crc(tail)
        return None if crc is None else (size, crc)

    def drain(self) -> bool:
        """Write the held-back rows, in order; True when none is left. Locally, first
        notices a run folder deleted mid-run and recreates it (:meth:`_relink`)."""
        self._check_fork()
        with self._lock:
            if self._fd is not None and isinstance(self.storage, LocalStorage):
                try:
                    self._relink(self.storage)
                except StorageError as exc:
                    self._warn("folder-deleted", f"{exc}. Training goes on; no checkpoint record is written.")
                    return False
            self._drain()
            return not self.pending

    def _relink(self, storage: LocalStorage) -> None:
        """(under the lock) If metrics.jsonl (or another kept-open file) was deleted with
        the run folder, rewrite it from its still-open descriptor and warn, naming what
        was rescued and what is lost. Rows go on to the new file.

        Raises:
            StorageError: the folder was deleted and could not be recreated (the rows
                stay in the deleted file's descriptor; :meth:`drain` then says False, so
                no checkpoint record claims them).
        """
        try:
            rescued = storage.relink()
        except OSError as exc:
            raise StorageError(
                f"the run folder {storage.url} was deleted while the run was writing to it, and "
                f"recreating it failed: {exc}"
            ) from exc
        if not rescued:
            return
        self._fd = storage.append_fd(METRICS_FILE)
        kept = ", ".join(f"{name} ({n} bytes)" for name, n in sorted(rescued.items()))
        self._warn(
            f"folder-deleted:{sorted(rescued.items())}",
            f"the run folder {storage.url} (or files in it) was deleted while the run was writing to it. "
            f"Recreated it and rewrote from the still-open files: {kept}; every row logged so far is kept. "
            "Lost: the other files written before the deletion (config.json, code.diff, rollout summaries, "
            "reports, run_status.json, and checkpoints.jsonl unless listed above).",
        )

    def _drain(self) -> None:
        """(under the lock) ``_offset`` bytes of the first held row are already in the file
        (a short write); only the rest is written, so no row is cut or doubled."""
        while self.pending:
            row = self.pending[0]
            try:
                if self._fd is None:
                    self.storage.append(METRICS_FILE, row)
                    self._appended(row)
                else:
                    while self._offset < len(row):
                        self._offset += os.write(self._fd, row[self._offset :])
            except OSError as exc:
                self._failed(exc)
                return
            self.pending.pop(0)
            self._offset = 0

    def _failed(self, exc: BaseException) -> None:
        self._warn(
            f"metrics:{type(exc).__name__}",
            f"could not write to {self.storage.url}/{METRICS_FILE}: {exc}. Training goes on; "
            f"{len(self.pending)} row(s) are kept in memory and retried on the next call.",
        )

    def rescue(self) -> str | None:
        """Save rows the backend never took to a local temp file (else print them to
        stderr). Returns what happened, for the logger's warnings; None if nothing was held."""
        if not self.pending:
            return None
        what = f"{len(self.pending)} metric row(s) could not be written to {self.storage.url}/{METRICS_FILE}"
        if self._offset:
            what += f" (the first was cut after {self._offset} bytes; a reader skips that torn line)"
        path = None
        try:
            fd, path = tempfile.mkstemp(prefix="rllog-unwritten-", suffix=".jsonl")
            with os.fdopen(fd, "wb") as f:
                f.writelines(self.pending)
        except OSError as exc:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            sys.stderr.write(f"rllog: {what}, nor to a temp file ({exc}); here they are:\n")
            sys.stderr.write(b"".join(self.pending).decode("utf-8", "replace"))
            return f"{what}, nor to a temp file ({exc}); they were printed to stderr"
        return f"{what}; they were saved to {path}"


def _print_row(step: int, metrics: dict[str, Any]) -> None:
    parts = [f"step {step}"]
    for k in CONSOLE_KEYS:
        v = metrics.get(k)
        if v is not None:
            parts.append(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}")
    if len(parts) == 1:
        parts.extend(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(metrics.items())[:6]
        )
    print(escape_controls(" | ".join(parts)), file=sys.stderr)  # logged text is shown, never obeyed
