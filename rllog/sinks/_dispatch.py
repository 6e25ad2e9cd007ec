"""The sink dispatcher: one background thread feeds every sink from one bounded queue.

The training thread only appends to a ``collections.deque`` (``put_row``: a length check
and an append, ~0.1 us); it never waits on a sink, never signals a condition. The
worker wakes every ``poll_interval`` seconds (or at once on ``flush``/``close``),
decodes each queued metrics row once and hands it to every enabled sink in order.

What a sink does not receive is always counted and said:

- queue full (a sink slower than the loop): the row is dropped from the queue (every
  sink misses it), counted, and warned about once with the queue size and the slowest
  sink; metrics.jsonl has the row regardless.
- a sink that raises: the call is retried (tenacity, ``retries`` attempts with
  exponential backoff); if it still fails the sink is disabled with one warning naming
  it, the error and the consequence, and every later item is counted as missed by it.
  ``SystemExit`` (a tracker library calling ``sys.exit()``) counts as a failure too: on
  this thread it would end the thread, and with it every other sink and the live doctor.
- ``close(timeout)``: waits at most ``timeout`` seconds for the queue to drain and the
  sinks to close, then says per sink how many rows it did not receive and why.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import tenacity

from rllog._format.codec import decode_json, encode_json
from rllog._format.layout import TRACKERS_FILE
from rllog.storage import Storage

__all__ = ["Dispatcher", "SinkRun"]

# queue item kinds besides a sink method's name ("log_config", "log_checkpoint", "log_report", "log_rollouts")
ROW, CALL, STOP = 0, 1, 2
_METHODS = frozenset({"log_config", "log_checkpoint", "log_report", "log_rollouts"})


@dataclass
class SinkRun:
    """What a sink is told about the run when it opens (on the background thread).

    Attributes:
        log_path: the run's folder or URL.
        storage: the run's storage (a sink may append its own files, e.g. TensorBoard).
        name: a display name for the run (the last part of ``log_path``).
        resume: the logger was opened with ``resume=True``.
        resume_step: the step training resumes from (the checkpoint's batch), or None.
        state: what this sink stored in ``trackers.json`` last time (its run id...), ``{}``
            for a new run or when not resuming.
        config: the redacted config dict given at construction, or None.
        save_state: ``save_state(name, state)`` writes a sink's resume state to
            ``trackers.json`` now (set by the dispatcher; a sink calls it, on the sink
            thread, when what it must never reuse after a kill -9 moves on).
    """

    log_path: str
    storage: Storage
    name: str
    resume: bool = False
    resume_step: int | None = None
    state: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    save_state: Callable[[str, dict[str, Any]], None] | None = None


def _renamed(
    row: dict[str, Any], reserved: tuple[str, ...], sink: str, warn: Callable[[str, str], None]
) -> dict[str, Any]:
    """``row`` with each key the tracker keeps for itself (wandb's ``_step``...) sent as
    ``rllog/<key>`` instead, so the tracker neither drops nor overwrites it; warned once
    per sink and key."""
    clash = [k for k in reserved if k in row]
    if not clash:
        return row
    for k in clash:
        warn(
            f"sinks:reserved:{sink}:{k}",
            f"{sink} keeps the key {k!r} for itself; rllog sends your {k!r} to {sink} as 'rllog/{k}' "
            "(metrics.jsonl keeps it as logged)",
        )
    return {(f"rllog/{k}" if k in clash else k): v for k, v in row.items()}


class _Stats:
    __slots__ = ("rows", "missed_error", "seconds", "calls", "disabled", "error")

    def __init__(self) -> None:
        self.rows = 0  # rows delivered
        self.missed_error = 0  # rows not delivered because the sink failed or was disabled
        self.seconds = 0.0  # time spent in the sink's calls
        self.calls = 0
        self.disabled = False
        self.error: str | None = None


class Dispatcher:
    """Feeds ``sinks`` from one background thread (see the module docstring).

    Args:
        sinks: opened sink objects (see :class:`rllog.sinks.Sink`).
        run: what the sinks are told at open.
        warn: ``warn(kind, message)``, once per kind (the logger's notes).
        queue_size: rows (and other items) the queue holds before dropping rows.
        retries: attempts per sink call before the sink is disabled.
        doctor: a :class:`rllog._format.rules.RuleEngine` fed with every row, or None.
        on_finding: called with each new finding (a dict) on the background thread.
        findings_file: the run file each new finding is appended to (doctor.jsonl).
        replay: ``(file, size)``: on a resume, the first ``size`` bytes of the run's
            metrics file are fed to the doctor first, silently (their findings were
            announced by the earlier process), so its rules see the whole run.
        poll_interval: seconds the idle worker sleeps between looks at the queue.
    """

    def __init__(
        self,
        sinks: list[Any],
        run: SinkRun,
        *,
        warn: Callable[[str, str], None],
        queue_size: int = 10_000,
        retries: int = 3,
        retry_wait: float = 0.2,
        doctor: Any = None,
        on_finding: Callable[[dict[str, Any]], Any] | None = None,
        findings_file: str | None = None,
        replay: tuple[str, int] | None = None,
        poll_interval: float = 0.05,
    ) -> None:
        if queue_size < 1:
            raise ValueError(f"sink queue_size must be >= 1, got {queue_size}")
        self.sinks = sinks
        self.run = run
        run.save_state = self._save_one
        self._warn = warn
        self._cap = queue_size
        self._queue: collections.deque[tuple[int | str, Any]] = collections.deque()
        self._stats = {s.name: _Stats() for s in sinks}
        self.dropped = 0  # rows dropped because the queue was full (no sink got them)
        self.rows_in = 0  # rows handed to put_row
        self._retries = max(1, retries)
        self._retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, retries)),
            wait=tenacity.wait_exponential(multiplier=retry_wait, max=5 * retry_wait),
            reraise=True,
        )
        self._doctor = doctor
        self._on_finding = on_finding
        self._findings_file = findings_file
        self.findings: list[dict[str, Any]] = []  # every finding the live doctor announced, in order
        #: at close: every finding with its full step ranges (None without the doctor)
        self.final_findings: list[dict[str, Any]] | None = None
        self._replay = replay
        self._metrics_file = replay[0] if replay is not None else None
        self._last_step: Any = None  # the highest step fed to the doctor
        self._went_back = False  # a step came again: the run may hold a restart (see _standing_findings)
        self._poll = poll_interval
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._work, name="rllog-sinks", daemon=True)
        self._thread.start()

    # -- the training thread's side ---------------------------------------------------

    def put_row(self, row: bytes) -> None:
        """Queue one encoded metrics row (``b'{"step":3,...}\\n'``); never blocks."""
        self.rows_in += 1
        if len(self._queue) < self._cap:
            self._queue.append((ROW, row))
        else:
            self.dropped += 1
            if self.dropped == 1:
                self._warn("sinks:full", self._full_message())

    def put(self, method: str, payload: Any) -> None:
        """Queue a call of every sink's ``method`` (``"log_config"``, ``"log_checkpoint"``,
        ``"log_report"``, ``"log_rollouts"``) with ``payload``; never dropped (they are few).

        Raises:
            ValueError: an unknown method.
        """
        if method not in _METHODS:
            raise ValueError(f"unknown sink method {method!r}; expected one of {sorted(_METHODS)}")
        self._queue.append((method, payload))

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued before this call reached the sinks (or ``timeout``
        seconds passed); True when it did."""
        if not self._thread.is_alive():
            return not self._queue
        done = threading.Event()
        self._queue.append((CALL, done.set))
        self._wake.set()
        return done.wait(timeout)

    def close(self, timeout: float) -> list[str]:
        """Drain the queue and close every sink, waiting at most ``timeout`` seconds.
        Returns one message per sink that did not receive every row (empty when all did)."""
        if not self._stopped:
            self._stopped = True
            self._queue.append((STOP, None))
            self._wake.set()
            self._thread.join(timeout)
        left = sum(1 for kind, _ in list(self._queue) if kind == ROW)
        timed_out = self._thread.is_alive()
        out = []
        for sink in self.sinks:
            st = self._stats[sink.name]
            missed = self.dropped + st.missed_error + left
            if not missed and not (timed_out and not st.disabled):
                continue
            parts = []
            if self.dropped:
                parts.append(f"{self.dropped} dropped because the sink queue ({self._cap} items) was full")
            if st.missed_error:
                parts.append(f"{st.missed_error} not sent after it failed ({st.error})")
            if left:
                parts.append(f"{left} still queued when close gave up after {timeout:g} s")
            elif timed_out:
                parts.append(f"it had not finished closing after {timeout:g} s")
            out.append(
                f"sink {sink.name} received {st.rows} of {self.rows_in} metric rows: "
                + "; ".join(parts)
                + f". metrics.jsonl in {self.run.log_path} has every row."
            )
        return out

    def _full_message(self) -> str:
        slow = max(self._stats.items(), key=lambda kv: kv[1].seconds / max(1, kv[1].calls), default=None)
        which = ""
        if slow is not None and slow[1].calls:
            which = f" (slowest: {slow[0]}, {1000 * slow[1].seconds / slow[1].calls:.1f} ms per call)"
        return (
            f"the sink queue is full ({self._cap} items): the sinks are slower than the training loop{which}. "
            "Rows are dropped from the sinks (counted, and listed at close); metrics.jsonl keeps every row. "
            "Log less often or pass a larger sink_queue_size."
        )

    # -- the background thread -------------------------------------------------------

    def _work(self) -> None:
        self._open_all()
        if self._doctor is not None and self._replay is not None:
            self._replay_rows(*self._replay)
        queue = self._queue
        busy = False
        while True:
            if not queue:
                if busy:
                    busy = False
                    for sink in self.sinks:
                        if hasattr(sink, "idle"):
                            self._call(sink, "idle")
                self._wake.wait(self._poll)
                self._wake.clear()
                continue
            busy = True
            kind, payload = queue.popleft()
            if kind == STOP:
                break
            try:
                self._handle(kind, payload)
            except BaseException as exc:  # a decoding bug or a sys.exit() must not stop the thread
                self._warn("sinks:internal", f"the sink thread skipped an item: {type(exc).__name__}: {exc}")
        if self._doctor is not None:
            self._findings(self._doctor.finish())
            self.final_findings = [f.to_dict() for f in self._doctor.findings()]
            if self._went_back and self._metrics_file is not None:
                self._standing_findings(self._metrics_file)
        self._save_state()
        for sink in self.sinks:
            self._call(sink, "close")

    def _save_state(self) -> None:
        """Rewrite trackers.json with what sinks that have a ``state()`` method say now."""
        new = {}
        for sink in self.sinks:
            if hasattr(sink, "state") and not self._stats[sink.name].disabled:
                try:
                    new[sink.name] = sink.state()
                except BaseException:
                    continue
        if not new:
            return
        storage = self.run.storage
        try:
            old = decode_json(storage.read(TRACKERS_FILE)) if storage.exists(TRACKERS_FILE) else {}
            storage.write(TRACKERS_FILE, encode_json({**old, **new}, indent=2) + b"\n")
        except (OSError, ValueError) as exc:
            self._warn(
                "sinks:state",
                f"could not write {TRACKERS_FILE} ({exc}); a resume may start tracker steps over",
            )

    def _save_one(self, name: str, state: dict[str, Any]) -> None:
        """Write one sink's state into trackers.json (read, merge, write)."""
        storage = self.run.storage
        try:
            old = decode_json(storage.read(TRACKERS_FILE)) if storage.exists(TRACKERS_FILE) else {}
            storage.write(TRACKERS_FILE, encode_json({**old, name: state}, indent=2) + b"\n")
        except (OSError, ValueError) as exc:
            self._warn(
                "sinks:state",
                f"could not write {TRACKERS_FILE} ({exc}); a resume may start tracker steps over",
            )

    def _standing_findings(self, name: str) -> None:
        """A step came again during the run: if that was a restart (rllog/_format/rows.py),
        the rows it replaced no longer stand, and ``rllog doctor`` does not see them. The
        final findings are then the rules run again on the standing rows of the run's
        metrics file (read once, at close), so doctor.jsonl says what ``rllog doctor`` says;
        what fired live on the replaced rows was announced when it fired."""
        from rllog._format.jsonl import iter_lines
        from rllog._format.rows import StepResolver

        try:
            data = self.run.storage.read(name)
        except OSError as exc:
            self._warn(
                "doctor:restart",
                f"could not re-read {name} after a restart ({exc}); doctor.jsonl keeps every live finding",
            )
            return
        resolver = StepResolver("step")
        for line, raw in iter_lines(data):
            try:
                row = decode_json(raw)
            except ValueError:
                continue
            if isinstance(row, dict):
                resolver.add(line, row)
        if not resolver.restarts:
            return
        engine = type(self._doctor)(self._doctor.t)
        for row in resolver.kept:
            row = dict(row)
            engine.feed_row(row.pop("step"), row)
        engine.finish()
        self.final_findings = [f.to_dict() for f in engine.findings()]

    def _replay_rows(self, name: str, size: int) -> None:
        from rllog._format.jsonl import iter_lines

        try:
            data = self.run.storage.read_range(name, 0, size) if size else b""
        except OSError as exc:
            self._warn(
                "doctor:replay",
                f"the live doctor could not read the rows before the resume ({exc}); it checks the new rows only",
            )
            return
        for _, line in iter_lines(data):
            try:
                row = decode_json(line)
                step = row.pop("step")
            except (ValueError, KeyError, AttributeError):
                continue
            self._doctor.feed_row(step, row)
            if self._last_step is None or step > self._last_step:
                self._last_step = step
            else:
                self._went_back = True

    def _handle(self, kind: int | str, payload: Any) -> None:
        if kind == CALL:
            payload()
            return
        if kind == ROW:
            row = decode_json(payload)
            step = row.pop("step")
            for sink in self.sinks:
                reserved = getattr(sink, "reserved_keys", ())
                sent = _renamed(row, reserved, sink.name, self._warn) if reserved else row
                if self._call(sink, "log_metrics", step, sent):
                    self._stats[sink.name].rows += 1
            if self._doctor is not None:
                if self._last_step is not None and step <= self._last_step:
                    self._went_back = True
                else:
                    self._last_step = step
                self._findings([f.to_dict() for f in self._doctor.feed_row(step, row)])
            return
        if kind == "log_report":
            try:
                payload = {
                    **payload,
                    "content": self.run.storage.read(payload["html"]).decode("utf-8", "replace"),
                }
            except OSError as exc:
                self._warn(
                    "sinks:report",
                    f"could not read {payload['html']} for the trackers ({exc}); they get its link without its HTML",
                )
                payload = {**payload, "content": ""}
        elif kind == "log_rollouts":
            from rllog._format.jsonl import iter_lines

            records = [decode_json(line) for _, line in iter_lines(payload.pop("data"))]
            payload = {**payload, "records": records}
        for sink in self.sinks:
            self._call(sink, str(kind), payload)

    def _findings(self, new: list[Any]) -> None:
        for finding in new:
            if not isinstance(finding, dict):
                finding = finding.to_dict()
            self.findings.append(finding)
            self._warn(
                f"doctor:{finding['check']}:{finding['metric']}",
                f"doctor ({finding['severity']}): {finding['message']}. {finding['advice']}",
            )
            if self._findings_file is not None:
                try:
                    self.run.storage.append(self._findings_file, encode_json(finding) + b"\n")
                except OSError as exc:
                    self._warn("doctor:file", f"could not append to {self._findings_file}: {exc}")
            for sink in self.sinks:
                self._call(sink, "log_finding", finding)
            if self._on_finding is not None:
                try:
                    self._on_finding(finding)
                except BaseException as exc:  # SystemExit too: it would end the sink thread
                    self._warn("doctor:callback", f"on_finding raised {type(exc).__name__}: {exc}")

    def _open_all(self) -> None:
        state: dict[str, Any] = {}
        storage = self.run.storage
        try:
            if storage.exists(TRACKERS_FILE):
                state = decode_json(storage.read(TRACKERS_FILE))
        except (OSError, ValueError) as exc:
            self._warn("sinks:state", f"could not read {TRACKERS_FILE} ({exc}); trackers start new runs")
        saved = dict(state)
        for sink in self.sinks:
            self.run.state = dict(state.get(sink.name, {})) if self.run.resume else {}
            try:
                new = self._retrying(sink.open, self.run)
            except BaseException as exc:
                self._disable(sink, "open", exc)
                continue
            if new:
                saved[sink.name] = new
        if saved != state:
            try:
                storage.write(TRACKERS_FILE, encode_json(saved, indent=2) + b"\n")
            except OSError as exc:
                self._warn(
                    "sinks:state",
                    f"could not write {TRACKERS_FILE} ({exc}); a resume starts new tracker runs",
                )

    def _call(self, sink: Any, method: str, *args: Any) -> bool:
        st = self._stats[sink.name]
        if st.disabled:
            if method == "log_metrics":
                st.missed_error += 1
            return False
        t0 = time.perf_counter()
        try:
            self._retrying(getattr(sink, method), *args)
        except BaseException as exc:  # SystemExit too: it would end the sink thread
            self._disable(sink, method, exc)
            if method == "log_metrics":
                st.missed_error += 1
            return False
        finally:
            st.seconds += time.perf_counter() - t0
            st.calls += 1
        return True

    def _disable(self, sink: Any, method: str, exc: BaseException) -> None:
        st = self._stats[sink.name]
        st.disabled = True
        st.error = f"{method} raised {type(exc).__name__}: {exc}"
        self._warn(
            f"sink:{sink.name}",
            f"sink {sink.name} failed ({st.error}) after {self._retries} attempt(s) "
            f"and is disabled: it receives nothing more from this run. Training goes on; metrics.jsonl "
            f"in {self.run.log_path} keeps every row, and close() says how many rows {sink.name} missed.",
        )
