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

from rllog import RunLogger  # noqa: E402  # after the module-level skips
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


@pytest.fixture(scope="module")
def site(tmp_path_factory, gcs_server):
    from rllog._demo import DemoConfig, run_demo

    root = tmp_path_factory.mktemp("runs")
    run_demo(DemoConfig(log_path=str(root / "demo"), n_batches=4, seed=0, save_every=2), quiet=True)
    run_demo(DemoConfig(log_path=str(root / "demo2"), n_batches=4, seed=1, save_every=2), quiet=True)
    _killed_run(root / "killed")
    _write_xss_run(root / "xss")
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
