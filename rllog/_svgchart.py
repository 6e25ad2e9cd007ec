"""Line-chart geometry for the run index page, drawn as inline SVG by ``templates/index.html``.

Python computes coordinates only (in the chart's viewBox units); the template writes
the elements, so every piece of logged text goes through jinja2's autoescape.

Points that are logged NaN/±Inf break the line (a gap) and get a marker on the bottom
edge; rows where the metric is missing are skipped and the line joins its neighbours
(sparse metrics such as eval every 10 steps stay one line). Series longer than
``max_points`` are thinned per pixel column to first/min/max/last, which keeps spikes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

WIDTH, HEIGHT = 480, 220
LEFT, RIGHT, TOP, BOTTOM = 52, 10, 10, 26


@dataclass
class Chart:
    """One metric's chart: ``paths`` are SVG path ``d`` strings, one per unbroken segment."""

    key: str
    x_label: str
    paths: list[str] = field(default_factory=list)
    smoothed: list[str] = field(default_factory=list)  # the EMA line's segments (empty: not smoothed)
    smooth: float = 0.0  # the EMA weight of ``smoothed``
    dots: list[tuple[float, float]] = field(default_factory=list)  # one-point segments
    markers: list[tuple[float, float]] = field(default_factory=list)  # every drawn point of a sparse series
    gaps: list[tuple[float, str]] = field(default_factory=list)  # (x, "NaN at step 7")
    xticks: list[tuple[float, str]] = field(default_factory=list)
    yticks: list[tuple[float, str]] = field(default_factory=list)
    points: int = 0  # drawn points (after thinning)
    rows: int = 0  # logged values, finite or not
    last: str = ""
    flagged: str = ""  # the worst doctor severity on this metric, if any
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values inside [lo, hi]: steps of 1, 2 or 5 x 10^k, the smallest giving at most
    ``n`` intervals (so 2 to n + 1 ticks)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if (hi - lo) / (m * mag) <= n)  # at most n intervals
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    k = 0
    while first + k * step <= hi + step * 1e-9:
        out.append(first + k * step)
        k += 1
    return out


def _label(v: float, digits: int = 4) -> str:
    if v == 0:
        return "0"
    if abs(v) < 1e5 and v == round(v):
        return str(round(v))
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.{max(1, digits - 2)}e}".replace("e+0", "e").replace("e-0", "e-")
    return f"{v:.{digits}g}"


def tick_labels(values: list[float]) -> list[str]:
    """Labels for tick ``values``: the fewest significant digits (3 to 16) that tell them apart."""
    for digits in range(3, 17):
        labels = [_label(v, digits) for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return labels


def ema(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's debiased exponential moving average of ``y`` (finite float64 values, in x order).

    ``last = last * w + (1 - w) * y_i``; ``smoothed_i = last / (1 - w ** (i + 1))`` (the
    debiasing divides out the zero start), as in TensorBoard's scalar dashboard
    (``classicSmoothing`` in tensorboard/webapp/widgets/line_chart_v2).
    Returns a float64 array as long as ``y``; about 30 ms for 100k points.
    """
    import numpy as np

    out = np.empty(len(y))
    last = 0.0
    debias = 0.0
    w = float(weight)
    for i, v in enumerate(y.tolist()):
        last = last * w + (1.0 - w) * v
        debias = debias * w + (1.0 - w)
        out[i] = last / debias
    return out


def _thin(x: np.ndarray, y: np.ndarray, max_points: int) -> np.ndarray:
    """Indices to draw: all if few, else first/min/max/last of each of ``max_points // 4`` x-buckets."""
    import numpy as np

    n = len(x)
    if n <= max_points:
        return np.arange(n)
    buckets = max(1, max_points // 4)
    lo, hi = float(x.min()), float(x.max())
    b = np.minimum(((x - lo) / ((hi - lo) or 1.0) * buckets).astype(np.int64), buckets - 1)
    keep: set[int] = set()
    order = np.argsort(b, kind="stable")
    bounds = np.flatnonzero(np.diff(b[order])) + 1
    for grp in np.split(order, bounds):
        ys = y[grp]
        keep.update((int(grp[0]), int(grp[-1]), int(grp[np.argmin(ys)]), int(grp[np.argmax(ys)])))
    return np.asarray(sorted(keep))


def line_chart(
    key: str,
    x: np.ndarray,
    y: np.ndarray,
    logged_bad: np.ndarray,
    x_label: str = "step",
    max_points: int = 1200,
    markers: bool = False,
    smooth: float = 0.0,
) -> Chart:
    """Chart of ``y`` against ``x`` (same length, rows where the metric was logged).

    ``logged_bad`` marks values that were logged as NaN/±Inf (gap plus marker); other
    non-finite entries of ``y`` must already be removed by the caller. ``markers``
    puts a point marker on every drawn value (for sparse series, where a line alone
    hides how few values there are). ``smooth``: the weight in [0, 1) of :func:`ema`, run
    over the finite values in order; when > 0 and the series is not sparse (no
    ``markers``), ``smoothed`` holds that line beside the raw one (TensorBoard's view).
    """
    import numpy as np

    c = Chart(key=key, x_label=x_label, rows=len(y))
    finite = np.isfinite(y) & ~logged_bad
    if not finite.any() and not logged_bad.any():
        return c
    fx, fy = x[finite], y[finite]
    xlo, xhi = (float(x.min()), float(x.max())) if len(x) else (0.0, 1.0)
    if xhi == xlo:
        xlo, xhi = xlo - 1, xhi + 1
    if len(fy):
        ylo, yhi = float(fy.min()), float(fy.max())
        c.last = _label(float(fy[-1]))
    else:
        ylo, yhi = 0.0, 1.0
    if yhi == ylo:
        pad = abs(ylo) * 0.1 or 1.0
        ylo, yhi = ylo - pad, yhi + pad
    else:
        pad = (yhi - ylo) * 0.05
        ylo, yhi = ylo - pad, yhi + pad

    def px(v: float) -> float:
        return round(c.left + (v - xlo) / (xhi - xlo) * (c.right - c.left), 2)

    def py(v: float) -> float:
        return round(c.bottom - (v - ylo) / (yhi - ylo) * (c.bottom - c.top), 2)

    xt = nice_ticks(xlo, xhi, 6)
    if len(x) and bool(np.all(x == np.round(x))):  # integer steps: no tick at step 0.5
        xt = [v for v in xt if abs(v - round(v)) < 1e-9]
    yt = nice_ticks(ylo, yhi, 5)
    c.xticks = list(zip(map(px, xt), tick_labels(xt), strict=False))
    c.yticks = list(zip(map(py, yt), tick_labels(yt), strict=False))
    # split at logged NaN/Inf: segment ids increase after each bad value
    seg_id = np.cumsum(logged_bad)[finite]
    ey = ema(fy, smooth) if smooth > 0 and not markers and len(fy) > 1 else None
    c.smooth = smooth if ey is not None else 0.0
    for sid in np.unique(seg_id):
        sel = seg_id == sid
        sx, sy = fx[sel], fy[sel]
        idx = _thin(sx, sy, max_points)
        pts = [(px(float(sx[i])), py(float(sy[i]))) for i in idx]
        c.points += len(pts)
        if markers and len(pts) > 1:
            c.markers += pts
        if len(pts) == 1:
            c.dots.append(pts[0])
        else:
            c.paths.append("M" + " L".join(f"{a} {b}" for a, b in pts))
        if ey is not None and len(sx) > 1:
            sey = ey[sel]
            pts = [(px(float(sx[i])), py(float(sey[i]))) for i in _thin(sx, sey, max_points)]
            c.smoothed.append("M" + " L".join(f"{a} {b}" for a, b in pts))
    for xv, yv in zip(x[logged_bad], y[logged_bad], strict=False):
        what = "NaN" if math.isnan(yv) else ("Infinity" if yv > 0 else "-Infinity")
        c.gaps.append((px(float(xv)), f"{what} at {x_label} {_label(float(xv))}"))
    return c
