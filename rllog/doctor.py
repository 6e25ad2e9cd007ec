"""The stability doctor: checks a run's metrics for the PPO/GRPO stability signals.

:func:`check_run` reads a run and :func:`diagnose` checks a metrics DataFrame (or a
:class:`rllog.Run`); both feed the rule engine of :mod:`rllog._format.rules`, which the
live doctor (``RunLogger(doctor=True)``) uses too, so the two agree on the same run. The
checks, the metrics each reads, their default thresholds, levels and sources (TRL's
logging guide, https://huggingface.co/docs/trl/logging) are tabled in that module's
docstring and printed by ``rllog doctor --list-thresholds``.

Severity levels: ``error`` (training is numerically broken or updates are far too
large), ``warning`` (likely a problem, look at it), ``info`` (nothing checkable).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rllog._format.rules import (
    ADVICE,
    SEVERITIES,
    THRESHOLD_HELP,
    Finding,
    RuleEngine,
    Severity,
    Thresholds,
    canonical,
)

if TYPE_CHECKING:
    import pandas as pd

    from rllog._read.run import Run

__all__ = [
    "thresholds_from_file",
    "SEVERITIES",
    "Finding",
    "Thresholds",
    "check_run",
    "diagnose",
    "diagnose_rows",
]

# the rules live in rllog._format.rules (shared with the live doctor, RunLogger(doctor=True))
_ = (ADVICE, THRESHOLD_HELP, Severity, canonical)


def diagnose(
    metrics: pd.DataFrame | Run,
    thresholds: Thresholds | None = None,
    *,
    nonfinite: Mapping[str, Sequence[int]] | None = None,
    step_key: str | None = "step",
) -> list[Finding]:
    """Check a run's metrics for the PPO/GRPO stability signals (see the module docstring).

    Args:
        metrics: a :class:`rllog.Run` from :func:`rllog.read_run` (its metrics,
            NaN/Inf cells and step column are used; ``nonfinite`` and ``step_key`` are
            ignored), or a DataFrame: one row per logged step (rows in logging order), a ``step_key``
            column (else row positions are the steps), NaN where a key is missing. String columns are
            ignored; a column that mixes strings and numbers is checked on its numbers.
        thresholds: defaults to ``Thresholds()``.
        nonfinite: ``{metric: [step, ...]}`` where the loop logged NaN/±Inf (from
            :func:`nonfinite_cells`; :func:`check_run` reads it from metrics.jsonl). A
            DataFrame cannot tell a logged NaN from a missing key, so without it only
            ±Inf cells are reported as non-finite.

    Returns:
        Findings, errors first, then warnings, each group in check order. The rules are
        :class:`rllog._format.rules.RuleEngine`'s, fed column by column (the live doctor
        feeds the same engine row by row, so both give the same findings).

    Raises:
        TypeError: ``metrics`` is neither (for a path or URL use :func:`check_run`).
    """
    import numpy as np
    import pandas as pd

    from rllog._read.run import Run

    if isinstance(metrics, Run):
        return diagnose_rows(metrics.iter_rows(), thresholds, step_key=metrics.step_key)
    if not isinstance(metrics, pd.DataFrame):
        raise TypeError(
            f"diagnose takes a Run from rllog.read_run or a metrics DataFrame, got {type(metrics).__name__}; "
            "for a run folder, URL or file use rllog.doctor.check_run(path)"
        )

    engine = RuleEngine(thresholds)
    if step_key in metrics.columns:
        steps_all = pd.to_numeric(metrics[step_key], errors="coerce").to_numpy(dtype=float)
    else:
        steps_all = np.arange(len(metrics), dtype=float)
    steps_all = np.where(np.isfinite(steps_all), steps_all, np.arange(len(metrics))).astype(np.int64)
    logged = {k: set(v) for k, v in (nonfinite or {}).items()}
    for col in metrics.columns:
        if col == step_key or not isinstance(col, str):
            continue
        values = pd.to_numeric(metrics[col], errors="coerce").to_numpy(dtype=float)
        cells = logged.pop(col, set())
        keep = ~np.isnan(values)
        events = list(zip(steps_all[keep].tolist(), values[keep].tolist(), strict=True))
        if cells:  # logged NaN cells (a DataFrame NaN may be a missing key), in step order
            inf = {step for step, v in events if v - v != 0}
            events.extend((step, float("nan")) for step in cells if step not in inf)
            events.sort(key=lambda e: e[0])
        feed = engine.feed_value
        for step, v in events:
            feed(col, step, v)
    for col, cells in logged.items():  # NaN cells of columns the DataFrame does not hold
        for step in sorted(cells):
            engine.feed_value(col, step, float("nan"))
    engine.finish()
    return engine.findings()


def diagnose_rows(
    rows: Iterable[Mapping[str, Any]], thresholds: Thresholds | None = None, *, step_key: str | None = "step"
) -> list[Finding]:
    """:func:`diagnose` of metric rows fed one at a time (e.g. :meth:`rllog.Run.iter_rows`):
    the same findings as :func:`diagnose` on the DataFrame of the same rows, in memory
    bounded by the rules' state instead of the whole table.

    Each value is read as ``pandas.to_numeric(..., errors="coerce")`` reads a cell (bools
    as 0/1, numeric strings as numbers, other strings and None skipped); a row's step is
    its ``step_key`` value truncated to an int, else its position. A value logged as
    NaN counts at its int step (else its position), like :func:`nonfinite_cells`.
    """
    engine = RuleEngine(thresholds)
    feed = engine.feed_value
    columns: dict[str, None] = {}
    watched: dict[str, bool] = {}  # metrics a rule reads; of the others only NaN/Inf matter
    plans: dict[tuple[str, ...], list[str]] = {}  # a row's keys -> the watched ones, in order
    for pos, row in enumerate(rows):
        if len(row) != len(columns) or not columns.keys() >= row.keys():
            columns.update(dict.fromkeys(row))
        raw = row.get(step_key, pos) if step_key is not None else pos
        step = _as_number(raw)
        step = int(step) if step is not None and step - step == 0 else pos
        cell_step = raw if isinstance(raw, int) else pos
        if _all_finite(row):  # the common row: only the watched metrics change anything
            keys = tuple(row)
            plan = plans.get(keys)
            if plan is None:
                plan = plans[keys] = [k for k in keys if k != step_key and engine.watches(k)]
            for k in plan:
                feed(k, step, float(row[k]))
            continue
        for k, v in row.items():
            if k == step_key or not isinstance(k, str):
                continue
            x = _as_number(v)
            if x is None:
                continue
            if x != x:
                if type(v) is float:  # a logged NaN (a "nan" string is no value, as in a DataFrame)
                    feed(k, cell_step, x)
                continue
            w = watched.get(k)
            if w is None:
                w = watched[k] = engine.watches(k)
            if w or x - x != 0:
                feed(k, step, x)
    engine.order_by_columns([c for c in columns if c != step_key])
    engine.finish()
    return engine.findings()


def _all_finite(row: Mapping[str, Any]) -> bool:
    """True if every value of ``row`` is a finite number or a bool (one ``math.fsum`` in C)."""
    try:
        total = math.fsum(row.values())
    except (TypeError, ValueError, OverflowError):  # a str, None, or an int too large for a float
        return False
    return total - total == 0


def _as_number(v: Any) -> float | None:
    """``v`` as ``pandas.to_numeric(errors="coerce")`` reads one cell; None for no number."""
    t = type(v)
    if t is float:
        return v
    if t is int or t is bool:
        return float(v)
    if t is str and "_" not in v:
        try:
            return float(v)
        except ValueError:
            return None
    return None


def check_run(log_path: Any, thresholds: Thresholds | None = None) -> list[Finding]:
    """Read the run at ``log_path`` (a path, URL or Storage) and :func:`diagnose` its metrics.

    ``log_path`` may be anything :func:`rllog.read_run` reads (a run folder or URL, a
    metrics JSONL file, a TRL trainer_state.json). NaN/Inf cells come from the values
    logged as NaN/Infinity, so a missing key or a ``null`` is never reported as NaN.
    The rows are streamed (:meth:`rllog.Run.iter_rows`, :func:`diagnose_rows`): memory
    stays bounded whatever the size of the metrics file.

    Raises:
        FileNotFoundError: nothing at ``log_path``, or a folder without the metrics file (not
            a run: nothing could be checked). RunFormatError: not a run (from the reader).
    """
    from rllog._read.run import read_run

    with read_run(log_path) as run:
        if not run.storage.exists(run.metrics_name):
            tensorboard = any(".tfevents." in name for name in run.storage.list(""))
            raise FileNotFoundError(
                f"no {run.metrics_name} in {run.url}: nothing was checked; expected a run folder (or a metrics "
                ".jsonl file, a trainer_state.json)"
                + (
                    "; for TensorBoard event files: rllog import tensorboard FOLDER OUT"
                    if tensorboard
                    else ""
                )
            )
        findings = diagnose_rows(run.iter_rows(), thresholds, step_key=run.step_key)
        damaged = run.damaged_lines  # after the rows were read: the lines they skipped
    errors = [f for f in findings if f.severity == "error"]
    return errors + damage_findings(damaged) + findings[len(errors) :]


def damage_findings(damaged: list[str]) -> list[Finding]:
    """A ``damaged_lines`` warning for the lines the reader skipped (:attr:`rllog.Run.damaged_lines`),
    none when there are none: a row lost in the middle of metrics.jsonl is not "no problems"."""
    if not damaged:
        return []
    shown = "; ".join(damaged[:3]) + (f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
    return [
        Finding(
            check="damaged_lines",
            severity="warning",
            metric="",
            steps=[],
            value=float(len(damaged)),
            threshold="any",
            message=f"{len(damaged)} damaged line(s) skipped by every reader: {shown}",
            advice="the rows on those lines are lost to readers; look for a second writer, a full disk or an edit "
            "of the file (the other rows are read as usual)",
        )
    ]


def thresholds_from_file(path: str | os.PathLike[str]) -> Thresholds:
    """Read :class:`Thresholds` from a JSON or TOML file (by suffix) holding some of the fields
    (the others keep their defaults), e.g. ``ratio_high = 3.0`` in a ``.toml`` file.

    Raises:
        OSError: the file cannot be read. ValueError: bad content (unknown name, wrong type).
    """
    return Thresholds.from_bytes(Path(path).read_bytes(), os.fspath(path))
