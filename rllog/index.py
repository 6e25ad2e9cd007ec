"""``index.html``: one self-contained page per run (``rllog index RUN``).

The page shows charts of the main metrics (inline SVG drawn here, no scripts), the
doctor's findings, a table of every metric, the config, the checkpoint records and
links to each iteration's HTML report. It makes no network request: a
Content-Security-Policy forbids scripts and remote loads, and all logged text (metric
names, config values, file names) is escaped by jinja2, so nothing logged can run.
Links are relative (``./train_iteration_000003.html``), so the page works in the run
folder on disk and when the bucket is served as static files; a page written elsewhere
(``rllog index RUN -o OUT``, for a run you may not write to) links the run's files by a
relative path to the run folder, or by the run's URL.
"""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from rllog._format.codec import encode_html
from rllog._format.redact import redact_tree
from rllog._format.vocab import MAIN_METRICS, check_keys
from rllog.storage import ReadOnlyStorage, Storage, open_storage

if TYPE_CHECKING:
    import numpy as np

    from rllog._read.view import RunView
    from rllog.doctor import Finding, Thresholds

__all__ = ["render_index", "write_index"]

_MAX_CHARTS = 16
_MIN_CHARTS = 6
#: a metric with fewer logged values than this gets a marker on every point
SPARSE_POINTS = 30


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    """Config as ``(dotted.key, text)`` rows; lists and scalars shown as JSON."""
    from rllog._format.codec import encode_json

    if isinstance(value, dict) and value:
        rows = []
        for k, v in value.items():
            rows.extend(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return rows
    text = value if isinstance(value, str) else encode_json(value).decode()
    return [(prefix or "(config)", text)]


def _numeric_columns(metrics: Any, step_key: str | None) -> dict[str, Any]:
    import pandas as pd

    out = {}
    for col in metrics.columns:
        if col == step_key or not isinstance(col, str):
            continue
        values = pd.to_numeric(metrics[col], errors="coerce")
        if values.notna().any():
            out[col] = values.to_numpy(dtype=float)
    return out


def _choose(columns: list[str], flagged: set[str], wanted: Sequence[str] = ()) -> list[str]:
    """Metrics to chart: the ``wanted`` ones (``-k``), known main metrics in MAIN_METRICS order,
    then the doctor's flagged ones; at most _MAX_CHARTS unless more are wanted or flagged
    (those are always charted)."""
    canon = {c: (c.removeprefix("train/")) for c in columns}
    rank = {m: i for i, m in enumerate(MAIN_METRICS)}
    flagged = flagged | set(wanted)
    ordered = list(dict.fromkeys(wanted))
    ordered += sorted(
        (c for c in columns if canon[c] in rank and c not in ordered), key=lambda c: rank[canon[c]]
    )
    ordered += [c for c in columns if c in flagged and c not in ordered]
    if len(ordered) < _MIN_CHARTS:  # an unfamiliar run: chart its first metrics
        ordered += [c for c in columns if c not in ordered and not c.startswith(("time/", "progress/"))]
    room = _MAX_CHARTS - sum(c in flagged for c in ordered)
    chosen = []
    for c in ordered:
        if c in flagged or room > 0:
            chosen.append(c)
            room -= c not in flagged
    return chosen


def _sparse(steps: np.ndarray, logged: np.ndarray) -> bool:
    """True when a metric has few values (< SPARSE_POINTS) or skips rows between its first and
    last logged one (e.g. an eval every 10 steps): its chart marks every point."""
    import numpy as np

    where = np.flatnonzero(logged)
    if len(where) < SPARSE_POINTS:
        return True
    return len(where) < where[-1] - where[0] + 1


def render_index(
    run: RunView,
    findings: list[Finding],
    *,
    thresholds: Thresholds | None = None,
    keys: Sequence[str] = (),
    base: str = "./",
) -> str:
    """The HTML text of the index page of ``run`` (the view :func:`write_index` reads; use that).

    ``keys`` are charted in any case, first; ``base`` prefixes the links to the run's
    files (``"./"`` when the page is in the run folder).

    Raises:
        ValueError: a key in ``keys`` is not a metric of the run, or has no numbers.
    """
    import numpy as np

    from rllog._read.summary import metric_keys
    from rllog._svgchart import _label, line_chart
    from rllog._templates import environment

    metrics = run.metrics
    n = len(metrics)
    key = run.step_key
    steps = (
        np.nan_to_num(np.asarray(metrics[key], dtype=float), nan=-1.0)
        if key in metrics.columns
        else np.arange(n, dtype=float)
    )
    columns = _numeric_columns(metrics, key)
    check_keys(keys, [c for c in metrics.columns if c != key], "this run")
    for k in keys:
        if k not in columns:
            raise ValueError(f"-k {k!r} has no numeric values; numeric metrics: {list(columns)[:40]}")
    worst: dict[str, str] = {}
    for f in reversed(findings):  # errors come first, so they win
        if f.metric:
            worst[f.metric] = f.severity
    flagged = set(worst)
    charts = []
    for col in _choose(list(columns), flagged, keys):
        y = columns[col]
        bad = np.zeros(n, dtype=bool)
        if run.nonfinite.get(col):
            bad = np.isin(steps, np.asarray(run.nonfinite[col], dtype=float)) & ~np.isfinite(y)
        bad |= np.isinf(y)
        rows = np.isfinite(y) | bad
        chart = line_chart(
            col, steps[rows], y[rows], bad[rows], x_label=key or "row", markers=_sparse(steps, rows)
        )
        chart.flagged = worst.get(col, "")
        charts.append(chart)
    table = []
    for col, y in columns.items():
        fin = y[np.isfinite(y)]
        table.append(
            {
                "key": col,
                "rows": int(np.isfinite(y).sum() + len(run.nonfinite.get(col, ()))),
                "last": _label(float(fin[-1])) if len(fin) else "",
                "min": _label(float(fin.min())) if len(fin) else "",
                "max": _label(float(fin.max())) if len(fin) else "",
                "bad": len(run.nonfinite.get(col, ())),
            }
        )
    ckpt_cols: list[str] = []
    for rec in run.checkpoints:
        ckpt_cols += [k for k in rec if k not in ckpt_cols]
    by_iteration: dict[int, list[Any]] = {}
    for rep in run.reports:
        by_iteration.setdefault(rep.iteration, []).append(
            {
                "href": base + quote(rep.name),
                "label": "train" if rep.split == "train" else f"eval {rep.eval_name}",
                "name": rep.name,
            }
        )
    superseded: dict[int, list[Any]] = {}
    for art in run.superseded:
        what = "report" if art.kind == "html" else "rollout summaries"
        superseded.setdefault(art.iteration, []).append(
            {
                "href": base + quote(art.name),
                "label": f"{'train' if art.split == 'train' else f'eval {art.eval_name}'} {what}",
                "name": art.name,
            }
        )
    counts = {s: sum(f.severity == s for f in findings) for s in ("error", "warning", "info")}
    finite_steps = steps[steps >= 0]
    template = environment().get_template("index.html")
    return template.render(
        url=run.url,
        title=run.name or run.url,
        x_label=key or "row",
        generated=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        rows=n,
        first_step=int(finite_steps.min()) if len(finite_steps) else None,
        last_step=int(finite_steps.max()) if len(finite_steps) else None,
        n_metrics=len(metric_keys(list(metrics.columns), key)),
        findings=findings,
        counts=counts,
        charts=charts,
        table=table,
        config=_flatten(redact_tree(run.config)) if run.config is not None else None,
        checkpoints=[
            {c: ("" if rec.get(c) is None else str(rec.get(c))) for c in ckpt_cols}
            for rec in (redact_tree(r) for r in run.checkpoints)
        ],
        ckpt_cols=ckpt_cols,
        iterations=sorted(by_iteration.items()),
        superseded=sorted(superseded.items()),
        warnings=run.warnings,
        thresholds=thresholds,
    )


def write_index(
    log_path: Any,
    thresholds: Thresholds | None = None,
    *,
    keys: Sequence[str] = (),
    out: str | os.PathLike[str] | None = None,
) -> tuple[str, list[Finding]]:
    """Read the run at ``log_path``, write ``index.html`` into it (atomically, through its Storage).

    ``log_path`` is anything :func:`rllog.read_run` reads. Beside a single metrics file
    the page is named after it (``arithmetic_index.html`` for ``arithmetic_metrics.jsonl``,
    ``trainer_state_index.html`` for a TRL ``trainer_state.json``).

    Args:
        keys: metrics to chart in any case (besides the main and flagged ones).
        out: write the page here instead (a file path or URL), leaving the run untouched
            (a read-only run); its links to iteration reports point into the run.

    Returns:
        ``(URL of the page, the doctor's findings)``.

    Raises:
        FileNotFoundError: the run has no metrics.jsonl. ValueError: a key is not a
        numeric metric of the run. OSError/StorageError: the page could not be written.
    """
    from rllog._read.view import open_run, write_bytes
    from rllog.doctor import damage_findings, diagnose

    run = open_run(log_path)
    findings = diagnose(run.metrics, thresholds, nonfinite=run.nonfinite, step_key=run.step_key)
    errors = [f for f in findings if f.severity == "error"]
    findings = errors + damage_findings(run.damaged) + findings[len(errors) :]
    if out is None:
        html = render_index(run, findings, thresholds=thresholds, keys=keys)
        _write_into_run(run.storage, run.index_name, encode_html(html))
        return f"{run.url.rstrip('/')}/{run.index_name}", findings
    out = os.fspath(out)
    html = render_index(run, findings, thresholds=thresholds, keys=keys, base=_base_href(run.url, out))
    write_bytes(out, encode_html(html))
    return out, findings


def _write_into_run(storage: Storage, name: str, data: bytes) -> None:
    """Write one whole file into the run (atomically: temp file + rename locally, one PUT on a
    bucket). A run read from a bucket is open read-only, so the page goes through a short-lived
    writer handle of the same run (no spill journal), closed before returning."""
    writer = storage
    if isinstance(storage, ReadOnlyStorage):
        writer = open_storage(storage.url, spill=False, **storage.storage_options)
    try:
        writer.write(name, data)
        writer.flush(durable=True)
    finally:
        if writer is not storage:
            writer.close()


def _base_href(run_url: str, out: str) -> str:
    """How a page at ``out`` links into the run folder at ``run_url``: a relative path when both
    are local files, else the run's URL."""
    if "://" in run_url or "://" in out:
        return run_url.rstrip("/") + "/"
    rel = os.path.relpath(run_url, os.path.dirname(os.path.abspath(os.path.expanduser(out))))
    return quote(rel.replace(os.sep, "/")) + "/"
