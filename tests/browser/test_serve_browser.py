"""``rllog serve`` in a real browser: Debian's chromium driven by Playwright (no browser download).

One server (uvicorn on 127.0.0.1, a free port) over a folder of runs written for the test
(a finished demo run, a killed writer, a live writer, a run full of XSS payloads), the
real runs in shared/realdata, and a bucket run on the GCS emulator. Screenshots of every
page at 1400 px and 400 px go to the test's tmp folder (printed), never into the repo.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"BROWSER TESTS SKIPPED: no chromium at {CHROMIUM} (apt-get install chromium; .ci/run does it)",
        allow_module_level=True,
    )
playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="BROWSER TESTS SKIPPED: pip install playwright"
)
uvicorn = pytest.importorskip("uvicorn")

from servers import free_port  # noqa: E402  # tests/ is on sys.path (conftest), after the skips

from rllog import RunLogger, logtree  # noqa: E402  # after the module-level skips
from rllog.serve import create_app  # noqa: E402

REALDATA = Path(__file__).resolve().parents[2].parent / "shared" / "realdata"
XSS = '<img src=x onerror="window.__xss=(window.__xss||0)+1">'
XSS2 = "<script>window.__xss=(window.__xss||0)+1</script>"
PLANTED = "zebra-planted-4242 is the answer"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]  # fmt: skip


def _write_xss_run(path: Path) -> None:
    with RunLogger(path, config={"lr": XSS, XSS: XSS2, "model": "tiny"}, code_diff=False) as lg:
        for i in range(5):
            lg.log_metrics(i, {XSS: float(i), "env/all/reward/total": 0.1 * i, f"test/{XSS2}": 1.0})
        group = [
            {
                "steps": [{"ob_len": 3, "ac_len": 4, "reward": r, "logs": {"prompt": XSS, "answer": a}}],
            }
            for r, a in ((1.0, XSS2), (0.0, PLANTED))
        ]
        lg.log_rollouts(0, [group])
        lg.log_rollouts(0, [group], eval_name=XSS)
        with lg.evaluation(XSS, 0):
            pass


def _killed_run(path: Path) -> None:
    code = (
        "import os, sys; from rllog import RunLogger\n"
        "lg = RunLogger(sys.argv[1], code_diff=False)\n"
        "for i in range(4): lg.log_metrics(i, {'loss': 1.0 / (i + 1)})\n"
        "os._exit(9)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", code, str(path)], env=env, check=False, timeout=60)


LONG_NAME = "a-very-long-run-name-" * 8
EVAL_TRAIN = "evaluator-named-train-777"
LOGTREE_PLANTED = "okapi-in-the-logtree-5151"


def _write_review_runs(root: Path) -> None:
    """Runs for the review's page fixes: numeric config values, NaN/Infinity and a flat metric,
    an evaluator named "train", a very long name."""
    for batch in (128, 8, 16):
        with RunLogger(root / "cfg" / f"b{batch}", config={"batch_size": batch}, code_diff=False) as lg:
            for i in range(6):
                weird = {1: math.nan, 2: math.inf, 3: -math.inf}.get(i, float(i))
                lg.log_metrics(i, {"loss": 1.0 / (i + 1) + batch, "weird": weird, "flat": 7.0 if i % 2 else 6.9999999,
                                   "time/total": 2.0})  # fmt: skip
            if batch == 8:
                sample = lambda text: [
                    {"steps": [{"ob_len": 1, "ac_len": 1, "reward": 1.0, "logs": {"answer": text}}]}
                ]
                lg.log_rollouts(0, [sample("the train split's own sample")])
                lg.log_rollouts(0, [sample(EVAL_TRAIN)], eval_name="train")
    with RunLogger(root / LONG_NAME, code_diff=False) as lg:
        lg.log_metrics(0, {"loss": 1.0, "env/all/reward/total": 0.5})
    with RunLogger(root / "lt", code_diff=False) as lg:  # a logtree report with a planted message
        lg.log_metrics(0, {"loss": 1.0})
        with lg.iteration(0):
            for g in range(4):  # the planted message far down the report: the link must scroll to it
                with logtree.group(g):
                    for i in range(30):
                        logtree.text(f"filler paragraph {i}")
                    if g == 3:
                        logtree.conversation([{"role": "assistant", "content": LOGTREE_PLANTED}])


@pytest.fixture(scope="module")
def site(tmp_path_factory, gcs_server):
    from rllog._demo import DemoConfig, run_demo

    root = tmp_path_factory.mktemp("runs")
    run_demo(DemoConfig(log_path=str(root / "demo"), n_batches=4, seed=0, save_every=2), quiet=True)
    run_demo(DemoConfig(log_path=str(root / "demo2"), n_batches=4, seed=1, save_every=2), quiet=True)
    _killed_run(root / "killed")
    _write_xss_run(root / "xss")
    _write_review_runs(root)
    live = RunLogger(root / "live", code_diff=False)
    for i in range(3):
        live.log_metrics(i, {"loss": float(i), "env/all/reward/total": 0.5})
    bucket = f"gs://{gcs_server.new_bucket()}/runs"
    opts = gcs_server.storage_options()
    with RunLogger(f"{bucket}/cloud1", code_diff=False, **opts) as lg:
        for i in range(7):
            lg.log_metrics(i, {"env/all/reward/total": i * 0.25})
    roots = [str(root), bucket] + ([str(REALDATA)] if REALDATA.is_dir() else [])
    app = create_app(roots, storage_options=opts)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    shots = tmp_path_factory.mktemp("screenshots")
    print(f"\nrllog serve screenshots: {shots}")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield {
            "url": f"http://127.0.0.1:{port}",
            "root": root,
            "live": live,
            "browser": browser,
            "shots": shots,
        }
        browser.close()
    live.close()
    server.should_exit = True
    thread.join(timeout=10)


class Watch:
    """A page that counts what must never happen: requests off the app, dialogs, CSP violations, page errors."""

    def __init__(self, site: dict, width: int = 1400) -> None:
        self.page = site["browser"].new_page(viewport={"width": width, "height": 900})
        self.base = site["url"]
        self.foreign: list[str] = []
        self.dialogs: list[str] = []
        self.csp: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", self._request)
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("console", lambda m: "Content Security Policy" in m.text and self.csp.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.failed: list[str] = []  # responses >= 400 (a missing favicon was one on every load)
        self.page.on("response", lambda r: r.status >= 400 and self.failed.append(f"{r.status} {r.url}"))

    def _request(self, req) -> None:
        url = req.url
        if not (url.startswith(self.base + "/") or url.startswith("data:") or url == "about:blank"):
            self.foreign.append(url)
        elif url.startswith(self.base + "/x") or "/x?" in url:  # <img src=x>
            self.foreign.append(url)

    def go(self, hash_: str) -> None:
        self.page.goto(f"{self.base}/#{hash_}")
        self.page.wait_for_load_state("networkidle")

    def run_id(self, name: str) -> str:
        return self.page.evaluate("(n) => state.runs.find((r) => r.name === n).id", name)

    def clean(self) -> None:
        assert self.page.evaluate("window.__xss") is None
        assert self.foreign == [] and self.dialogs == [] and self.errors == []
        assert self.csp == [], self.csp
        assert self.failed == [], self.failed


def _status_of(w: Watch, name: str) -> str:
    row = w.page.locator("#runs tr", has=w.page.get_by_role("link", name=name, exact=True))
    return row.locator("td.status").inner_text()


def test_runs_table_lists_runs_with_their_status(site):
    w = Watch(site)
    w.go("/runs")
    w.page.wait_for_selector("#runs tbody tr")
    root = site["root"].name
    assert _status_of(w, f"{root}/demo").startswith("finished")
    assert _status_of(w, f"{root}/killed").startswith("crashed")
    assert _status_of(w, f"{root}/live").startswith("running")
    assert _status_of(w, "runs/cloud1").startswith("finished")  # the bucket run, read in place
    names = w.page.locator("#runs tbody td:nth-child(2)").all_inner_texts()
    if REALDATA.is_dir():
        assert sum("realdata/" in n for n in names) >= 20
        assert any(n.endswith("trainer_state.json") for n in names)
    w.page.fill("#run-filter", "killed")
    assert w.page.locator("#runs tbody tr").count() == 1
    w.clean()


def test_chart_points_and_hover_value(site):
    w = Watch(site)
    w.go("/runs")
    rid = w.run_id(f"{site['root'].name}/demo")
    w.page.evaluate("(id) => { state.selected = new Set([id]); saveSel(); }", rid)
    w.go("/charts")
    w.page.fill("#metric-filter", "^env/all/reward/total$")
    chart = w.page.locator('.chart[data-metric="env/all/reward/total"]')
    chart.locator(".main-svg").first.wait_for()
    rows = [json.loads(line) for line in (site["root"] / "demo" / "metrics.jsonl").read_text().splitlines()]
    logged = [r["env/all/reward/total"] for r in rows]
    n_eval = sum("test/env/all/reward/total" in r for r in rows)
    assert 0 < n_eval < len(rows)  # train and eval of one metric share the chart
    assert chart.get_attribute("data-points") == f"{len(rows)},{n_eval}"
    w.page.evaluate(
        "() => { const gd = document.querySelector('.chart[data-metric=\"env/all/reward/total\"]'); "
        "Plotly.Fx.hover(gd, [{curveNumber: 0, pointNumber: 2}]); }"
    )
    hover = chart.locator(".hoverlayer").text_content()
    assert repr(logged[2]) in hover, (hover, logged[2])
    w.clean()


def test_live_rows_appear_within_2s(site):
    w = Watch(site)
    w.go("/runs")
    rid = w.run_id(f"{site['root'].name}/live")
    w.page.evaluate("(id) => { state.selected = new Set([id]); saveSel(); }", rid)
    w.go("/charts")
    w.page.fill("#metric-filter", "^loss$")
    chart = w.page.locator('.chart[data-metric="loss"]')
    chart.locator(".main-svg").first.wait_for()
    assert chart.get_attribute("data-points") == "3"
    live = site["live"]
    t0 = time.monotonic()
    live.log_metrics(3, {"loss": 3.0})
    live.log_metrics(4, {"loss": 4.0})
    w.page.wait_for_function(
        "() => document.querySelector('.chart[data-metric=\"loss\"]').dataset.points === '5'", timeout=2000
    )
    assert time.monotonic() - t0 < 2.0
    w.clean()


def test_two_selected_runs_overlay(site):
    w = Watch(site)
    w.go("/runs")
    root = site["root"].name
    for name in (f"{root}/demo", f"{root}/demo2"):
        w.page.locator("#runs tr", has=w.page.get_by_role("link", name=name, exact=True)).locator(
            "input[type=checkbox]"
        ).check()
    w.page.click("text=Compare selected")
    w.page.fill("#metric-filter", "^entropy$")
    chart = w.page.locator('.chart[data-metric="entropy"]')
    chart.locator(".main-svg").first.wait_for()
    colors = w.page.evaluate(
        "() => document.querySelector('.chart[data-metric=\"entropy\"]').data"
        ".filter((t) => t.meta && t.meta.raw).map((t) => t.line.color)"
    )
    assert len(colors) == 2 and colors[0] != colors[1]
    w.clean()


def test_search_finds_planted_completion_and_opens_it(site):
    w = Watch(site)
    w.go("/runs")
    w.page.evaluate("() => { state.selected = new Set(); saveSel(); }")
    w.go("/search")
    w.page.fill("#search-q", "zebra-planted-\\d+")
    w.page.check("#search-regex")
    w.page.click("#search-go")
    link = w.page.locator("#search-results a.hit-link").first
    link.wait_for()
    assert w.page.locator("#search-results mark").first.inner_text() == "zebra-planted-4242"
    link.click()
    hit = w.page.locator(".sample.hit").first
    hit.wait_for()
    assert PLANTED in hit.inner_text()
    w.clean()


def test_search_finds_a_logtree_message_and_opens_its_report(site):
    w = Watch(site)
    w.go("/runs")
    w.page.evaluate("() => { state.selected = new Set(); saveSel(); }")
    w.go("/search")
    w.page.fill("#search-q", LOGTREE_PLANTED)
    w.page.click("#search-go")
    link = w.page.locator("#search-results a.hit-link").first
    link.wait_for()
    assert w.page.locator("#search-results a.hit-link").count() == 1
    assert "report · group 3 · messages[0].content (assistant)" in link.inner_text()
    link.click()
    report = w.page.locator("details#report[open] iframe.report")
    report.wait_for()
    assert re.search(r"/files/train_iteration_000000\.html#lt-\d+-0$", report.get_attribute("src"))
    frame = w.page.frame_locator("details#report iframe.report")
    assert LOGTREE_PLANTED in frame.locator("body").inner_text()
    # the link lands on the message: it is the frame's :target, marked, and scrolled into the frame's view
    target = frame.locator(":target")
    target.wait_for()
    assert target.inner_text().strip().endswith(LOGTREE_PLANTED) and "lt-msg" in target.get_attribute("class")
    box = target.evaluate(
        "(e) => { const r = e.getBoundingClientRect(); return [r.top, r.bottom, innerHeight]; }"
    )
    assert 0 <= box[0] < box[2] and box[1] > 0, box
    assert target.evaluate("(e) => getComputedStyle(e).outlineStyle") == "solid"
    assert w.page.locator("details#report").evaluate("(e) => e.getBoundingClientRect().top < innerHeight")
    w.page.screenshot(path=str(site["shots"] / "search-hit-in-report-1400.png"))
    w.clean()


def _fits(w: Watch, width: int, page: str) -> None:
    """The page is no wider than the screen (a wide table may scroll inside its own box)."""
    wide = w.page.evaluate("() => document.documentElement.scrollWidth")
    if wide > width:
        print(
            w.page.evaluate(
                """() => [...document.querySelectorAll('*')].filter((e) => e.getBoundingClientRect().right > innerWidth + 1).slice(0, 8).map((e) => e.tagName + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))"""
            ),
            w.page.evaluate(
                "() => ['main', '.cols', '.side', '.grow'].map((q) => { const e = document.querySelector(q); const c = getComputedStyle(e); return q + ' ' + e.getBoundingClientRect().width + ' ' + c.display + ' ' + c.flexDirection + ' ' + c.alignItems; })"
            ),
        )
    assert wide <= width, f"{page} page is {wide} px wide on a {width} px screen"


def test_xss_payloads_never_run_and_screenshots(site):
    shots = site["shots"]
    for width in (1400, 400):
        w = Watch(site, width)
        w.go("/runs")
        w.page.wait_for_selector("#runs tbody tr")
        w.page.select_option("#cfg-col", XSS)  # a config column named by a payload
        rid = w.run_id(f"{site['root'].name}/xss")
        assert XSS in w.page.locator("#runs").inner_text()  # shown as text
        w.page.screenshot(path=str(shots / f"runs-{width}.png"), full_page=True)
        _fits(w, width, "runs")
        w.page.evaluate("(id) => { state.selected = new Set([id]); saveSel(); }", rid)
        w.go("/charts")
        w.page.locator(".chart .main-svg").first.wait_for()
        w.page.wait_for_timeout(300)
        w.page.screenshot(path=str(shots / f"charts-{width}.png"))
        w.go(f"/run/{rid}")
        w.page.wait_for_selector("#config")
        assert XSS2 in w.page.locator("#config").inner_text()
        w.page.screenshot(path=str(shots / f"detail-{width}.png"), full_page=True)
        _fits(w, width, "detail")
        w.go(f"/rollouts/{rid}/0/train")
        w.page.wait_for_selector(".group")
        assert XSS in w.page.locator(".group").first.inner_text()
        w.page.screenshot(path=str(shots / f"rollouts-{width}.png"), full_page=True)
        _fits(w, width, "rollouts")
        ev = w.page.evaluate(
            "() => [...document.querySelectorAll('#iterations a')].map((a) => a.getAttribute('href'))"
        )
        eval_href = next(h for h in ev if not h.endswith("/train"))
        w.go(eval_href.lstrip("#"))
        w.page.wait_for_selector(".group")
        w.page.locator("details summary", has_text="iteration report").click()
        w.page.wait_for_timeout(500)
        w.go("/search/" + "onerror")
        w.page.wait_for_selector("#search-results .hit-row")
        w.page.screenshot(path=str(shots / f"search-{width}.png"), full_page=True)
        _fits(w, width, "search")
        w.clean()
        w.page.close()
    assert all(
        (shots / f"{p}-{w_}.png").stat().st_size > 1000
        for p in ("runs", "charts", "detail", "rollouts", "search")
        for w_ in (1400, 400)
    )
    assert math.isfinite(1.0)


def _right(w: Watch, selector: str) -> float:
    return w.page.evaluate("(q) => document.querySelector(q).getBoundingClientRect().right", selector)


def _trace(w: Watch, metric: str, js: str):
    return w.page.evaluate(
        f"() => {{ const gd = document.querySelector('.chart[data-metric=\"{metric}\"]'); {js} }}"
    )


def test_review_fixes_runs_table(site):
    root = site["root"].name
    for width in (1400, 400):  # a long name is cut: status (and at 1400 px steps, metrics) stay on screen
        w = Watch(site, width)
        w.go("/runs")
        w.page.fill("#run-filter", "a-very-long-run-name")
        row = f"#runs tbody tr[data-run='{w.run_id(f'{root}/{LONG_NAME}')}']"
        assert _right(w, f"{row} td.status") <= width
        if width == 1400:
            assert _right(w, f"{row} td:last-child") <= width
        assert w.page.locator(f"{row} td.name").get_attribute("title") == f"{root}/{LONG_NAME}"
        w.page.close()
    w = Watch(site)
    w.go("/runs")
    w.page.fill("#run-filter", "cfg/")
    w.page.select_option("#cfg-col", "batch_size")
    w.page.click("#runs th[data-col='batch_size']")
    names = w.page.locator("#runs tbody td.name").all_inner_texts()
    assert names == [f"{root}/cfg/b8", f"{root}/cfg/b16", f"{root}/cfg/b128"]  # 8 < 16 < 128, not text order
    heads = w.page.locator("#runs th").all_inner_texts()
    assert [h for h in heads if h in ("env/all/reward/total", "loss")] == ["loss"]  # metrics these runs have
    # the name column stays in view when the table scrolls sideways
    w.page.evaluate(
        "() => { const s = document.querySelector('.scroll'); s.style.maxWidth = '500px'; s.scrollLeft = 400; }"
    )
    left = w.page.evaluate("() => document.querySelector('#runs tbody td.name').getBoundingClientRect().left")
    box = w.page.evaluate("() => document.querySelector('.scroll').getBoundingClientRect().left")
    assert abs(left - (box + 28)) < 3, (left, box)
    w.page.click("#runs th[data-col='batch_size'] button.rm")  # an added column can be removed
    assert w.page.locator("#runs th[data-col='batch_size']").count() == 0
    assert json.loads(w.page.evaluate("() => localStorage.getItem('rllog.cols')")) == []
    w.clean()


def test_review_fixes_charts_and_rollouts(site):
    root = site["root"].name
    w = Watch(site)
    w.go("/runs")
    ids = [w.run_id(f"{root}/cfg/b{b}") for b in (8, 16)]
    w.page.evaluate("(ids) => { state.selected = new Set(ids); saveSel(); }", ids)
    w.go("/charts")
    w.page.locator("#legend").wait_for()
    legend = w.page.locator("#legend .legend-item")
    assert sorted(legend.all_inner_texts()) == [f"{root}/cfg/b16", f"{root}/cfg/b8"]
    w.page.fill("#metric-filter", "^weird$")
    chart = w.page.locator('.chart[data-metric="weird"]')
    chart.locator(".main-svg").first.wait_for()
    colors = _trace(
        w, "weird", "return gd.data.filter((t) => t.meta && t.meta.raw).map((t) => t.line.color);"
    )
    assert [legend.nth(i).get_attribute("data-color") for i in range(2)] == colors and colors[0] != colors[1]
    bad = _trace(
        w, "weird", "const t = gd.data.find((t) => t.meta && t.meta.nonfinite); return [t.x, t.y, t.text];"
    )
    assert bad[0] == [1, 2, 3, 1, 2, 3] and bad[1] == [0.97, 0.97, 0.03] * 2
    assert {t.split(": ", 1)[1] for t in bad[2]} == {
        "NaN at step 1",
        "Infinity at step 2",
        "-Infinity at step 3",
    }
    assert chart.locator(".scatterlayer .trace:last-child path.point").count() == 6  # drawn
    w.page.screenshot(path=str(site["shots"] / "charts-legend-nonfinite-1400.png"))
    # smoothing comes from the server's full-resolution EMA
    smoothed = _trace(w, "weird", "return gd.data.find((t) => t.name.endsWith('(smoothed)')).y;")
    api = w.page.evaluate(
        "() => fetch(`/api/runs/${state.charts[0].traces[0].run.id}/series?key=weird&x=step&points=2000&smooth=${ctl.smooth}`).then((r) => r.json())"
    )
    assert ctl_smooth(w) > 0 and smoothed == api["smoothed"]["y"] and len(smoothed) == 3
    # a flat metric (7.0 / 6.9999999) gets readable ticks
    w.page.fill("#metric-filter", "^flat$")
    flat = w.page.locator('.chart[data-metric="flat"]')
    flat.locator(".main-svg").first.wait_for()
    ticks = flat.locator(".ytick text").all_text_contents()
    assert ticks and all(len(t.replace("\u2212", "-")) <= 5 for t in ticks), ticks
    # a zoom on one x axis is not kept on another
    w.page.evaluate(
        "() => Plotly.relayout(document.querySelector('.chart[data-metric=\"flat\"]'), {'xaxis.range[0]': 1, 'xaxis.range[1]': 2})"
    )
    w.page.wait_for_function("() => state.charts[0].range !== null")
    w.page.select_option("#xaxis", "wall time")
    w.page.wait_for_function("() => state.charts[0].data && state.charts[0].data[0].x[0] === 2")
    assert w.page.evaluate("() => state.charts[0].range") is None
    assert _trace(w, "flat", "return gd.layout.xaxis.range;")[1] > 10  # the whole wall-time axis (12 s)
    # an evaluator named "train" opens its own samples, not the training split's
    w.go(f"/rollouts/{ids[0]}")
    links = w.page.locator("#iterations a")
    links.first.wait_for()
    assert [t.split(" r=")[0].strip() for t in links.all_inner_texts()] == ["#0 train", "#0 eval: train"]
    links.nth(1).click()
    w.page.wait_for_selector(".group")
    assert EVAL_TRAIN in w.page.locator("#rollout-body").inner_text()
    links.nth(0).click()
    w.page.wait_for_function(
        "(t) => { const b = document.querySelector('#rollout-body'); "
        "return b && b.querySelector('.group') && !b.innerText.includes(t); }",
        arg=EVAL_TRAIN,
    )
    assert "the train split's own sample" in w.page.locator("#rollout-body").inner_text()
    # the report's links open the run's pages inside the frame
    demo = w.run_id(f"{root}/demo")
    w.go(f"/rollouts/{demo}/1/train")
    w.page.locator("details summary", has_text="iteration report").click()
    frame = w.page.frame_locator("iframe.report")
    frame.locator("a", has_text="iteration 2").click()
    frame.locator("h1", has_text="Train iteration 2").wait_for()
    frame.locator("a", has_text="Run index").click()
    frame.locator("a[href='./train_iteration_000000.html']").first.wait_for()
    w.clean()


def ctl_smooth(w: Watch) -> float:
    return w.page.evaluate("() => ctl.smooth")
