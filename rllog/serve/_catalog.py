"""The runs a dashboard shows: found under its roots, read through :mod:`rllog._read`, kept fresh.

A root is a run folder, a folder holding runs at any depth, a metrics file, or a bucket
URL (``gs://``, ``s3://``, ``memory://``). A run is found by its metrics file
(``metrics.jsonl``, ``<prefix>metrics.jsonl``) or a TRL ``trainer_state.json``. Each run
gets a stable id (a hash of its location); the browser only ever names runs by id, so no
request can reach a file outside the roots. Nothing here writes.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rllog._format.layout import DOCTOR_FILE, METRICS_FILE, SUPERSEDED_FILE
from rllog._read.run import Run, read_run
from rllog._read.status import run_status
from rllog._read.summary import pick_key_metrics
from rllog._svgchart import ema
from rllog.storage import Storage, open_storage

__all__ = ["Catalog", "RunEntry", "downsample"]

#: seconds between two re-reads of one local run's new bytes (requests in between share one
#: read; a look that finds nothing new costs a few stat calls and small reads)
REFRESH_EVERY = 0.1
#: ... of a bucket run (each look is a few requests)
REFRESH_BUCKET_EVERY = 0.5
#: a growing run's findings are recomputed at most this often (seconds; more for slow runs)
DOCTOR_EVERY = 10.0
#: /api/runs reads runs not read yet itself for this long (seconds), then leaves the rest to the worker
INLINE_LOAD_SECONDS = 0.3
#: ... and only runs whose metrics file is at most this big (bytes; bucket runs never)
INLINE_LOAD_BYTES = 4_000_000
#: seconds between two walks of the roots for new runs
DISCOVER_EVERY = 2.0
#: a bucket run whose marker says running but whose metrics did not grow for this long is "stalled"
STALL_SECONDS = 600.0
#: x axes a chart may use besides the step: a logged progress column, or wall time
X_WALL = "wall time"
_WALL_KEYS = ("time/total", "time/training_loop/total", "time/step", "time/iteration", "step_time")
#: smoothed full-length series kept per run (zoom requests reuse them)
_EMA_KEPT = 4
_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "checkpoints"}
_MAX_DEPTH = 8


def _is_metrics_name(name: str) -> bool:
    return (name.endswith(METRICS_FILE) and name != SUPERSEDED_FILE) or name == "trainer_state.json"


def _run_id(location: str) -> str:
    return hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def downsample(x: Any, y: Any, points: int) -> tuple[Any, Any]:
    """At most about ``points`` of ``(x, y)`` (x increasing, y finite): all of them when few
    enough, else the minimum and maximum of each of ``(points - 2) // 2`` equal-count buckets (their
    first occurrences), in x order, so spikes survive (the M4/min-max idea), plus the first
    and last points, so a line starts and ends where the run does. A few vector operations,
    whatever the length."""
    import numpy as np

    n = len(x)
    if n <= points:
        return x, y
    buckets = max(1, (points - 2) // 2)  # room for the first and last points
    starts = np.unique(np.linspace(0, n, buckets + 1).astype(np.int64)[:-1])
    bucket = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))

    def firsts(hit: Any) -> Any:  # the first index of each bucket where hit is True
        at = np.flatnonzero(hit)
        b = bucket[at]
        return at[np.concatenate(([True], b[1:] != b[:-1]))]

    lo = firsts(y == np.minimum.reduceat(y, starts)[bucket])
    hi = firsts(y == np.maximum.reduceat(y, starts)[bucket])
    idx = np.union1d(np.union1d(lo, hi), [0, n - 1])
    return x[idx], y[idx]


@dataclass
class RunEntry:
    """One run: its reader (read on first need, see :meth:`load`), what was computed from it,
    and when it last grew.

    Everything a request needs is computed from the run's columns
    (:meth:`rllog.Run.table`: one float64 array per metric, no dict per row, new bytes
    appended as they come) and cached until the rows change; the doctor runs off the
    request path (:meth:`compute_findings`, called by the catalog's worker thread).
    """

    id: str
    location: str  # the path or URL given to read_run
    name: str  # shown: the location relative to its root
    bucket: bool
    options: dict[str, Any] = field(default_factory=dict)  # storage options for read_run
    run: Run | None = None  # None until loaded
    error: str | None = None  # why the run could not be read
    checked: float = 0.0  # monotonic time of the last refresh
    grew: float = field(default_factory=time.time)  # wall time new rows were last seen
    version: int = -1  # -1 until read, then one more at each change of its rows
    _cache: dict[Any, Any] = field(default_factory=dict)  # derived from the rows; emptied when they change
    _summary: tuple[Any, dict[str, Any]] | None = None
    _findings: tuple[Any, list[dict[str, Any]]] | None = None  # (version or doctor.jsonl size, findings)
    _doctor_at: float = 0.0  # monotonic time the doctor last finished
    _doctor_took: float = 0.0  # seconds it took
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def loaded(self) -> bool:
        return self.run is not None

    def load(self) -> bool:
        """Read the run if not read yet; False if it cannot be read (:attr:`error` says why)."""
        with self.lock:
            if self.run is None and self.error is None:
                try:
                    run = read_run(self.location, **self.options)
                    run.table()  # the columns, read now (off the request path when the worker loads)
                    self.run = run
                except (OSError, ValueError) as exc:
                    self.error = f"{self.location}: not read ({type(exc).__name__}: {exc})"
                    return False
                self.version = 0
                self.checked = time.monotonic()
            return self.run is not None

    def small(self) -> bool:
        """True for a local run whose metrics file is under :data:`INLINE_LOAD_BYTES` (cheap to read in a request)."""
        if self.bucket:
            return False
        path = self.location if os.path.isfile(self.location) else os.path.join(self.location, METRICS_FILE)
        try:
            return os.path.getsize(path) <= INLINE_LOAD_BYTES
        except OSError:
            return True  # no metrics file yet: nothing to read

    def require(self) -> Run:
        """The run, read now if it was not yet.

        Raises:
            OSError: the run cannot be read (the message says why).
        """
        if not self.load():
            raise OSError(self.error)
        assert self.run is not None
        return self.run

    def refresh(self) -> None:
        """Read the run's new bytes (at most every :data:`REFRESH_EVERY` seconds, a bucket run every
        :data:`REFRESH_BUCKET_EVERY`; nothing before it is loaded, nothing while another thread
        reads or diagnoses it)."""
        if not self.lock.acquire(blocking=False):
            return
        with self.lock:
            self.lock.release()  # held once more by the with
            now = time.monotonic()
            if self.run is None or now - self.checked < (
                REFRESH_BUCKET_EVERY if self.bucket else REFRESH_EVERY
            ):
                return
            self.checked = now
            try:
                changed = self.run.refresh_table()
            except OSError:  # a bucket that does not answer: show what was read
                return
            if changed:  # rows added, merged or moved aside, a restart, the file rewritten
                self.version += 1
                self.grew = time.time()
                self._cache.clear()

    # -- metrics -------------------------------------------------------------------------
    def metric_names(self) -> list[str]:
        """Numeric metrics (some standing row holds a number), in first-logged order, the step column excluded."""
        run = self.require()
        return [k for k in run.table().numeric if k != run.step_key]

    def x_options(self) -> list[str]:
        """The x axes this run offers: its step column, ``progress/batch`` when logged, wall time."""
        names = set(self.metric_names())
        out = [self.require().step_key or "row"]
        out += [k for k in ("progress/batch",) if k in names and k != out[0]]
        if any(k in names for k in _WALL_KEYS):
            out.append(X_WALL)
        return out

    def _cached(self, key: Any, build: Callable[[], Any]) -> Any:
        with self.lock:
            if key not in self._cache:
                self._cache[key] = build()
            return self._cache[key]

    def column(self, key: str) -> Any:
        """``key``'s values on the standing rows as float64 (NaN where missing or not a number)."""
        import numpy as np

        table = self.require().table()
        if key == X_WALL:
            wall = next((k for k in _WALL_KEYS if k in self.metric_names()), None)
            if wall is None:
                return self.column("row")
            return self._cached(X_WALL, lambda: np.cumsum(np.nan_to_num(table.column(wall), nan=0.0)))
        if key in ("", "row"):
            return self._cached("row", lambda: np.arange(table.standing, dtype=float))
        return table.column(key)

    def logged_nonfinite(self, key: str) -> Any:
        """Row positions where ``key`` was logged as NaN/Infinity (a missing key is not a NaN)."""
        return self.require().table().nonfinite(key)

    def _sorted(self, key: str, x: str) -> tuple[Any, Any]:
        """The finite points of ``key`` against ``x``, in x order (cached until the rows change)."""
        import numpy as np

        def build() -> tuple[Any, Any]:
            xs, ys = self.column(x), self.column(key)
            finite = np.isfinite(ys) & np.isfinite(xs)
            ax, ay = xs[finite], ys[finite]
            if len(ax) > 1 and not bool((ax[1:] >= ax[:-1]).all()):  # the step column is in order already
                order = np.argsort(ax, kind="stable")
                ax, ay = ax[order], ay[order]
            return ax, ay

        return self._cached(("sorted", key, x), build)

    def _ema(self, key: str, x: str, smooth: float) -> Any:
        """The EMA of ``key``'s finite points in ``x`` order; the last few are kept (each is a full-length array)."""
        recent = self._cache.setdefault("ema", {})
        k = (key, x, smooth)
        if k not in recent:
            if len(recent) >= _EMA_KEPT:
                del recent[next(iter(recent))]
            recent[k] = ema(self._sorted(key, x)[1], smooth)
        return recent[k]

    def series(
        self, key: str, x: str, points: int, x0: float | None, x1: float | None, smooth: float = 0.0
    ) -> dict[str, Any]:
        """One metric against ``x``, downsampled to about ``points`` inside ``[x0, x1]``.

        Returns ``{"x", "y", "n" (finite points in range), "total", "downsampled",
        "smoothed": {"x", "y"} (empty when ``smooth`` is 0), "nonfinite": [[x,
        "NaN"|"Infinity"|"-Infinity"], ...], "superseded": {"x", "y"}, "resumes": [x, ...]}``.
        ``smooth``: the EMA weight in [0, 1) (:func:`ema`), applied to every finite point
        of the series in x order, before the range and the downsampling. The whole range
        is computed once per change of the rows; a zoomed one on each request.
        """
        x = x if x in self.x_options() else (self.require().step_key or "row")
        if x0 is None and x1 is None:
            return self._cached(
                ("series", key, x, points, smooth), lambda: self._series(key, x, points, None, None, smooth)
            )
        return self._series(key, x, points, x0, x1, smooth)

    def _series(
        self, key: str, x: str, points: int, x0: float | None, x1: float | None, smooth: float
    ) -> dict[str, Any]:
        import numpy as np

        run = self.require()
        table = run.table()
        step_key = run.step_key or "row"
        ax, ay = self._sorted(key, x)
        lo = 0 if x0 is None else int(np.searchsorted(ax, x0, side="left"))
        hi = len(ax) if x1 is None else int(np.searchsorted(ax, x1, side="right"))
        hi = max(lo, hi)
        sx, sy = ax[lo:hi], ay[lo:hi]
        dx, dy = downsample(sx, sy, points)
        smoothed: dict[str, list[float]] = {"x": [], "y": []}
        if smooth > 0 and len(ax) > 1:
            with self.lock:
                ey = self._ema(key, x, smooth)[lo:hi]
            ex, ey = downsample(sx, ey, points)
            smoothed = {"x": ex.tolist(), "y": ey.tolist()}
        bad: list[list[Any]] = []
        at = self.logged_nonfinite(key)  # row positions: on any x axis
        xs, ys = self.column(x), self.column(key)
        for sx_, sy_ in zip(xs[at].tolist(), ys[at].tolist(), strict=True):
            inside_ = (x0 is None or sx_ >= x0) and (x1 is None or sx_ <= x1)
            if math.isfinite(sx_) and inside_:
                bad.append([sx_, "NaN" if sy_ != sy_ else ("Infinity" if sy_ > 0 else "-Infinity")])
        sup_x: list[float] = []
        sup_y: list[float] = []
        resumes: list[float] = []
        if x == step_key and run.step_key:
            steps = table.superseded_rows.column(run.step_key)
            values = table.superseded_rows.column(key)
            keep = np.isfinite(steps) & np.isfinite(values)
            sup_x, sup_y = steps[keep].tolist(), values[keep].tolist()
            starts = {float(steps[np.isfinite(steps)].min())} if np.isfinite(steps).any() else set()
            aside = [(_num(r.get(run.step_key)), _num(r.get(key))) for r in run.moved_aside_rows]
            if any(math.isfinite(s) for s, _ in aside):
                starts.add(min(s for s, _ in aside if math.isfinite(s)))
            for s, v in aside:
                if math.isfinite(s) and math.isfinite(v):
                    sup_x.append(s)
                    sup_y.append(v)
            resumes = sorted(starts | {float(s) for _, s in run.restarts if isinstance(s, (int, float))})
        return {
            "key": key,
            "x": dx.tolist(),
            "y": dy.tolist(),
            "n": int(len(sx)),
            "total": int(len(ax)),
            "downsampled": len(dx) < len(sx),
            "smoothed": smoothed,
            "nonfinite": bad,
            "superseded": {"x": sup_x, "y": sup_y},
            "resumes": resumes,
        }

    # -- the doctor ----------------------------------------------------------------------
    def findings(self) -> list[dict[str, Any]] | None:
        """The doctor's findings as last computed (None before the first computation); never computes."""
        found = self._findings
        return None if found is None else found[1]

    def doctor_due(self) -> bool:
        """True when the findings are missing or older than the rows, and the doctor has rested
        long enough: a growing run is checked again at most every ``max(10 s, 5 x`` the last
        check's time``)``, so a live 100k-row run is not re-diagnosed on every poll."""
        if self.run is None or self.error is not None:
            return False
        if self._findings is None:
            return True
        if self._findings[0] == self._doctor_key():
            return False
        return time.monotonic() - self._doctor_at >= max(DOCTOR_EVERY, 5 * self._doctor_took)

    def _doctor_key(self) -> Any:
        run = self.run
        assert run is not None
        if run.metrics_name == METRICS_FILE:
            try:
                if run.storage.exists(DOCTOR_FILE):
                    return ("file", run.storage.size(DOCTOR_FILE))
            except OSError:
                pass
        return ("rows", self.version)

    def compute_findings(self) -> list[dict[str, Any]]:
        """Compute the findings now: the live doctor's ``doctor.jsonl`` when the run has one (its
        findings, as the writer saw them), else the stability doctor's rules
        (:class:`rllog._format.rules.RuleEngine`, the engine :func:`rllog.doctor.diagnose`
        uses) fed column by column from the cached columns: metrics no rule watches are
        fed only their logged NaN/Inf cells, so no pandas table of every row is built."""
        run = self.require()
        key = self._doctor_key()
        started = time.monotonic()
        try:
            if key[0] == "file":
                from rllog._format.jsonl import parse_lines

                rows, _ = parse_lines(run.storage.read(DOCTOR_FILE), DOCTOR_FILE)
                found = [row for _, row in rows if isinstance(row.get("check"), str)]
            else:
                found = self._diagnose_columns()
        except Exception as exc:  # a doctor failure must not take the dashboard down
            found = [{"check": "doctor_failed", "severity": "info", "metric": "", "steps": [],
                      "value": "NaN", "threshold": "", "message": f"the doctor failed: {exc}", "advice": ""}]  # fmt: skip
        with self.lock:
            self._findings = (key, found)
            self._doctor_at = time.monotonic()
            self._doctor_took = self._doctor_at - started
            self._summary = None
        return found

    def _diagnose_columns(self) -> list[dict[str, Any]]:
        import numpy as np

        from rllog._format.rules import RuleEngine, watched

        run = self.require()
        engine = RuleEngine()
        if run.step_key:
            steps = self.column(run.step_key)
            pos = np.arange(len(steps), dtype=float)
            steps = np.where(np.isfinite(steps), steps, pos).astype(np.int64)
        else:
            steps = np.arange(run.table().standing, dtype=np.int64)
        for k in self.metric_names():
            ys = self.column(k)
            bad = self.logged_nonfinite(k)
            if watched(k):
                at = np.union1d(np.flatnonzero(np.isfinite(ys)), bad)
            else:
                at = bad
            feed = engine.feed_value
            for s, v in zip(steps[at].tolist(), ys[at].tolist(), strict=True):
                feed(k, s, v)
        engine.finish()
        return [f.to_dict() for f in engine.findings()]

    # -- the runs table ------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        run = self.run
        if run is None:
            return {"state": "loading" if self.error is None else "unreadable", "resumes": 0, "live": None,
                    "started_at": None, "first_started_at": None, "ended_at": None, "host": None, "pid": None}  # fmt: skip
        st = run_status(run.storage) if run.metrics_name == METRICS_FILE else {
            "state": "unknown", "resumes": 0, "live": None, "started_at": None,
            "first_started_at": None, "ended_at": None, "host": None, "pid": None}  # fmt: skip
        if st["state"] == "running" and self.bucket and time.time() - self.grew > STALL_SECONDS:
            st["state"] = "stalled"
        if st["resumes"] == 0:  # restarts appended to one metrics file (counted when its columns were read)
            st["resumes"] = len(run.restarts)
        return st

    def summary(self) -> dict[str, Any]:
        """The runs table row: status, times, steps, last/best of the key metrics, doctor counts, config.

        Everything but the status is cached until new rows arrive or the doctor reports;
        a run not read yet gives a row with ``"loading": true`` and no values.
        """
        if not self.lock.acquire(timeout=0.05):  # being read or diagnosed: answer with what is known
            cached = self._summary
            body = cached[1] if cached is not None else self._loading_row()
        else:
            try:
                if self.run is None:
                    body = self._loading_row()
                else:
                    stamp = (self.version, self._findings[0] if self._findings else None)
                    if self._summary is None or self._summary[0] != stamp:
                        self._summary = (stamp, self._summarize())
                    body = self._summary[1]
            finally:
                self.lock.release()
        status = self.status()
        if body.get("duration") is None and not body.get("loading"):
            body = {**body, "duration": self._marker_duration(status)}
        return {"id": self.id, "name": self.name, "url": self.location, "status": status, **body}

    def _marker_duration(self, status: dict[str, Any]) -> float | None:
        """Seconds from the first start in ``run_status.json`` to its end: ``ended_at`` when
        closed, now while running, the metrics file's last change for a crashed local run."""
        from datetime import datetime

        def seconds(text: Any) -> float | None:
            try:
                return datetime.fromisoformat(text).timestamp() if isinstance(text, str) else None
            except ValueError:
                return None

        start = seconds(status.get("first_started_at") or status.get("started_at"))
        end = seconds(status.get("ended_at"))
        if start is None:
            return None
        if end is None and status.get("state") in ("running", "stalled"):
            end = time.time()
        elif end is None and not self.bucket and self.run is not None:
            try:
                end = os.path.getmtime(os.path.join(self.location, self.run.metrics_name))
            except OSError:
                return None
        return max(0.0, end - start) if end is not None else None

    def _loading_row(self) -> dict[str, Any]:
        body: dict[str, Any] = {"rows": None, "version": self.version, "first_step": None, "last_step": None,
                "duration": None, "metrics": {}, "config": {}, "iterations": None, "loading": True,
                "doctor": {"error": 0, "warning": 0, "info": 0, "pending": self.error is None}}  # fmt: skip
        if self.error:
            body["error"] = self.error
        return body

    def _summarize(self) -> dict[str, Any]:
        import numpy as np

        run = self.require()
        table = run.table()
        step_key = run.step_key
        steps = self.column(step_key) if step_key else np.empty(0)
        steps = steps[np.isfinite(steps)]
        numeric = table.numeric
        # the page picks 6; a column holding a number is one whose last value is a number
        keys = pick_key_metrics(numeric, step_key, lambda ks: set(ks) & set(numeric), limit=12)
        metrics = {}
        for k in keys:
            col = self.column(k)
            fin = col[np.isfinite(col)]
            if len(fin):
                metrics[k] = {"last": float(fin[-1]), "min": float(fin.min()), "max": float(fin.max())}
        found = self.findings()
        counts: dict[str, Any] = {"error": 0, "warning": 0, "info": 0, "pending": found is None}
        for f in found or []:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
        return {
            "rows": table.standing,
            "version": self.version,
            "first_step": _int_or_float(steps.min()) if len(steps) else None,
            "last_step": _int_or_float(steps.max()) if len(steps) else None,
            "duration": float(self.column(X_WALL)[-1])
            if X_WALL in self.x_options() and table.standing
            else None,
            "metrics": metrics,
            "doctor": counts,
            "config": _flat(run.config or {}),
            "iterations": len(run.iterations),
            "loading": False,
        }


def _int_or_float(v: Any) -> int | float:
    f = float(v)
    return int(f) if f.is_integer() else f


def _num(v: Any) -> float:
    return float(v) if type(v) in (int, float) else math.nan


def _flat(config: Any, prefix: str = "") -> dict[str, str]:
    """Config as ``{dotted.key: short text}`` (for table columns and filters)."""
    from rllog._format.codec import encode_json

    if isinstance(config, dict):
        out: dict[str, str] = {}
        for k, v in config.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    text = config if isinstance(config, str) else encode_json(config).decode("utf-8", "replace")
    return {prefix[:-1] or "(config)": text[:200]}


class Catalog:
    """The runs under ``roots``, found again every :data:`DISCOVER_EVERY` seconds.

    Finding a run does not read it: :meth:`runs` reads runs not read yet for at most
    :data:`INLINE_LOAD_SECONDS`, and a worker thread (started by the first :meth:`runs`,
    stopped by :meth:`close`) reads the others and runs the doctor, so the runs table of
    200 runs or of one 200 MB run answers at once and fills in as runs are read.

    Raises (at construction):
        FileNotFoundError: a local root does not exist.
    """

    def __init__(self, roots: list[str], storage_options: dict[str, Any] | None = None) -> None:
        self.roots = []
        for root in roots:
            if "://" not in root:
                path = os.path.realpath(os.path.expanduser(root))
                if not os.path.exists(path):
                    raise FileNotFoundError(f"rllog serve: no such folder or file: {root}")
                root = path
            self.roots.append(root.rstrip("/") or "/")
        self._options = storage_options or {}
        self._runs: dict[str, RunEntry] = {}
        self._found_at = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self.problems: list[str] = []

    def runs(self) -> list[RunEntry]:
        """Every run found so far (looks for new ones when the last look is old)."""
        entries = self._look()
        deadline = time.monotonic() + INLINE_LOAD_SECONDS
        for e in entries:
            if time.monotonic() >= deadline:
                break
            if not e.loaded and e.error is None and e.small() and e.lock.acquire(blocking=False):
                try:  # the worker may be reading this one: never wait for it here
                    self._load(e)
                finally:
                    e.lock.release()
        return entries

    def _look(self) -> list[RunEntry]:
        """The runs found, looked for again when the last look is older than :data:`DISCOVER_EVERY`."""
        with self._lock:
            if time.monotonic() - self._found_at >= DISCOVER_EVERY:
                self._discover()
                self._found_at = time.monotonic()
            if self._worker is None and not self._stop.is_set():
                self._worker = threading.Thread(target=self._work, name="rllog-serve-worker", daemon=True)
                self._worker.start()
            return list(self._runs.values())

    def get(self, run_id: str) -> RunEntry | None:
        """The run with this id, read and refreshed; None if there is none (or it was deleted)."""
        self._look()
        entry = self._runs.get(run_id)
        if entry is not None and not entry.bucket and not os.path.exists(entry.location):
            with self._lock:  # deleted since the last look: never serve its cached rows
                self._runs.pop(run_id, None)
            return None
        if entry is not None:
            self._load(entry)
            entry.refresh()
        return entry

    def close(self) -> None:
        """Stop the worker thread (idempotent; waits at most 5 s for it)."""
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=5)

    def _load(self, entry: RunEntry) -> None:
        if not entry.load() and entry.error and entry.error not in self.problems:
            self.problems.append(entry.error)

    def _work(self) -> None:
        """Read the runs not read yet (in the order found), then keep their findings current."""
        while not self._stop.is_set():
            busy = False
            for e in list(self._runs.values()):
                if self._stop.is_set():
                    return
                if not e.loaded and e.error is None:
                    self._load(e)
                    if e.loaded:
                        e.summary()  # warm: the next /api/runs finds it computed
                    busy = True
                    break  # a run read: look again, a request may be waiting for another
            else:
                for e in list(self._runs.values()):
                    if self._stop.is_set():
                        return
                    if e.doctor_due():
                        e.compute_findings()
                        busy = True
            if not busy:
                self._stop.wait(0.25)

    def _discover(self) -> None:
        """Add the runs found under the roots; drop the runs no longer there (deleted: their
        cached rows are not served again) unless their root could not be listed."""
        seen: set[str] = set()
        unlisted: list[str] = []
        for root in self.roots:
            try:
                found = self._bucket_runs(root) if "://" in root else self._local_runs(root)
            except OSError as exc:
                msg = f"{root}: {exc}"
                if msg not in self.problems:
                    self.problems.append(msg)
                unlisted.append(root)
                continue
            for location, name in found:
                rid = _run_id(location)
                seen.add(rid)
                if rid not in self._runs:
                    bucket = "://" in location
                    self._runs[rid] = RunEntry(rid, location, name, bucket, self._options if bucket else {})
        for rid, entry in list(self._runs.items()):
            if rid not in seen and not any(entry.location.startswith(r) for r in unlisted):
                del self._runs[rid]

    def _local_runs(self, root: str) -> list[tuple[str, str]]:
        if os.path.isfile(root):
            return [(root, os.path.basename(root))]
        out = []
        base = os.path.basename(root) or root
        for folder, dirs, files in os.walk(root):  # does not follow symlinked folders
            depth = folder[len(root) :].count(os.sep)
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and depth < _MAX_DEPTH)
            rel = os.path.relpath(folder, root)
            label = base if rel == "." else f"{base}/{rel}"
            for f in sorted(files):
                if not _is_metrics_name(f) or os.path.islink(os.path.join(folder, f)):
                    continue
                if f == METRICS_FILE:
                    out.append((folder, label))
                else:
                    out.append((os.path.join(folder, f), f"{label}/{f}"))
        return out

    def _bucket_runs(self, root: str) -> list[tuple[str, str]]:
        storage: Storage = open_storage(root, mode="r", **self._options)
        try:
            names = storage.list()
        finally:
            storage.close()
        out = []
        base = root.rsplit("/", 1)[-1] or root
        for name in sorted(names):
            folder, _, f = name.rpartition("/")
            if not _is_metrics_name(f) or folder.count("/") >= _MAX_DEPTH:
                continue
            label = f"{base}/{folder}" if folder else base
            where = f"{root}/{folder}" if folder else root
            out.append((where, label) if f == METRICS_FILE else (f"{where}/{f}", f"{label}/{f}"))
        return out


_NUMBER = re.compile(r"[<>]=?\s*(-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def threshold_value(text: str) -> float | None:
    """The number in a doctor finding's threshold text (``"> 2.0 for 3 steps"`` gives 2.0), else None."""
    m = _NUMBER.search(text or "")
    return float(m.group(1)) if m else None
