"""Per-call cost of logging one metrics row: rllog vs its peers, in one process.

Logs ``--rows`` rows (default 5,000) of 100 float metrics through each writer and prints
the median and p99 of one call in microseconds, then ratios. Every writer gets the row
to the OS per call (rllog: ``os.write`` on an O_APPEND descriptor; the baselines:
an unbuffered file). Peers that are not installed are skipped, with the reason.

    python benchmarks/bench_metrics.py [--rows 5000]

Peers: tinker-cookbook's ``JsonLogger`` (``pip install --no-deps tinker-cookbook`` plus
what its logging module imports), wandb in offline mode, and two baselines:
``json.dumps`` + a kept-open file and ``msgspec.json.encode`` + a kept-open file.
Also prints ``import rllog`` time (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

Row = dict[str, float]


def make_rows(n: int, seed: int = 0) -> list[Row]:
    rng = random.Random(seed)
    keys = [f"env/all/metric_{k:02d}" if k % 3 else f"time/phase_{k:02d}" for k in range(100)]
    return [{k: rng.random() * 10 for k in keys} for _ in range(n)]


def timed(
    name: str,
    setup: Callable[[Path], tuple[Callable[[int, Row], object], Callable[[], object]]],
    rows: list[Row],
    results: dict[str, list[float]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            log, close = setup(Path(tmp))
        except ImportError as exc:
            print(f"  skipped {name}: not installed ({exc})")
            return
        times = []
        clock = time.perf_counter_ns
        for i, row in enumerate(rows):
            t0 = clock()
            log(i, row)
            times.append((clock() - t0) / 1000)
        close()
        results[name] = times


def setup_rllog(tmp: Path, console: bool = False):
    from rllog import RunLogger

    logger = RunLogger(tmp / "run", code_diff=False, console=console)
    return logger.log_metrics, logger.close


def setup_rllog_console(tmp: Path):
    # the console sink's cost: one formatted line per call to stderr (a file here, so the
    # terminal's own speed is not measured)
    sink = open(tmp / "console.txt", "w")
    redirect = contextlib.redirect_stderr(sink)
    redirect.__enter__()
    log, close = setup_rllog(tmp, console=True)

    def done():
        close()
        redirect.__exit__(None, None, None)
        sink.close()

    return log, done


def setup_tinker(tmp: Path):
    from tinker_cookbook.utils.ml_log import JsonLogger

    logger = JsonLogger(tmp / "tinker")
    return (lambda i, row: logger.log_metrics(row, step=i)), logger.close


def setup_wandb(tmp: Path):
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    import wandb

    run = wandb.init(mode="offline", dir=str(tmp), project="bench")
    return (lambda i, row: run.log(row, step=i)), run.finish


def setup_json(tmp: Path):
    f = open(tmp / "json.jsonl", "wb", buffering=0)
    return (lambda i, row: f.write(json.dumps({"step": i, **row}).encode() + b"\n")), f.close


def setup_msgspec(tmp: Path):
    import msgspec

    enc = msgspec.json.Encoder()
    f = open(tmp / "msgspec.jsonl", "wb", buffering=0)
    return (lambda i, row: f.write(enc.encode({"step": i, **row}) + b"\n")), f.close


def import_time_ms() -> float:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import rllog"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    for line in out.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| rllog$", line)
        if m:
            return int(m.group(1)) / 1000
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=5000)
    args = ap.parse_args()
    rows = make_rows(args.rows)
    results: dict[str, list[float]] = {}
    print(f"{args.rows} rows x 100 float metrics, one call per row")
    writers = [
        ("msgspec baseline", setup_msgspec),
        ("json baseline", setup_json),
        ("rllog", setup_rllog),
        ("rllog + console", setup_rllog_console),
        ("tinker-cookbook JsonLogger", setup_tinker),
        ("wandb offline", setup_wandb),
    ]
    for name, setup in writers:
        with (
            contextlib.redirect_stdout(io.StringIO()) if name == "wandb offline" else contextlib.nullcontext()
        ):
            timed(name, setup, rows, results)
    print(f"\n{'writer':<28}{'median us':>11}{'p99 us':>10}")
    med = {}
    for name, times in results.items():
        times = times[50:]  # warm-up
        med[name] = statistics.median(times)
        p99 = statistics.quantiles(times, n=100)[98]
        print(f"{name:<28}{med[name]:>11.1f}{p99:>10.1f}")
    base = med.get("rllog")
    print("\nratios (median per call):")
    if base:
        for name in ("msgspec baseline", "json baseline", "tinker-cookbook JsonLogger", "wandb offline"):
            if name in med:
                print(f"  {name} / rllog = {med[name] / base:.2f}")
        if "msgspec baseline" in med:
            print(f"  rllog / msgspec baseline = {base / med['msgspec baseline']:.2f}  (target <= 1.3)")
        if "rllog + console" in med:
            print(f"  console sink adds {med['rllog + console'] - base:.1f} us per call (target < 1000)")
    print(f"\nimport rllog: {import_time_ms():.1f} ms cumulative (python -X importtime; target < 150)")


if __name__ == "__main__":
    main()
