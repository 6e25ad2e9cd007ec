"""index.html: built from synthetic and real runs, opened in a real headless chromium."""

from __future__ import annotations

import json
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
    paths = [a for t, a in dom.tags if t == "path" and a.get("class", "").split()[:1] == ["series"]]
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


# --- smoothing, run metadata, reward column ------------------------------------------------


def _figure_paths(html: str, key: str) -> tuple[list[str], list[str]]:
    """The raw and the smoothed path ``d`` strings of the chart of ``key``."""
    figure = html.split(f'data-key="{key}"', 1)[1].split("</figure>", 1)[0]
    raw = re.findall(r'<path class="series[^"]*" d="([^"]+)"', figure)
    smoothed = re.findall(r'<path class="smoothed" d="([^"]+)"', figure)
    return raw, smoothed


def test_index_draws_tensorboards_debiased_ema_beside_the_raw_line(tmp_path):
    values = [float(i % 2) + i / 100 for i in range(60)]  # a zig-zag, every value distinct
    run = write_run(tmp_path / "run", [{"step": i, "reward": v} for i, v in enumerate(values)])
    write_index(run, smooth=0.8)
    html = (run / "index.html").read_text()
    (raw,), (smoothed,) = _figure_paths(html, "reward")
    raw_pts, smooth_pts = _points(raw), _points(smoothed)
    assert len(raw_pts) == len(smooth_pts) == 60 and 'class="series raw"' in html
    # the raw line's pixels give the value -> pixel map; the EMA is checked against it
    (_, p0), (_, p1) = raw_pts[0], raw_pts[1]
    scale = (p1 - p0) / (values[1] - values[0])
    last = debias = 0.0
    for (sx, sy), (rx, _), v in zip(smooth_pts, raw_pts, values, strict=True):
        last, debias = last * 0.8 + 0.2 * v, debias * 0.8 + 0.2
        assert sx == rx and sy == pytest.approx(p0 + (last / debias - values[0]) * scale, abs=0.02)
    assert "weight 0.8" in html
    write_index(run, smooth=0.0)
    assert _figure_paths((run / "index.html").read_text(), "reward")[1] == []
    with pytest.raises(ValueError, match=r"smooth must be in \[0, 1\)"):
        write_index(run, smooth=1.0)
    res = CliRunner().invoke(main, ["index", str(run), "--smooth", "0.3"])
    assert res.exit_code == 0, res.output
    assert "weight 0.3" in (run / "index.html").read_text()
    assert CliRunner().invoke(main, ["index", str(run), "--smooth", "1"]).exit_code != 0


def test_sparse_charts_are_not_smoothed(tmp_path):
    run = write_run(tmp_path / "run", [{"step": i, "eval/acc": 0.5} for i in range(0, 100, 10)])
    write_index(run)
    assert _figure_paths((run / "index.html").read_text(), "eval/acc")[1] == []


def _meta_rows(html: str) -> dict[str, str]:
    import html as _html

    return {
        k: _html.unescape(v)
        for k, v in re.findall(
            r'<tr data-meta="([^"]+)"><td class="ck">[^<]*</td><td class="val">([^<]*)</td>', html
        )
    }


def test_index_shows_run_metadata_from_run_status_and_code_diff(tmp_path):
    from rllog import RunLogger

    run = tmp_path / "run"
    with RunLogger(run, index=False) as logger:
        logger.log_metrics(0, {"loss": 1.0})
    (run / "code.diff").write_text(
        "# rllog code.diff\n# host: node-17\n"
        f"# command: /usr/bin/python train.py --name {XSS}\n"
        "# working directory: /home/me/proj\n# repository: /home/me/proj\n"
        "# commit: 3f2c0e1 (branch main)\n+ a diff line: not metadata\n# commit: not the header\n"
    )
    status = json.loads((run / "run_status.json").read_text())
    write_index(run)
    html = (run / "index.html").read_text()
    meta = _meta_rows(html)
    assert meta["status"] == "finished" and meta["host"] == "node-17"
    assert meta["commit"] == "3f2c0e1 (branch main)" and meta["working directory"] == "/home/me/proj"
    assert meta["command"] == f"/usr/bin/python train.py --name {XSS}"
    assert "<script" not in html and "<img" not in html  # the command is text
    started = status["first_started_at"][:19].replace("T", " ")
    assert (
        meta["started"] == started + " UTC"
        and meta["ended"] == status["ended_at"][:19].replace("T", " ") + " UTC"
    )
    assert re.fullmatch(r"\d+s", meta["duration"])
    # a writer killed before close: the marker still says running, nobody holds the lock
    (run / "run_status.json").write_text(
        json.dumps({**status, "state": "running", "starts": 3, "ended_at": None})
    )
    write_index(run)
    meta = _meta_rows((run / "index.html").read_text())
    assert meta["status"] == "crashed, resumed 2 times" and "ended" not in meta and "duration" not in meta


def test_the_page_a_logger_writes_at_close_says_finished(tmp_path):
    from rllog import RunLogger

    with RunLogger(tmp_path / "run") as logger:
        logger.log_metrics(0, {"loss": 1.0})
    assert _meta_rows((tmp_path / "run" / "index.html").read_text())["status"] == "finished"


def _reward_cells(html: str) -> dict[int, dict[str, str]]:
    section = html.split('<section id="iterations">', 1)[1].split("</section>", 1)[0]
    out = {}
    for it, cells in re.findall(r'<tr><td class="num narrow">(\d+)</td>(.*?)<td class="reports">', section):
        out[int(it)] = dict(re.findall(r'data-col="(\w+)">([^<]*)</td>', cells))
    return out


def test_iteration_list_has_the_reward_of_the_metrics_row(tmp_path):
    rows = [{"step": i, "env/all/reward/total": 0.25 * i, "env/all/correct": i / 4} for i in range(4)]
    files = [f"train_iteration_{i:06d}.html" for i in (1, 3)]
    run = write_run(tmp_path / "run", rows, files=files)
    write_index(run)
    html = (run / "index.html").read_text()
    assert '<th class="narrow">reward</th>' in html and '<th class="narrow">accuracy</th>' in html
    assert _reward_cells(html) == {
        1: {"reward": "0.25", "accuracy": "0.25"},
        3: {"reward": "0.75", "accuracy": "0.75"},
    }


def test_iteration_list_has_the_mean_reward_of_the_rollout_summaries(tmp_path):
    run = write_run(
        tmp_path / "run", [{"step": i, "loss": 1.0} for i in range(3)], files=["train_iteration_000002.html"]
    )

    def record(reward: float, correct: bool) -> dict:
        step = {
            "step_idx": 0,
            "ob_len": 3,
            "ac_len": 4,
            "reward": reward,
            "episode_done": True,
            "metrics": {"correct": correct},
        }
        return {
            "schema_version": 1,
            "split": "train",
            "iteration": 2,
            "group_idx": 0,
            "traj_idx": 0,
            "total_reward": reward,
            "final_reward": 0.0,
            "steps": [step],
        }

    (run / "train_iteration_000002_rollout_summaries.jsonl").write_text(
        "".join(
            json.dumps(record(r, c)) + "\n" for r, c in [(1.0, True), (0.0, False), (0.5, False), (0.5, True)]
        )
    )
    write_index(run)
    assert _reward_cells((run / "index.html").read_text()) == {2: {"reward": "0.5", "accuracy": "0.5"}}


def test_no_reward_column_without_rewards(tmp_path):
    run = write_run(tmp_path / "run", [{"step": 0, "loss": 1.0}], files=["train_iteration_000000.html"])
    write_index(run)
    html = (run / "index.html").read_text()
    assert _reward_cells(html) == {0: {}} and ">reward</th>" not in html


def test_index_of_a_run_with_a_non_numeric_step_value(tmp_path):
    # one row whose step is a string (another tool's writer) made the page fail with
    # "could not convert string to float: 'abc'"; summary, doctor and tail read the same file
    (tmp_path / "metrics.jsonl").write_text(
        '{"step":0,"loss":1.0}\n{"step":"abc","loss":2.0}\n{"step":2,"loss":3.0}\n'
    )
    result = CliRunner().invoke(main, ["index", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "loss" in (tmp_path / "index.html").read_text()
