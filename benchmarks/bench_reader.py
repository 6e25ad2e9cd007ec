"""Reading speed: read_run, its DataFrame, `rllog summary`, refresh, and `rllog tail -f` latency.

Input: the largest real metrics file, the sparse 8,200-row / 1.2 MB HazyResearch log
from ``../shared/realdata`` (three runs appended in one file, string values, 43 keys).
Peers on the same file, in this process: ``pandas.read_json(lines=True)`` (what users
write by hand; it neither merges repeated steps nor survives a torn line) and
``json.loads`` per line + ``pandas.DataFrame``.

    python benchmarks/bench_reader.py [--repeat 20]

Prints medians in milliseconds and ratios to rllog. ``rllog summary`` is timed as a
whole process (interpreter start included); ``tail -f`` as the time from
``RunLogger.log_metrics`` returning to the row appearing on the follower's stdout.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REALDATA = REPO.parent / "shared" / "realdata"
sys.path.insert(0, str(REPO))


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def tail_latency(rows: int) -> list[float]:
    from rllog import RunLogger

    with tempfile.TemporaryDirectory() as tmp:
        with RunLogger(tmp, code_diff=False) as logger:
            logger.log_metrics(0, {"reward": 0.0})
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            proc = subprocess.Popen(
                [sys.executable, "-m", "rllog", "tail", "-f", "-n", "1", tmp],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            seen: list[float] = []
            threading.Thread(
                target=lambda: [seen.append(time.monotonic()) for _ in proc.stdout], daemon=True
            ).start()
            while not seen:
                time.sleep(0.01)
            delays = []
            try:
                for step in range(1, rows + 1):
                    written = time.monotonic()
                    logger.log_metrics(step, {"reward": step / rows})
                    while len(seen) <= step and time.monotonic() < written + 5:
                        time.sleep(0.002)
                    delays.append(seen[step] - written)
                    time.sleep(0.05)  # rows arrive at different points of the poll interval
            finally:
                proc.terminate()
                proc.wait()
    return delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    paths = [p for p in (REALDATA / "extra").rglob("metrics.jsonl") if "HazyResearch" in str(p)]
    if not paths:
        sys.exit(f"real data missing: {REALDATA}")
    path = paths[0]
    size = path.stat().st_size

    t = time.perf_counter()
    import pandas as pd

    pandas_import = (time.perf_counter() - t) * 1000
    from rllog import read_run

    print(f"input: {path.name} in {path.parent.name[:40]}..., {size:,} bytes")
    rows_ms = median_ms(lambda: read_run(path).rows, args.repeat)
    frame_ms = median_ms(lambda: read_run(path).metrics, args.repeat)
    data = path.read_bytes()
    peer_pandas = median_ms(lambda: pd.read_json(io.BytesIO(data), lines=True), max(3, args.repeat // 4))
    peer_json = median_ms(lambda: pd.DataFrame([json.loads(x) for x in data.splitlines()]), args.repeat)
    print(f"read_run(...).rows (dicts, segments resolved)   {rows_ms:8.1f} ms")
    print(f"read_run(...).metrics (DataFrame)               {frame_ms:8.1f} ms")
    print(
        f"  peer pandas.read_json(lines=True)             {peer_pandas:8.1f} ms  ({peer_pandas / frame_ms:.1f}x rllog's DataFrame)"
    )
    print(
        f"  peer json.loads per line + DataFrame          {peer_json:8.1f} ms  ({peer_json / frame_ms:.1f}x)"
    )
    print(f"  (import pandas, once per process: {pandas_import:.0f} ms; summary and tail do not import it)")

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        (run_dir / "metrics.jsonl").write_bytes(data)
        run = read_run(run_dir)
        assert len(run.metrics) == 8000  # build the DataFrame once, as a user would
        line = data.splitlines()[-1]

        def append_and_refresh() -> None:
            with open(run_dir / "metrics.jsonl", "ab") as f:
                f.write(line.replace(b'"global_step": ', b'"global_step": 1') + b"\n")
            run.refresh()

        refresh_ms = median_ms(append_and_refresh, args.repeat)
        print(f"refresh() after one appended row (8k-row run)   {refresh_ms:8.2f} ms")

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "rllog", "summary", str(path.parent)]
    summary_ms = median_ms(
        lambda: subprocess.run(cmd, check=True, capture_output=True, env=env), max(3, args.repeat // 4)
    )
    start_ms = median_ms(
        lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), max(3, args.repeat // 4)
    )
    print(
        f"`rllog summary` whole process                    {summary_ms:8.1f} ms  (bare python start: {start_ms:.0f} ms)"
    )

    delays = tail_latency(20)
    print(
        f"`rllog tail -f` row latency over {len(delays)} rows       median {statistics.median(delays) * 1000:.0f} ms, "
        f"max {max(delays) * 1000:.0f} ms (poll interval 200 ms)"
    )


if __name__ == "__main__":
    main()
