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

#: the EMA weight of the smoothed line (TensorBoard's default slider position)
DEFAULT_SMOOTH = 0.6
#: metrics-row keys giving an iteration's mean reward / accuracy, first present wins
#: (tinker-cookbook's env/all/..., TRL's reward; see rllog._format.vocab)
REWARD_KEYS = ("env/all/reward/total", "reward", "train/reward", "objective/rlhf_reward")
ACCURACY_KEYS = ("env/all/correct", "accuracy", "train/accuracy")
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


def _iteration_rewards(
    run: RunView, columns: dict[str, Any], steps: np.ndarray, iterations: list[int]
) -> dict[int, dict[str, str]]:
    """``{iteration: {"reward": "0.61", "accuracy": "0.5"}}`` for the iteration list.

    From the metrics row whose step is the iteration (:data:`REWARD_KEYS`,
    :data:`ACCURACY_KEYS`) when the run logs such a key; else from the iteration's train
    rollout summaries (mean ``total_reward``; mean of the step metric ``correct`` or
    ``accuracy``), read only then (one file per iteration).
    """
    import math

    import numpy as np

    from rllog._read.rollouts import decode_rollout_summaries
    from rllog._svgchart import _label

    def column(names: Sequence[str]) -> Any:
        return next((columns[k] for k in names if k in columns), None)

    reward_col, acc_col = column(REWARD_KEYS), column(ACCURACY_KEYS)
    out: dict[int, dict[str, str]] = {}
    wanted = sorted(set(iterations) | set(run.summaries))
    for it in wanted:
        cell: dict[str, str] = {}
        at = np.flatnonzero(steps == it)
        for name, col in (("reward", reward_col), ("accuracy", acc_col)):
            if col is not None and len(at) and math.isfinite(col[at[-1]]):
                cell[name] = _label(float(col[at[-1]]))
        if reward_col is None and acc_col is None and it in run.summaries:
            try:
                records = decode_rollout_summaries(run.storage.read(run.summaries[it]), run.summaries[it])
            except (OSError, ValueError):
                records = []
            rewards = [r.total_reward for r in records if math.isfinite(r.total_reward)]
            acc = [
                float(v)
                for r in records
                for step in r.steps
                for v in [(step.metrics or {}).get("correct", (step.metrics or {}).get("accuracy"))]
                if isinstance(v, (int, float)) and math.isfinite(v)  # True/False count as 1/0
            ]
            if rewards:
                cell["reward"] = _label(sum(rewards) / len(rewards))
            if acc:
                cell["accuracy"] = _label(sum(acc) / len(acc))
        if cell:
            out[it] = cell
    return out


def _meta(run: RunView) -> list[tuple[str, str]]:
    """The run's metadata rows: status, start, end, duration (run_status.json), then commit,
    host, command, working directory (code.diff's header), each only when known."""
    rows: list[tuple[str, str]] = []
    st = run.status
    if st.get("state") and st["state"] != "unknown":
        state = st["state"] + (
            f", resumed {st['resumes']} time{'s' if st['resumes'] != 1 else ''}" if st.get("resumes") else ""
        )
        rows.append(("status", state))
    start = _parse_time(st.get("first_started_at") or st.get("started_at"))
    end = _parse_time(st.get("ended_at")) if st.get("state") in ("finished", "failed") else None
    if start is not None:
        rows.append(("started", start.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if end is not None:
        rows.append(("ended", end.strftime("%Y-%m-%d %H:%M:%S UTC")))
    if start is not None:
        until = end or (_dt.datetime.now(_dt.timezone.utc) if st.get("state") == "running" else None)
        if until is not None:
            rows.append(("duration", _duration((until - start).total_seconds()) + ("" if end else " so far")))
    code = redact_tree(dict(run.code))
    for key in ("commit", "host", "command", "working directory"):
        value = code.get(key) or (st.get("host") if key == "host" else None)
        if value:
            rows.append((key, str(value)))
    if code.get("note"):
        rows.append(("code", code["note"]))
    return rows


def _parse_time(value: Any) -> _dt.datetime | None:
    """An ISO-8601 time from run_status.json as an aware UTC datetime; None if absent or unreadable."""
    if not isinstance(value, str):
        return None
    try:
        t = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)).astimezone(_dt.timezone.utc)


def _duration(seconds: float) -> str:
    """``"2h 03m 07s"``, ``"4m 05s"``, ``"12s"``."""
    s = max(0, int(seconds))
    h, m, sec = s // 3600, s // 60 % 60, s % 60
    return f"{h}h {m:02d}m {sec:02d}s" if h else (f"{m}m {sec:02d}s" if m else f"{sec}s")


def render_index(
    run: RunView,
    findings: list[Finding],
    *,
    thresholds: Thresholds | None = None,
    keys: Sequence[str] = (),
    base: str = "./",
    smooth: float = DEFAULT_SMOOTH,
) -> str:
    """The HTML text of the index page of ``run`` (the view :func:`write_index` reads; use that).

    ``keys`` are charted in any case, first; ``base`` prefixes the links to the run's
    files (``"./"`` when the page is in the run folder). ``smooth``: the weight in [0, 1)
    of TensorBoard's debiased EMA drawn beside each dense chart's raw line (0: none).

    Raises:
        ValueError: a key in ``keys`` is not a metric of the run, or has no numbers;
        ``smooth`` outside [0, 1).
    """
    if not 0.0 <= smooth < 1.0:
        raise ValueError(
            f"smooth must be in [0, 1) (an EMA weight, like TensorBoard's slider), got {smooth!r}"
        )
    import numpy as np
    import pandas as pd

    from rllog._read.summary import metric_keys
    from rllog._svgchart import _label, line_chart
    from rllog._templates import environment

    metrics = run.metrics
    n = len(metrics)
    key = run.step_key
    steps = (
        np.nan_to_num(pd.to_numeric(metrics[key], errors="coerce").to_numpy(dtype=float), nan=-1.0)
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
            col,
            steps[rows],
            y[rows],
            bad[rows],
            x_label=key or "row",
            markers=_sparse(steps, rows),
            smooth=smooth,
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
    rewards = _iteration_rewards(run, columns, steps, list(by_iteration))
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
        iterations=[(it, reps, rewards.get(it, {})) for it, reps in sorted(by_iteration.items())],
        reward_cols=[c for c in ("reward", "accuracy") if any(c in r for r in rewards.values())],
        smooth=smooth,
        meta=_meta(run),
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
    smooth: float = DEFAULT_SMOOTH,
) -> tuple[str, list[Finding]]:
    """Read the run at ``log_path``, write ``index.html`` into it (atomically, through its Storage).

    ``log_path`` is anything :func:`rllog.read_run` reads. Beside a single metrics file
    the page is named after it (``arithmetic_index.html`` for ``arithmetic_metrics.jsonl``,
    ``trainer_state_index.html`` for a TRL ``trainer_state.json``).

    Args:
        keys: metrics to chart in any case (besides the main and flagged ones).
        out: write the page here instead (a file path or URL), leaving the run untouched
            (a read-only run); its links to iteration reports point into the run.
        smooth: the EMA weight of the smoothed line in each chart (:func:`render_index`).

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
        html = render_index(run, findings, thresholds=thresholds, keys=keys, smooth=smooth)
        _write_into_run(run.storage, run.index_name, encode_html(html))
        return f"{run.url.rstrip('/')}/{run.index_name}", findings
    out = os.fspath(out)
    html = render_index(
        run, findings, thresholds=thresholds, keys=keys, base=_base_href(run.url, out), smooth=smooth
    )
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
