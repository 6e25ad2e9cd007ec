"""index.html: built from synthetic and real runs, opened in a real headless chromium."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from _doctor_runs import healthy_rows, planted, real_runs, write_run
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from realdata import REALDATA, needs, needs_full

from rllog.cli import main
from rllog.index import write_index

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (apt-get install -y chromium)"
)
XSS = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned2'\">"


class _Dom(HTMLParser):
    """Tags with attributes, the <title> text and all text, from chromium's --dump-dom output."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.title, self.text, self._in_title = "", [], False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_title = tag == "title" and not any(t == "svg" for t, _ in self.tags[:-1]) and not self.title

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self._in_title = False

    def handle_data(self, data):
        if self._in_title:
            self.title += data
        self.text.append(data)

    def find(self, tag, **attrs):
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def _chromium(*args: str, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'chromium-profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _points(d: str) -> list[tuple[float, float]]:
    return [(float(a), float(b)) for a, b in re.findall(r"[ML]\s*(-?[\d.]+)\s+(-?[\d.]+)", d)]


def _xss_run(tmp_path):
    rows = healthy_rows(30)
    for i, row in enumerate(rows):
        row[XSS] = math.nan if i == 3 else float(i)  # a finding: the name is charted and in the doctor's list
        row["loss/value_avg"] = math.nan if i in (10, 11) else row["loss/value_avg"]
    config = {"model_name": XSS, XSS: {"lr": 1e-5}, "eps": 0.2}
    ckpts = [{"name": XSS, "batch": 5, "state_path": "tinker://x/000005"}]
    return write_run(
        tmp_path / "run",
        rows,
        config,
        ckpts,
        files=[
            "train_iteration_000000.html",
            "eval_test_iteration_000000.html",
            "train_iteration_000001.html",
        ],
    )


def test_index_html_structure(tmp_path):
    run = _xss_run(tmp_path)
    url, findings = write_index(run)
    assert url == f"{run}/index.html"
    html = (run / "index.html").read_text()
    assert [f.metric for f in findings] == ["loss/value_avg", XSS]
    assert "<script" not in html and "<img" not in html and 'onerror="' not in html
    assert "&lt;script&gt;document.title=" in html  # shown as text
    assert (
        "default-src &#39;none&#39;" in html or "default-src 'none'" in html
    )  # CSP: no scripts, no requests
    assert (
        not re.search(r"""(src|href)=["']?(https?:)?//""", html)
        and "<link" not in html
        and "url(" not in html
    )
    assert html.count('<figure class="chart') >= 10
    assert (
        'href="./train_iteration_000001.html"' in html and 'href="./eval_test_iteration_000000.html"' in html
    )
    assert not list(run.glob(".*.tmp"))  # atomic write left no temp file


def test_index_cli(tmp_path):
    run = write_run(tmp_path / "ok", planted("ratio"))
    res = CliRunner().invoke(main, ["index", str(run)])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and (run / "index.html").stat().st_size > 10_000
    assert CliRunner().invoke(main, ["index", str(tmp_path / "missing")]).exit_code != 0


@needs_chromium
def test_index_in_headless_chromium(tmp_path):
    run = _xss_run(tmp_path)
    write_index(run)
    page = (run / "index.html").as_uri()
    dom = _Dom(_chromium("--dump-dom", page, tmp_path=tmp_path).stdout)
    assert dom.title == "run · rllog run"  # no planted script changed it
    assert not dom.find("script") and not dom.find("img")
    assert XSS in "".join(dom.text)  # the planted markup is visible as text
    figures = dom.find("figure")
    assert len(figures) >= 10
    charts = {f["data-key"]: f for f in figures}
    assert XSS in charts  # the chart of the hostile metric name exists, captioned as text
    # every figure draws as many points as it claims; the reward chart has one per step
    paths = [a for t, a in dom.tags if t == "path" and a.get("class") == "series"]
    assert sum(len(_points(p["d"])) for p in paths) + len(dom.find("circle")) == sum(
        int(f["data-points"]) for f in figures
    )
    assert charts["env/all/reward/total"]["data-points"] == "30"
    # the NaN value loss: 2 gap markers, 28 points in 2 segments
    vl = charts["loss/value_avg"]
    assert (vl["data-points"], vl["data-gaps"], vl["data-rows"]) == ("28", "2", "30")
    assert len(dom.find("g", **{"class": "nan-marker"})) == 2 + 1  # and 1 in the planted metric

    shot = tmp_path / "shot.png"
    _chromium("--hide-scrollbars", "--window-size=1280,1600", f"--screenshot={shot}", page, tmp_path=tmp_path)
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 1600)
    colors = img.getcolors(maxcolors=1 << 20)
    assert len(colors) > 50  # not blank
    line = sum(n for n, (r, g, b) in colors if b > 180 and r < 110 and 80 < g < 150)  # --line #2f6fdb
    assert line > 2000, line  # the chart lines were painted


@needs_full
def test_index_of_every_real_run(tmp_path):
    runs = real_runs(tmp_path)
    for name, run in runs.items():
        write_index(run)
        html = (run / "index.html").read_text()
        assert html.count('<figure class="chart') >= 3, name
    v2p7 = next(p for n, p in runs.items() if n.endswith("logs_v2p7/metrics.jsonl"))
    html = (v2p7 / "index.html").read_text()
    assert (
        'href="./train_iteration_000000.html"' in html and 'href="./eval_test_iteration_000000.html"' in html
    )
    assert html.count("tinker://e38e0fcc") == 2 * 23  # state_path and sampler_path of 23 checkpoints
    assert 'data-key="env/all/reward/total" data-points="113"' in html


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e9, 1e9), st.floats(1e-9, 1e9))
def test_ticks_cover_the_range_with_distinct_labels(lo, span):
    from rllog._svgchart import nice_ticks, tick_labels

    hi = lo + span
    ticks = nice_ticks(lo, hi, 5)
    if hi == lo:  # span lost to float rounding
        return
    assert 2 <= len(ticks) <= 11
    tol = 1e-9 * span + 1e-12 * max(abs(lo), abs(hi))  # float rounding only
    assert all(lo - tol <= t <= hi + tol for t in ticks)
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(labels) or span < 1e-6 * abs(lo)


@needs(REALDATA / "tinker/arvindcr4__tinker-rl-lab/experiments/results/distillation_on_metrics.jsonl")
def test_index_beside_single_metrics_files(tmp_path):
    src = REALDATA / "tinker/arvindcr4__tinker-rl-lab/experiments/results"
    for name in ("arithmetic_metrics.jsonl", "arithmetic_checkpoints.jsonl", "distillation_on_metrics.jsonl"):
        shutil.copyfile(src / name, tmp_path / name)
    url, findings = write_index(tmp_path / "arithmetic_metrics.jsonl")
    assert url == f"{tmp_path}/arithmetic_index.html" and [f.check for f in findings] == ["entropy_collapse"]
    html = (tmp_path / "arithmetic_index.html").read_text()
    assert "6 checkpoints" in html and 'data-key="optim/entropy" data-points="100"' in html
    shutil.copyfile(
        REALDATA / "trl/Rusheel86__Chaos-Economy/trainer_state.json", tmp_path / "trainer_state.json"
    )
    url, findings = write_index(tmp_path / "trainer_state.json")
    assert url.endswith("/trainer_state_index.html") and "clipped_completions" in {f.check for f in findings}


def test_index_extra_keys_out_elsewhere_sparse_markers_and_config_keys(tmp_path):
    rows = healthy_rows(40)
    for i, row in enumerate(rows):
        row["my/custom"] = float(i % 7)
        if i % 10 == 0:
            row["test/reward"] = i / 40  # an eval every 10 steps: sparse
    config = {"optimizer": {"learning_rate_schedule_warmup_steps": 100}, "note": "a long value " * 20}
    run = write_run(tmp_path / "run", rows, config, files=["train_iteration_000003.html"])
    run.chmod(0o555)  # a read-only run
    try:
        out = tmp_path / "site" / "page.html"
        out.parent.mkdir()
        res = CliRunner().invoke(
            main, ["index", str(run), "-k", "my/custom", "-k", "test/reward", "-o", str(out)]
        )
        assert res.exit_code == 0, res.output
        assert not (run / "index.html").exists()
    finally:
        run.chmod(0o755)
    html = out.read_text()
    keys = re.findall(r'<figure class="chart[^"]*" data-key="([^"]+)"', html)
    assert keys[:2] == ["my/custom", "test/reward"]
    assert 'href="../run/train_iteration_000003.html"' in html  # links into the run from elsewhere
    figures = {
        m.group(1): m.group(0) for m in re.finditer(r'data-key="([^"]+)".*?</figure>', html, re.DOTALL)
    }
    assert figures["test/reward"].count('class="pt"') == 4  # every value of the sparse metric marked
    assert 'class="pt"' not in figures["my/custom"]  # 40 values, every step: a plain line
    assert '<td class="ck">optimizer.learning_rate_schedule_warmup_steps</td>' in html
    res = CliRunner().invoke(main, ["index", str(run), "-k", "nope"])
    assert res.exit_code == 2 and "'nope' is not a metric" in res.output
