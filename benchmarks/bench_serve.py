"""`rllog serve` against `tensorboard --logdir` on the same runs, in one process, loopback only.

    PYTHONPATH=. python benchmarks/bench_serve.py [--scale 1.0] [--repeats 3]

The runs are written once by :class:`rllog.RunLogger` with ``report_to=["tensorboard"]``,
so both servers read the same values (metrics.jsonl for rllog, the event file the
tensorboard sink writes beside it for TensorBoard). Measured, each server started fresh,
the two interleaved, ``--repeats`` times (median and range printed, then rllog/TensorBoard):

* first chart, 1 run x 100k rows x 100 keys: from process start until the chart's data
  holds the last step (rllog: ``/api/runs`` -> ``/api/runs/{id}/metrics`` ->
  ``/api/runs/{id}/series``; TensorBoard: ``/data/plugin/scalars/tags`` ->
  ``/data/plugin/scalars/scalars``), requests one after the other;
* first chart, 50 runs x 10k rows x 20 keys: the same, one metric of every run;
* runs table, 200 runs x 200 rows: from start until every run is listed with its values
  (rllog: ``/api/runs`` rows not ``loading``; TensorBoard: ``/data/runs`` lists them and
  the scalars tags of every run are known), then the median of 5 warm ``/api/runs`` /
  ``/data/runs`` calls;
* live update: a live RunLogger logs one row and flushes; the time until the server's
  series answer holds its step (TensorBoard reloads every ``--reload_interval`` seconds,
  5 by default, used as is);
* server RSS (with its child processes: TensorBoard's data server) after the first chart.

``--scale`` multiplies every row count (0.2: 20k rows in the big run) for slower disks.
Every wait is bounded (``TIMEOUT`` seconds); a timeout prints ``timeout`` instead of a value.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from rllog import RunLogger

TIMEOUT = 300.0
POLL = 0.02


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str, **params: Any) -> Any | None:
    """The JSON at http://127.0.0.1:port/path, or None while the server is not answering."""
    url = f"http://127.0.0.1:{port}{path}"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def wait_for(probe: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value is not None:
            return value
        time.sleep(POLL)
    raise TimeoutError(f"{what}: nothing after {timeout:.0f} s")


def write_runs(root: Path, runs: int, rows: int, keys: int, *, close: bool = True) -> list[RunLogger]:
    names = [f"{('train', 'optim', 'env', 'time', 'eval')[j % 5]}/m{j}" for j in range(keys)]
    open_loggers = []
    for r in range(runs):
        logger = RunLogger(
            root / f"run{r:03d}", report_to=["tensorboard"], index=False, code_diff=False, config={"seed": r}
        )
        for step in range(rows):
            logger.log_metrics(step, {name: math.sin(step * 0.001 + j + r) for j, name in enumerate(names)})
            if step % 2000 == 1999:  # let the tensorboard sink keep up: a full queue drops rows
                logger._sinks.flush(timeout=TIMEOUT)  # private: a benchmark pacing the writer
        if logger._sinks.dropped:
            sys.exit(f"bench_serve: the tensorboard sink dropped {logger._sinks.dropped} rows")
        if close:
            logger.close()
        else:
            logger.flush()
            open_loggers.append(logger)
    return open_loggers


class Server:
    """One server process on a free loopback port; ``kind`` is "rllog" or "tensorboard"."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.port = kind, free_port()
        if kind == "rllog":
            cmd = [sys.executable, "-m", "rllog", "serve", str(root), "--port", str(self.port)]
        else:
            tb = shutil.which("tensorboard") or "tensorboard"
            cmd = [tb, "--logdir", str(root), "--host", "127.0.0.1", "--port", str(self.port)]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def rss_mib(self) -> float:
        proc = psutil.Process(self.proc.pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    # --- the requests a page makes ---------------------------------------------------
    def runs(self) -> dict[str, str] | None:
        """run name -> id, once the server lists runs (rllog: with their values read)."""
        if self.kind == "rllog":
            body = get(self.port, "/api/runs")
            if not body or not body["runs"] or any(r.get("loading") for r in body["runs"]):
                return None
            return {Path(r["name"]).name: r["id"] for r in body["runs"]}
        body = get(self.port, "/data/plugin/scalars/tags")
        return {Path(run).parts[0]: run for run in body} if body else None

    def series_last(self, run_id: str, key: str) -> float | None:
        """The last step in the server's series of ``key`` for ``run_id``, None if not there."""
        if self.kind == "rllog":
            # the downsampled x keeps min/max per bucket, not always the last step: the
            # series holds every row when its total does
            body = get(self.port, f"/api/runs/{run_id}/series", key=key)
            return body["total"] - 1 if body and body.get("total") else None
        body = get(self.port, "/data/plugin/scalars/scalars", run=run_id, tag=key)
        return body[-1][1] if body else None

    def first_key(self, run_id: str) -> str | None:
        if self.kind == "rllog":
            body = get(self.port, f"/api/runs/{run_id}/metrics")
            return body["metrics"][0] if body and body.get("metrics") else None
        body = get(self.port, "/data/plugin/scalars/tags")
        return sorted(body[run_id])[0] if body and body.get(run_id) else None


def first_chart(kind: str, root: Path, expect_runs: int, last_step: int) -> tuple[float, float]:
    """Seconds from start until one metric of every run holds ``last_step``; the RSS then (MiB)."""
    server = Server(kind, root)
    try:

        def all_runs() -> dict[str, str] | None:
            runs = server.runs()
            return runs if runs and len(runs) >= expect_runs else None

        runs = wait_for(all_runs, f"{kind}: runs listed")
        key = wait_for(lambda: server.first_key(next(iter(runs.values()))), f"{kind}: metric names")
        for run_id in runs.values():

            def at_end(run_id: str = run_id) -> bool | None:
                return True if server.series_last(run_id, key) == last_step else None

            wait_for(at_end, f"{kind}: {key} up to step {last_step}")
        return time.monotonic() - server.started, server.rss_mib()
    finally:
        server.stop()


def runs_table(kind: str, root: Path, expect_runs: int) -> tuple[float, float]:
    """Seconds until all runs are listed, and the median warm latency of the listing (s)."""
    server = Server(kind, root)
    try:
        path = "/api/runs" if kind == "rllog" else "/data/runs"

        def listed() -> bool | None:
            runs = server.runs()
            if not runs or len(runs) < expect_runs:
                return None
            if kind == "tensorboard":  # tags known for every run: its table has something to show
                tags = get(server.port, "/data/plugin/scalars/tags") or {}
                return True if sum(1 for t in tags.values() if t) >= expect_runs else None
            return True

        wait_for(listed, f"{kind}: {expect_runs} runs listed")
        cold = time.monotonic() - server.started
        warm = []
        for _ in range(5):
            t = time.perf_counter()
            get(server.port, path)
            warm.append(time.perf_counter() - t)
        return cold, statistics.median(warm)
    finally:
        server.stop()


def live_update(kind: str, root: Path, logger: RunLogger, step: int, keys: list[str]) -> float:
    """Seconds from a row's flush until the server's series of its first key shows ``step``."""
    server = Server(kind, root)
    try:
        runs = wait_for(server.runs, f"{kind}: live run listed")
        run_id = next(iter(runs.values()))
        wait_for(lambda: server.series_last(run_id, keys[0]), f"{kind}: live series")
        logger.log_metrics(step, {k: 0.5 for k in keys})
        logger.flush()
        t = time.monotonic()
        wait_for(
            lambda: True if server.series_last(run_id, keys[0]) == step else None,
            f"{kind}: live row",
            timeout=60,
        )
        return time.monotonic() - t
    finally:
        server.stop()


def summary(label: str, unit: str, values: dict[str, list[float]]) -> None:
    def fmt(xs: list[float]) -> str:
        if not xs:
            return "timeout"
        return f"{statistics.median(xs):8.3f} {unit} (range {min(xs):.3f}-{max(xs):.3f})"

    line = f"{label:<44} rllog {fmt(values['rllog'])}   tensorboard {fmt(values['tensorboard'])}"
    pairs = [a / b for a, b in zip(values["rllog"], values["tensorboard"], strict=False) if b]
    if pairs:
        line += f"   rllog/tb {statistics.median(pairs):.2f} (range {min(pairs):.2f}-{max(pairs):.2f})"
    print(line, flush=True)


def measure(label: str, unit: str, repeats: int, fn: Callable[[str], float]) -> None:
    values: dict[str, list[float]] = {"rllog": [], "tensorboard": []}
    for _ in range(repeats):
        for kind in ("rllog", "tensorboard"):  # interleaved
            try:
                values[kind].append(fn(kind))
            except TimeoutError as exc:
                print(f"  {exc}", flush=True)
    summary(label, unit, values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every row count")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("tensorboard") is None:
        sys.exit("bench_serve: needs the tensorboard command (pip install tensorboard)")
    big_rows = max(int(100_000 * args.scale), 10)
    many_rows = max(int(10_000 * args.scale), 10)
    table_rows = max(int(200 * args.scale), 10)
    with tempfile.TemporaryDirectory(prefix="bench_serve_") as tmp:
        base = Path(tmp)
        t = time.perf_counter()
        write_runs(base / "big", 1, big_rows, 100)
        write_runs(base / "many", 50, many_rows, 20)
        write_runs(base / "table", 200, table_rows, 20)
        live = write_runs(base / "live", 1, 100, 5, close=False)[0]
        print(
            f"wrote 1x{big_rows}x100, 50x{many_rows}x20, 200x{table_rows}x20 and a live run "
            f"in {time.perf_counter() - t:.0f} s; sizes: "
            + ", ".join(
                f"{d.name} {sum(f.stat().st_size for f in d.rglob('*') if f.is_file()) / 2**20:.0f} MiB"
                for d in sorted(base.iterdir())
            ),
            flush=True,
        )
        for label, folder, runs, rows in (
            (f"first chart, 1 run x {big_rows} rows x 100 keys", base / "big", 1, big_rows),
            (f"first chart, 50 runs x {many_rows} rows x 20 keys", base / "many", 50, many_rows),
        ):
            rss: dict[str, list[float]] = {"rllog": [], "tensorboard": []}

            def chart(
                kind: str, folder: Path = folder, runs: int = runs, rows: int = rows, rss: dict = rss
            ) -> float:
                seconds, mib = first_chart(kind, folder, runs, rows - 1)
                rss[kind].append(mib)
                return seconds

            measure(label, "s", args.repeats, chart)
            summary("  server RSS after it", "MiB", rss)
        warm: dict[str, list[float]] = {"rllog": [], "tensorboard": []}

        def table(kind: str) -> float:
            cold, latency = runs_table(kind, base / "table", 200)
            warm[kind].append(latency * 1000)
            return cold

        measure(f"runs table, 200 runs x {table_rows} rows: all listed", "s", args.repeats, table)
        summary("  warm listing (/api/runs vs /data/runs)", "ms", warm)
        step = iter(range(100, 100 + 2 * args.repeats))
        keys = ["train/m0", "optim/m1", "env/m2", "time/m3", "eval/m4"]
        measure(
            "live update: flush -> series shows the row",
            "s",
            args.repeats,
            lambda kind: live_update(kind, base / "live", live, next(step), keys),
        )
        live.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    main()
