"""What ``rllog summary`` and ``rllog diff`` compute and print, from a :class:`~rllog.Run`.

Works on :attr:`Run.rows` (plain dicts), so neither command imports pandas.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from rllog._format.vocab import EVAL_PREFIXES, KEY_METRICS, STEP_KEYS, TIME_KEYS
from rllog._read.run import Run

__all__ = [
    "columns",
    "key_metrics",
    "pick_key_metrics",
    "last_values",
    "metric_keys",
    "summarize",
    "format_summary",
    "format_diff",
]

_CONFIG_HINTS = (
    "model", "learning_rate", "lr", "batch", "group", "lora", "kl", "loss", "epoch", "max_steps",
    "seed", "temperature", "max_tokens", "beta", "num_generations", "dataset", "env",
)  # fmt: skip


def columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every key of ``rows``, in first-logged order."""
    seen: dict[str, None] = {}
    for row in rows:
        if len(row) != len(seen) or not seen.keys() >= row.keys():
            seen.update(dict.fromkeys(row))
    return list(seen)


def metric_keys(cols: list[str], step_key: str | None) -> list[str]:
    """The metrics among ``cols``: every logged key but the step column (string-valued ones
    too). ``rllog summary`` and the index page count these."""
    return [c for c in cols if c != step_key]


def _is_number(v: Any) -> bool:
    return type(v) in (int, float)


def key_metrics(
    rows: list[dict[str, Any]], cols: list[str], step_key: str | None, limit: int = 12
) -> list[str]:
    """The :data:`KEY_METRICS` among ``cols``; if fewer than 4, topped up to ``limit`` with other
    numeric columns (train before eval; no step, ``time/`` or ``progress/`` columns)."""

    def numeric(keys: list[str]) -> set[str]:
        last = last_values(rows, keys, step_key)
        return {k for k in keys if k in last and _is_number(last[k][0])}

    return pick_key_metrics(cols, step_key, numeric, limit)


def pick_key_metrics(
    cols: list[str], step_key: str | None, numeric: Callable[[list[str]], set[str]], limit: int = 12
) -> list[str]:
    """:func:`key_metrics` for any reader: ``numeric(keys)`` gives the keys among ``keys``
    whose last value (not null or NaN; NaN if it never had another) is a number."""
    have = set(cols)
    out = [k for k in KEY_METRICS if k in have][:limit]
    if len(out) < 4:
        skip = set(out) | set(STEP_KEYS) | {step_key}
        rest = [c for c in cols if c not in skip and not c.startswith(("time/", "progress/"))]
        numbers = numeric(rest)
        rest = [c for c in rest if c in numbers]
        rest.sort(key=lambda c: c.startswith(EVAL_PREFIXES))
        out += rest[: limit - len(out)]
    return out


def last_values(
    rows: list[dict[str, Any]], keys: list[str], step_key: str | None
) -> dict[str, tuple[Any, Any]]:
    """``{key: (value, step)}``: the last value of each key that is not null or NaN (a NaN
    is reported only when a key never had another value)."""
    found: dict[str, tuple[Any, Any]] = {}
    nan_only: dict[str, tuple[Any, Any]] = {}
    wanted = set(keys)
    for row in reversed(rows):
        for k in wanted.intersection(row):
            v = row[k]
            if v is None or k in found:
                continue
            if isinstance(v, float) and math.isnan(v):
                nan_only.setdefault(k, (v, row.get(step_key)))
                continue
            found[k] = (v, row.get(step_key))
        if len(found) == len(wanted):
            break
    return {k: found[k] if k in found else nan_only[k] for k in keys if k in found or k in nan_only}


def _flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict):
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out if out or not prefix else {prefix[:-1]: {}}
    return {prefix[:-1]: config}


def _all_finite(row: dict[str, Any]) -> bool:
    """True if every value of ``row`` is a finite number or a bool (one ``math.fsum`` in C)."""
    try:
        total = math.fsum(row.values())
    except (TypeError, ValueError, OverflowError):  # a str, None, or an int too large for a float
        return False
    return total - total == 0


class _Pass:
    """What :func:`summarize` needs of the standing rows, gathered in one pass over them:
    columns in first-logged order, the step range, the last value of every column (as
    :func:`last_values` picks it) and the time-per-iteration series. Memory: O(columns)
    plus one value per row for each of :data:`TIME_KEYS` logged (kept as logged: an int
    median stays an int, as with :attr:`Run.rows`)."""

    def __init__(self, rows: Iterable[dict[str, Any]], step_key: str | None) -> None:
        seen: dict[str, None] = {}
        found: dict[str, Any] = {}  # key -> last value that is not null or NaN
        found_at: dict[str, Any] = {}  # key -> the step of that value
        nan_last: dict[str, tuple[Any, Any]] = {}
        times: dict[str, list[Any]] = {k: [] for k in TIME_KEYS}
        n = 0
        first = last = None
        for row in rows:
            n += 1
            if len(row) != len(seen) or not seen.keys() >= row.keys():
                seen.update(dict.fromkeys(row))
            step = row.get(step_key) if step_key else None
            if step_key and step_key in row and _is_number(step):
                first = step if first is None or step < first else first
                last = step if last is None or step > last else last
            if _all_finite(row):  # the common row: whole-row updates in C
                found.update(row)
                found_at.update(dict.fromkeys(row, step))
                for k in times.keys() & row.keys():
                    v = row[k]
                    if _is_number(v):
                        times[k].append(v)
                continue
            for k, v in row.items():
                if v is None:
                    continue
                if isinstance(v, float) and math.isnan(v):
                    nan_last[k] = (v, step)
                else:
                    found[k] = v
                    found_at[k] = step
                    if k in times and _is_number(v) and math.isfinite(v):
                        times[k].append(v)
        self.rows = n
        self.columns = list(seen)
        self.first_step, self.last_step = first, last
        self.times = times
        self._found, self._found_at, self._nan = found, found_at, nan_last

    def last_values(self, keys: list[str]) -> dict[str, tuple[Any, Any]]:
        """:func:`last_values` of the rows for ``keys``."""
        found, at, nan = self._found, self._found_at, self._nan
        return {k: (found[k], at[k]) if k in found else nan[k] for k in keys if k in found or k in nan}

    def key_metrics(self, step_key: str | None, limit: int = 12) -> list[str]:
        """:func:`key_metrics` of the rows."""

        def numeric(keys: list[str]) -> set[str]:
            last = self.last_values(keys)
            return {k for k in keys if k in last and _is_number(last[k][0])}

        return pick_key_metrics(self.columns, step_key, numeric, limit)


def summarize(run: Run, keys: list[str] | None = None) -> dict[str, Any]:
    """Everything ``rllog summary`` prints, as a JSON-able dict.

    The metric rows are streamed (:meth:`Run.iter_rows`): memory stays bounded by the
    number of columns, not the size of the file (a value per row for the time series).
    """
    sk = run.step_key
    scan = _Pass(run.iter_rows(), sk)
    cols = scan.columns
    keys = keys or scan.key_metrics(sk)
    last = scan.last_values(keys)
    out: dict[str, Any] = {
        "run": run.url,
        "metrics_file": run.metrics_name,
        "step_key": sk,
        "rows_read": run.rows_read,
        "rows": scan.rows,
        "first_step": scan.first_step,
        "last_step": scan.last_step,
        "segments": len(run.restarts) + 1 if scan.rows else 0,
        "superseded_rows": run.superseded_count,
        "merged_rows": run.merged_rows,
        "columns": len(cols),
        "metrics": len(metric_keys(cols, sk)),
        "eval_columns": sum(c.startswith(EVAL_PREFIXES) for c in cols),
        "last": [{"key": k, "value": last[k][0], "step": last[k][1]} for k in keys if k in last],
        "missing_keys": [k for k in keys if k not in last],
        "time_per_iteration": None,
    }
    for tk in TIME_KEYS:
        times = scan.times[tk]
        if times:
            out["time_per_iteration"] = {
                "key": tk, "n": len(times), "mean_s": statistics.fmean(times),
                "median_s": statistics.median(times), "last_s": times[-1],
            }  # fmt: skip
            break
    its = run.iterations
    kinds: dict[str, int] = {}
    for it in its:
        for a in it.artifacts:
            label = f"{a.split if a.eval_name is None else 'eval ' + a.eval_name} {a.kind}"
            kinds[label] = kinds.get(label, 0) + 1
    out["iterations"] = {
        "count": len(its),
        "first": its[0].iteration if its else None,
        "last": its[-1].iteration if its else None,
        "artifacts": kinds,
        "superseded": [a.name for it in run.superseded_iterations for a in it.artifacts],
    }
    out["checkpoints"] = {
        "count": len(run.checkpoints),
        "last": run.checkpoints[-1] if run.checkpoints else None,
    }
    if run.config is None:
        out["config"] = None
    else:
        flat = _flatten(run.config)
        hinted = {
            k: v for k, v in flat.items() if any(h in k.rsplit(".", 1)[-1].lower() for h in _CONFIG_HINTS)
        }
        shown = hinted if hinted else flat
        out["config"] = {"keys": len(flat), "highlights": dict(list(shown.items())[:12])}
    out["files"] = [{"name": n, "bytes": b} for n, b in run.files()]
    out["warnings"] = run.warnings
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def format_summary(s: dict[str, Any], max_files: int = 12) -> str:
    """The text ``rllog summary`` prints for :func:`summarize`'s dict."""
    lines = [f"run          {s['run']}"]
    span = f", {s['step_key']} {s['first_step']}..{s['last_step']}" if s["first_step"] is not None else ""
    seg = ""
    if s["segments"] > 1 or s["superseded_rows"]:
        seg = f"; {s['segments']} segment(s), {s['superseded_rows']} superseded rows"
    merged = f", {s['merged_rows']} same-step rows merged" if s["merged_rows"] else ""
    lines.append(
        f"metrics      {s['metrics_file']}: {s['rows_read']} rows read, {s['rows']} standing{span}{merged}{seg}"
    )
    step_col = f"the {s['step_key']} column + " if s["columns"] > s["metrics"] else ""
    lines.append(f"columns      {step_col}{s['metrics']} metrics ({s['eval_columns']} eval)")
    if s["last"]:
        width = max(len(x["key"]) for x in s["last"])
        lines.append("last values  (at step)")
        lines += [f"  {x['key']:<{width}}  {_fmt(x['value']):>12}  ({x['step']})" for x in s["last"]]
    if s["missing_keys"]:
        lines.append(f"  not logged: {', '.join(s['missing_keys'])}")
    t = s["time_per_iteration"]
    if t:
        lines.append(
            f"time/iter    {t['mean_s']:.3g} s mean, {t['median_s']:.3g} s median, {t['last_s']:.3g} s last "
            f"over {t['n']} steps ({t['key']})"
        )
    else:
        lines.append(f"time/iter    unknown (none of {', '.join(TIME_KEYS)} logged)")
    it = s["iterations"]
    if it["count"]:
        arts = ", ".join(f"{k} {n}" for k, n in it["artifacts"].items())
        lines.append(f"iterations   {it['count']} ({it['first']}..{it['last']}): {arts}")
    else:
        lines.append("iterations   none with reports")
    if it["superseded"]:
        lines.append(
            f"  superseded by a resume: {len(it['superseded'])} file(s) of the crashed run in superseded/"
            f" ({', '.join(n.removeprefix('superseded/') for n in it['superseded'][:4])}"
            f"{'...' if len(it['superseded']) > 4 else ''})"
        )
    ck = s["checkpoints"]
    if ck["count"]:
        last = ", ".join(f"{k}={_fmt(v)}" for k, v in ck["last"].items())
        lines.append(f"checkpoints  {ck['count']}, last: {last}")
    else:
        lines.append("checkpoints  none")
    cfg = s["config"]
    if cfg is None:
        lines.append("config       none")
    else:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in cfg["highlights"].items())
        lines.append(f"config       {cfg['keys']} keys: {shown}")
    files = s["files"]
    total = sum(f["bytes"] for f in files)
    listed = ", ".join(f"{f['name']} ({_size(f['bytes'])})" for f in files[:max_files])
    more = f", ... {len(files) - max_files} more" if len(files) > max_files else ""
    lines.append(f"files        {len(files)}, {_size(total)}: {listed}{more}")
    if s["warnings"]:
        lines.append("warnings")
        lines += [f"  - {w}" for w in s["warnings"]]
    return "\n".join(lines)


def _diff_configs(a: Any, b: Any) -> tuple[list[tuple[str, Any, Any]], list[str], list[str]]:
    fa, fb = _flatten(a or {}), _flatten(b or {})
    changed = [(k, fa[k], fb[k]) for k in fa if k in fb and fa[k] != fb[k]]
    return changed, [k for k in fa if k not in fb], [k for k in fb if k not in fa]


def format_diff(a: Run, b: Run, keys: list[str] | None = None, max_lines: int | None = 20) -> str:
    """The text ``rllog diff`` prints: config differences (at most ``max_lines`` per kind,
    None for all), then the last values of key metrics side by side."""
    lines = [f"A  {a.url}  ({a.metrics_name})", f"B  {b.url}  ({b.metrics_name})"]
    changed, only_a, only_b = _diff_configs(a.config, b.config)
    if a.config is None or b.config is None:
        lines.append(
            f"config: {'A' if a.config is None else 'B'} has none"
            if (a.config or b.config)
            else "config: neither has one"
        )
    lines.append(f"config: {len(changed)} differ, {len(only_a)} only in A, {len(only_b)} only in B")
    width = max([len(k) for k, *_ in changed] + [len(k) for k in only_a + only_b] + [10])
    fa, fb = _flatten(a.config or {}), _flatten(b.config or {})
    for entries in (
        [f"  {k:<{width}}  A={_fmt(va)}  B={_fmt(vb)}" for k, va, vb in changed],
        [f"  {k:<{width}}  only in A ({_fmt(fa[k])})" for k in only_a],
        [f"  {k:<{width}}  only in B ({_fmt(fb[k])})" for k in only_b],
    ):
        lines += entries if max_lines is None else entries[:max_lines]
        if max_lines is not None and len(entries) > max_lines:
            lines.append(f"  ... {len(entries) - max_lines} more (--all shows every one)")
    ra, rb = a.rows, b.rows
    if not keys:
        cols_a = columns(ra)
        keys = key_metrics(ra + rb, cols_a + [c for c in columns(rb) if c not in set(cols_a)], a.step_key)
    la, lb = last_values(ra, keys, a.step_key), last_values(rb, keys, b.step_key)
    shown = [k for k in keys if k in la or k in lb]
    lines.append(f"rows: A {len(ra)}, B {len(rb)}")
    if shown:
        width = max(len(k) for k in shown)
        lines.append(f"  {'last value (at step)':<{width}}  {'A':>22}  {'B':>22}")
        for k in shown:
            cells = [f"{_fmt(x[k][0])} ({x[k][1]})" if k in x else "-" for x in (la, lb)]
            lines.append(f"  {k:<{width}}  {cells[0]:>22}  {cells[1]:>22}")
    return "\n".join(lines)
