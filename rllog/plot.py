"""``rllog plot``: line charts of metrics, several runs overlaid, to PNG, SVG or PDF.

One panel per key, one line per run. Needs matplotlib (``pip install 'rllog[plot]'``),
imported only when a plot is drawn; no pyplot state is touched (a bare ``Figure``).

Smoothing (``smooth=N``, ``--smooth N``): a trailing rolling mean over the last N
logged values of the metric (``pandas.Series.rolling(N, min_periods=1).mean()``), so
the first points average fewer values and a step is never moved; the raw values are
drawn faintly behind. NaN/Inf values are left out of the smoothing and show as gaps
in the raw line. ``smooth=0`` or ``1`` draws the raw values only.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rllog._format.vocab import check_keys

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FORMATS", "PlottedLine", "plot_runs"]

#: output formats by file suffix
FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


@dataclass
class PlottedLine:
    """The data behind one drawn line: ``x``/``y`` are the logged values (NaN/Inf kept as NaN),
    ``y_drawn`` what the solid line shows (smoothed, or ``y``), ``gid`` its SVG element id."""

    run: str
    key: str
    x_key: str
    x: np.ndarray
    y: np.ndarray
    y_drawn: np.ndarray
    gid: str


def _labels(runs: Sequence[str]) -> list[str]:
    """Short, distinct labels: the last path part, more parts where two runs share it."""
    parts = [str(r).rstrip("/").replace("://", "/").split("/") for r in runs]
    depth = 1
    while depth < max(len(p) for p in parts):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
        depth += 1
    return [str(r) for r in runs]


def plot_runs(
    runs: Sequence[Any],
    keys: Sequence[str],
    out: str | os.PathLike[str],
    *,
    x: str | None = None,
    smooth: int = 0,
    width: float = 8.0,
    panel_height: float = 2.6,
) -> list[PlottedLine]:
    """Draw ``keys`` of every run in ``runs`` (paths or URLs) into ``out`` (.png, .svg or .pdf).

    Args:
        x: the x-axis column, e.g. ``"progress/batch"`` or ``"step"``. ``None`` picks
            ``progress/batch`` when every run logged it, else ``step``. A run without
            the column is drawn against ``step``.
        smooth: trailing rolling-mean window in logged values (see module docstring).
        width, panel_height: figure size in inches (one panel per key).

    Returns:
        One :class:`PlottedLine` per (run, key) that was drawn.

    Raises:
        ValueError: no keys, an unknown suffix, ``smooth`` < 0, no run has a key
            (the message lists the run's keys), or no key has a numeric value.

    Warns:
        RuntimeWarning: a key has no numeric value in any run (e.g. a string-valued
            metric): its panel is drawn empty.
        ImportError: matplotlib is not installed (names the ``plot`` extra).
        FileNotFoundError: a run has no metrics.jsonl.
    """
    import numpy as np
    import pandas as pd

    from rllog._read.view import open_run, write_bytes

    if not keys:
        raise ValueError("plot needs at least one metric key (-k KEY)")
    if smooth < 0:
        raise ValueError(f"smooth must be >= 0 logged values, got {smooth}")
    fmt = FORMATS.get(Path(os.fspath(out)).suffix.lower())
    if fmt is None:
        raise ValueError(f"output must end in one of {sorted(FORMATS)}, got {os.fspath(out)!r}")
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("rllog plot needs matplotlib: pip install 'rllog[plot]'") from exc

    views = [open_run(r) for r in runs]
    labels = _labels([v.url if v.index_name == "index.html" else f"{v.url}/{v.index_name}" for v in views])
    if x is None:
        x = "progress/batch" if all("progress/batch" in v.metrics.columns for v in views) else "step"
    lines: list[PlottedLine] = []
    numbers = {key: [v for v in views if _has_numbers(v, key)] for key in keys}
    for key in keys:
        if not any(key in v.metrics.columns for v in views):
            known = list(dict.fromkeys(c for v in views for c in v.metrics.columns if c != v.step_key))
            check_keys([key], known, " or ".join(v.url for v in views))
    empty = [k for k in keys if not numbers[k]]
    if len(empty) == len(keys):
        raise ValueError(
            f"no run has numeric values for {empty}: nothing to plot (string-valued metrics cannot be drawn)"
        )
    for key in empty:
        warnings.warn(
            f"{key!r} has no numeric values in any run (string-valued?); its panel is empty",
            RuntimeWarning,
            stacklevel=2,
        )
    with matplotlib.rc_context({"path.simplify": False, "svg.hashsalt": "rllog", "svg.fonttype": "none"}):
        fig = Figure(figsize=(width, panel_height * len(keys)), layout="constrained")
        axes = fig.subplots(len(keys), 1, squeeze=False)[:, 0]
        colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        for ax, key in zip(axes, keys, strict=False):
            for r, (view, label) in enumerate(zip(views, labels, strict=False)):
                df = view.metrics
                if key not in df.columns:
                    continue
                x_key = x if x in df.columns else (view.step_key or "row")
                xs = (
                    pd.to_numeric(df[x_key], errors="coerce")
                    if x_key in df.columns
                    else pd.Series(np.arange(len(df)), dtype=float)
                )
                ys = pd.to_numeric(df[key], errors="coerce")
                keep = ys.notna().to_numpy() | np.isin(np.arange(len(df)), _logged_bad_rows(view, key))
                keep &= xs.notna().to_numpy()
                xv = xs.to_numpy(dtype=float)[keep]
                yv = ys.to_numpy(dtype=float)[keep]
                yv = np.where(np.isfinite(yv), yv, np.nan)
                color = colors[r % len(colors)]
                gid = f"rllog-line-{r}-{keys.index(key)}"
                if smooth > 1:
                    finite = np.isfinite(yv)
                    drawn = np.full_like(yv, np.nan)
                    drawn[finite] = pd.Series(yv[finite]).rolling(smooth, min_periods=1).mean().to_numpy()
                    ax.plot(xv, yv, color=color, alpha=0.25, linewidth=1)
                    ax.plot(xv[finite], drawn[finite], color=color, linewidth=1.6, label=label, gid=gid)
                else:
                    drawn = yv
                    ax.plot(xv, yv, color=color, linewidth=1.4, label=label, gid=gid)
                lines.append(PlottedLine(run=label, key=key, x_key=x_key, x=xv, y=yv, y_drawn=drawn, gid=gid))
            ax.set_title(key, loc="left", fontsize=10, fontfamily="monospace")
            shown = [ln.y[np.isfinite(ln.y)] for ln in lines if ln.key == key]
            values = np.concatenate(shown) if shown else np.array([])
            with np.errstate(over="ignore"):
                huge = values.size > 0 and not np.isfinite((values.max() - values.min()) * 1.2)
            if huge:  # a linear axis this wide overflows matplotlib's tick arithmetic
                ax.set_yscale("symlog")
            ax.set_xlabel(x)
            ax.grid(True, alpha=0.3)
            if len(views) > 1:
                ax.legend(fontsize=8, loc="best")
        buf = io.BytesIO()
        with np.errstate(over="ignore"):  # a symlog axis near the float limit overflows harmlessly
            fig.savefig(buf, format=fmt, dpi=110)
    write_bytes(os.fspath(out), buf.getvalue())
    return lines


def _has_numbers(view: Any, key: str) -> bool:
    """True if ``key`` has a number (finite, or logged as NaN/Inf) in the run."""
    import pandas as pd

    if key not in view.metrics.columns:
        return False
    return bool(view.nonfinite.get(key)) or bool(
        pd.to_numeric(view.metrics[key], errors="coerce").notna().any()
    )


def _logged_bad_rows(view: Any, key: str) -> np.ndarray:
    """Row positions where ``key`` was logged as NaN/Inf (drawn as gaps, not skipped)."""
    import numpy as np

    steps = view.nonfinite.get(key)
    if not steps or view.step_key not in view.metrics.columns:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(view.metrics[view.step_key].isin(steps).to_numpy())
