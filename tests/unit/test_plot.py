"""rllog plot: PNG/SVG files whose drawn data matches the metrics."""

from __future__ import annotations

import math
import re
import struct
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from _doctor_runs import REALDATA, healthy_rows, write_run
from click.testing import CliRunner

from rllog.cli import main
from rllog.plot import plot_runs

pytest.importorskip("matplotlib")
SVG = "{http://www.w3.org/2000/svg}"


def _svg_lines(path) -> dict[str, list[list[tuple[float, float]]]]:
    """{gid: [subpath points, ...]} of the lines plot_runs tagged."""
    out = {}
    for g in ET.parse(path).getroot().iter(f"{SVG}g"):
        gid = g.get("id", "")
        if gid.startswith("rllog-line-"):
            d = g.find(f"{SVG}path").get("d")
            subpaths = [
                re.findall(r"(-?[\d.]+) (-?[\d.]+)", part) for part in re.split(r"(?=M)", d) if part.strip()
            ]
            out[gid] = [[(float(a), float(b)) for a, b in sp] for sp in subpaths]
    return out


def _affine_ok(data: np.ndarray, drawn: np.ndarray) -> bool:
    """drawn == a * data + b for some a != 0 (the axes' transform), to 1e-3 px."""
    a, b = np.polyfit(data, drawn, 1)
    return abs(a) > 0 and np.max(np.abs(a * data + b - drawn)) < 1e-3


def test_svg_points_match_the_metrics_of_two_runs(tmp_path):
    rows_a, rows_b = healthy_rows(30, seed=1), healthy_rows(45, seed=2)
    rows_b[10]["optim/entropy"] = math.nan  # a logged NaN: the line breaks in two
    a, b = write_run(tmp_path / "a", rows_a), write_run(tmp_path / "b", rows_b)
    out = tmp_path / "p.svg"
    lines = plot_runs([a, b], ["env/all/reward/total", "optim/entropy"], out)
    assert [(l.run, l.key) for l in lines] == [
        ("a", "env/all/reward/total"),
        ("b", "env/all/reward/total"),
        ("a", "optim/entropy"),
        ("b", "optim/entropy"),
    ]
    drawn = _svg_lines(out)
    assert set(drawn) == {l.gid for l in lines}
    for line, _rows in zip(lines, [rows_a, rows_b, rows_a, rows_b], strict=False):
        expect = pd.read_json(tmp_path / line.run / "metrics.jsonl", lines=True, precise_float=True)[
            line.key
        ].to_numpy(dtype=float)
        np.testing.assert_array_equal(line.y, expect)  # the data used is what was logged
        assert line.x_key == "progress/batch"
        pts = np.asarray([p for sub in drawn[line.gid] for p in sub])
        finite = np.isfinite(expect)
        assert len(pts) == finite.sum()
        assert _affine_ok(expect[finite], pts[:, 1]) and _affine_ok(line.x[finite], pts[:, 0])
    assert [len(sp) for sp in drawn[lines[3].gid]] == [10, 34]


def test_png_is_valid_and_sized(tmp_path):
    run = write_run(tmp_path / "r", healthy_rows(20))
    out = tmp_path / "p.png"
    CliRunner().invoke(
        main,
        ["plot", str(run), "-k", "reward", "-k", "kl", "-k", "entropy", "-o", str(out)],
        catch_exceptions=False,
    )
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (880, round(3 * 2.6 * 110))  # 8 in x 110 dpi, 2.6 in per panel
    assert len(data) > 20_000


def test_smoothing_is_a_trailing_rolling_mean(tmp_path):
    rows = healthy_rows(25)
    run = write_run(tmp_path / "r", rows)
    (line,) = plot_runs([run], ["reward"], tmp_path / "s.svg", smooth=4, x="step")
    raw = np.asarray([r["reward"] for r in rows])
    expect = [raw[max(0, i - 3) : i + 1].mean() for i in range(len(raw))]
    np.testing.assert_allclose(line.y_drawn, expect)
    pts = np.asarray(_svg_lines(tmp_path / "s.svg")[line.gid][0])
    assert _affine_ok(np.asarray(expect), pts[:, 1]) and line.x_key == "step"


def test_errors(tmp_path):
    run = write_run(tmp_path / "r", healthy_rows(5))
    with pytest.raises(ValueError, match="'nope' is not a metric"):
        plot_runs([run], ["nope"], tmp_path / "p.png")
    with pytest.raises(ValueError, match=r"\.png"):
        plot_runs([run], ["reward"], tmp_path / "p.gif")
    res = CliRunner().invoke(main, ["plot", str(run), "-k", "nope", "-o", str(tmp_path / "p.png")])
    assert res.exit_code == 2 and "nope" in res.output and not (tmp_path / "p.png").exists()


@pytest.mark.skipif(not REALDATA.is_dir(), reason=f"real data folder missing: {REALDATA}")
def test_real_runs_overlaid(tmp_path):
    import shutil

    runs = []
    for name in ("logs_v2", "logs_v2p7"):
        src = REALDATA / "tinker/sushantmehta-code__tinker-cookbook" / name / "metrics.jsonl"
        (tmp_path / name).mkdir()
        shutil.copyfile(src, tmp_path / name / "metrics.jsonl")
        runs.append(tmp_path / name)
    lines = plot_runs(
        runs, ["env/all/reward/total", "test/env/all/reward/total"], tmp_path / "p.svg", smooth=5
    )
    assert [len(l.y) for l in lines] == [29, 113, 3, 23]  # eval rows are sparse: only rows that have them
    drawn = _svg_lines(tmp_path / "p.svg")
    assert [sum(map(len, drawn[l.gid])) for l in lines] == [len(l.y) for l in lines]


def test_string_valued_metric_is_reported_not_drawn_silently(tmp_path):
    rows = [{**r, "phase": "warmup" if r["step"] < 5 else "main"} for r in healthy_rows(10)]
    run = write_run(tmp_path / "run", rows)
    res = CliRunner().invoke(
        main, ["plot", str(run), "-k", "phase", "-k", "reward", "-o", str(tmp_path / "p.svg")]
    )
    assert res.exit_code == 0 and "warning: 'phase' has no numeric values in any run" in res.stderr
    assert (tmp_path / "p.svg").exists()
    res = CliRunner().invoke(main, ["plot", str(run), "-k", "phase", "-o", str(tmp_path / "q.svg")])
    assert (
        res.exit_code == 2
        and "no run has numeric values for ['phase']" in res.stderr
        and not (tmp_path / "q.svg").exists()
    )


def test_values_near_the_float_limit_are_drawn_not_a_crash(tmp_path):
    """A linear axis from -8e307 to 8e307 overflows matplotlib's ticks ("arange: cannot
    compute length"); the chart switches to a symlog axis and keeps every point."""
    rows = [{"step": i, "x": 8e307 * (-1) ** i, "y": float(i)} for i in range(6)]
    run = write_run(tmp_path / "r", rows)
    out = tmp_path / "p.png"
    result = CliRunner().invoke(main, ["plot", str(run), "-k", "x", "-k", "y", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "overflow" not in result.output
