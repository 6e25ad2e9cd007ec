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
from dataclasses import dataclass, field
from typing import Any

from rllog._format.layout import METRICS_FILE, SUPERSEDED_FILE
from rllog._format.rows import nonfinite_cells
from rllog._read.run import Run, read_run
from rllog._read.status import run_status
from rllog._read.summary import columns, key_metrics
from rllog.storage import Storage, open_storage

__all__ = ["Catalog", "RunEntry", "downsample"]

#: seconds between two re-reads of one run's new bytes (requests in between share one read)
REFRESH_EVERY = 0.5
#: seconds between two walks of the roots for new runs
DISCOVER_EVERY = 2.0
#: a bucket run whose marker says running but whose metrics did not grow for this long is "stalled"
STALL_SECONDS = 600.0
#: x axes a chart may use besides the step: a logged progress column, or wall time
X_WALL = "wall time"
_WALL_KEYS = ("time/total", "time/training_loop/total", "time/step", "time/iteration", "step_time")
_SKIP_DIRS = {".git", "__pycache__", "node_modules", ".venv", "checkpoints"}
_MAX_DEPTH = 8


def _is_metrics_name(name: str) -> bool:
    return (name.endswith(METRICS_FILE) and name != SUPERSEDED_FILE) or name == "trainer_state.json"


def _run_id(location: str) -> str:
    return hashlib.sha256(location.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def downsample(x: Any, y: Any, points: int) -> tuple[Any, Any]:
    """At most about ``points`` of ``(x, y)`` (x increasing): all of them when few enough,
    else the minimum and maximum of each of ``points // 2`` equal-count buckets, in x order,
    so spikes survive (the M4/min-max idea)."""
    import numpy as np

    n = len(x)
    if n <= points:
        return x, y
    buckets = max(1, points // 2)
    edges = np.linspace(0, n, buckets + 1).astype(np.int64)
    keep = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        if b <= a:
            continue
        seg = y[a:b]
        i, j = a + int(np.argmin(seg)), a + int(np.argmax(seg))
        keep += [i, j] if i <= j else [j, i]
    idx = np.unique(np.asarray(keep, dtype=np.int64))
    return x[idx], y[idx]


@dataclass
class RunEntry:
    """One run: its reader, what was computed from it, and when it last grew."""

    id: str
    location: str  # the path or URL given to read_run
    name: str  # shown: the location relative to its root
    run: Run
    bucket: bool
    checked: float = 0.0  # monotonic time of the last refresh
    grew: float = field(default_factory=time.time)  # wall time new rows were last seen
    version: int = -1
    _columns: dict[str, Any] = field(default_factory=dict)
    _findings: tuple[int, list[dict[str, Any]]] | None = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    def refresh(self) -> None:
        """Read the run's new bytes (at most every :data:`REFRESH_EVERY` seconds)."""
        with self.lock:
            now = time.monotonic()
            if now - self.checked < REFRESH_EVERY:
                return
            self.checked = now
            before = self.run.rows_read
            try:
                self.run.refresh()
            except OSError:  # a bucket that does not answer: show what was read
                return
            if self.run.rows_read != before or self.version < 0:
                self.version = self.run.rows_read
                self.grew = time.time() if self.version != before else self.grew
                self._columns.clear()

    # -- metrics -------------------------------------------------------------------------
    def metric_names(self) -> list[str]:
        """Numeric metrics (a value of any row is a number), in first-logged order, the step column excluded."""
        with self.lock:
            if "\0names" not in self._columns:  # cached until new rows arrive
                rows = self.run.rows
                numeric: set[str] = set()
                for row in rows:
                    numeric.update(k for k, v in row.items() if type(v) in (int, float))
                cols = columns(rows)
                self._columns["\0names"] = [c for c in cols if c in numeric and c != self.run.step_key]
            return list(self._columns["\0names"])

    def x_options(self) -> list[str]:
        """The x axes this run offers: its step column, ``progress/batch`` when logged, wall time."""
        names = set(self.metric_names())
        out = [self.run.step_key or "row"]
        out += [k for k in ("progress/batch",) if k in names and k != out[0]]
        if any(k in names for k in _WALL_KEYS):
            out.append(X_WALL)
        return out

    def column(self, key: str) -> Any:
        """``key``'s values on the standing rows as float64 (NaN where missing or not a number)."""
        import numpy as np

        with self.lock:
            if key not in self._columns:
                if key == X_WALL:
                    wall = next((k for k in _WALL_KEYS if k in self.metric_names()), None)
                    per = np.nan_to_num(self.column(wall), nan=0.0) if wall else None
                    self._columns[key] = np.cumsum(per) if per is not None else self.column("")
                elif key in ("", "row"):
                    self._columns[key] = np.arange(len(self.run.rows), dtype=float)
                else:
                    self._columns[key] = np.fromiter(
                        (_num(row.get(key)) for row in self.run.rows), dtype=float
                    )
            return self._columns[key]

    def series(self, key: str, x: str, points: int, x0: float | None, x1: float | None) -> dict[str, Any]:
        """One metric against ``x``, downsampled to about ``points`` inside ``[x0, x1]``.

        Returns ``{"x", "y", "n" (finite points in range), "total", "downsampled",
        "nonfinite": [[x, "NaN"|"Infinity"|"-Infinity"], ...], "superseded": {"x", "y"},
        "resumes": [x, ...]}``.
        """
        import numpy as np

        step_key = self.run.step_key or "row"
        xs = self.column(step_key if x not in self.x_options() else x)
        ys = self.column(key)
        finite = np.isfinite(ys) & np.isfinite(xs)
        inside = finite.copy()
        if x0 is not None:
            inside &= xs >= x0
        if x1 is not None:
            inside &= xs <= x1
        order = np.argsort(xs[inside], kind="stable")
        sx, sy = xs[inside][order], ys[inside][order]
        dx, dy = downsample(sx, sy, points)
        bad: list[list[Any]] = []
        if x == step_key and self.run.step_key:
            with self.lock:
                if "\0nonfinite" not in self._columns:  # cached until new rows arrive
                    self._columns["\0nonfinite"] = nonfinite_cells(self.run.rows, step_key=self.run.step_key)
                logged = self._columns["\0nonfinite"].get(key, [])
            mask = np.isin(xs, np.asarray(logged, dtype=float)) & ~np.isfinite(ys)
            for sx_, sy_ in zip(xs[mask].tolist(), ys[mask].tolist(), strict=True):
                bad.append([sx_, "NaN" if sy_ != sy_ else ("Infinity" if sy_ > 0 else "-Infinity")])
        sup_x: list[float] = []
        sup_y: list[float] = []
        resumes: list[float] = []
        if x == step_key and self.run.step_key:
            by_source: dict[str, list[float]] = {}
            for row in self.run.superseded_rows:
                s, v = _num(row.get(self.run.step_key)), _num(row.get(key))
                if math.isfinite(s):
                    by_source.setdefault(row["_source"], []).append(s)
                    if math.isfinite(v):
                        sup_x.append(s)
                        sup_y.append(v)
            resumes = sorted(
                {min(v) for v in by_source.values() if v}
                | {float(s) for _, s in self.run.restarts if isinstance(s, (int, float))}
            )
        return {
            "key": key,
            "x": dx.tolist(),
            "y": dy.tolist(),
            "n": int(len(sx)),
            "total": int(finite.sum()),
            "downsampled": len(dx) < len(sx),
            "nonfinite": bad,
            "superseded": {"x": sup_x, "y": sup_y},
            "resumes": resumes,
        }

    def findings(self) -> list[dict[str, Any]]:
        """The stability doctor's findings (:func:`rllog.doctor.diagnose`), recomputed when rows arrive."""
        if self._findings is None or self._findings[0] != self.version:
            from rllog.doctor import diagnose

            try:
                found = [f.to_dict() for f in diagnose(self.run)]
            except Exception as exc:  # a doctor failure must not take the dashboard down
                found = [{"check": "doctor_failed", "severity": "info", "metric": "", "steps": [],
                          "value": "NaN", "threshold": "", "message": f"the doctor failed: {exc}", "advice": ""}]  # fmt: skip
            self._findings = (self.version, found)
        return self._findings[1]

    def status(self) -> dict[str, Any]:
        st = run_status(self.run.storage) if self.run.metrics_name == METRICS_FILE else {
            "state": "unknown", "resumes": 0, "live": None, "started_at": None,
            "first_started_at": None, "ended_at": None, "host": None, "pid": None}  # fmt: skip
        if st["state"] == "running" and self.bucket and time.time() - self.grew > STALL_SECONDS:
            st["state"] = "stalled"
        if st["resumes"] == 0:
            st["resumes"] = len(self.run.restarts)
        return st

    def summary(self) -> dict[str, Any]:
        """The runs table row: status, times, steps, last/best of the key metrics, doctor counts, config."""
        rows = self.run.rows
        step_key = self.run.step_key
        steps = [r[step_key] for r in rows if step_key and type(r.get(step_key)) in (int, float)]
        keys = key_metrics(rows, columns(rows), step_key, limit=6)
        metrics = {}
        for k in keys:
            col = self.column(k)
            fin = col[~(col != col)]
            fin = fin[abs(fin) != math.inf]
            if len(fin):
                metrics[k] = {"last": float(fin[-1]), "min": float(fin.min()), "max": float(fin.max())}
        counts = {"error": 0, "warning": 0, "info": 0}
        for f in self.findings():
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
        return {
            "id": self.id,
            "name": self.name,
            "url": self.location,
            "status": self.status(),
            "rows": len(rows),
            "version": self.version,
            "first_step": min(steps) if steps else None,
            "last_step": max(steps) if steps else None,
            "duration": float(self.column(X_WALL)[-1]) if X_WALL in self.x_options() and rows else None,
            "metrics": metrics,
            "doctor": counts,
            "config": _flat(self.run.config or {}),
            "iterations": len(self.run.iterations),
        }


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
        self.problems: list[str] = []

    def runs(self) -> list[RunEntry]:
        """Every run found so far (looks for new ones when the last look is old)."""
        with self._lock:
            if time.monotonic() - self._found_at >= DISCOVER_EVERY:
                self._discover()
                self._found_at = time.monotonic()
            return list(self._runs.values())

    def get(self, run_id: str) -> RunEntry | None:
        if run_id not in self._runs:
            self.runs()
        entry = self._runs.get(run_id)
        if entry is not None:
            entry.refresh()
        return entry

    def _discover(self) -> None:
        for root in self.roots:
            try:
                found = self._bucket_runs(root) if "://" in root else self._local_runs(root)
            except OSError as exc:
                msg = f"{root}: {exc}"
                if msg not in self.problems:
                    self.problems.append(msg)
                continue
            for location, name in found:
                rid = _run_id(location)
                if rid in self._runs:
                    continue
                try:
                    run = read_run(location, **(self._options if "://" in location else {}))
                except (OSError, ValueError) as exc:
                    msg = f"{location}: not read ({type(exc).__name__}: {exc})"
                    if msg not in self.problems:
                        self.problems.append(msg)
                    continue
                entry = RunEntry(rid, location, name, run, bucket="://" in location)
                entry.refresh()
                self._runs[rid] = entry

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
