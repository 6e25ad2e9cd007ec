"""Streaming tools on a long run: peak memory and time of `rllog summary`, `doctor`, `tail`.

    PYTHONPATH=. python benchmarks/bench_tools_memory.py --gb 3

Writes a run of about ``--gb`` GB (steps x 100 float keys, an eval row every 20 steps,
a restart at two thirds: the shapes the step rule handles), then runs each command in
a fresh process, ``--repeat`` times, and prints its peak RSS (``ru_maxrss`` of the
child) and wall time, with two floors measured the same way: the process that only
imports the tools (``import rllog.cli, rllog.doctor``), and one plain streaming pass
over the file (``for line in f: msgspec.json.decode(line)``). Target: each tool's peak
<= 256 MiB whatever the file size.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STREAM = (
    "import sys, msgspec\n"
    "dec = msgspec.json.Decoder()\n"
    "n = 0\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    for line in f:\n"
    "        try:\n"
    "            dec.decode(line)\n"
    "        except msgspec.DecodeError:\n"
    "            pass\n"
    "        n += 1\n"
)


def write_run(folder: Path, target_bytes: int, keys: int = 100) -> tuple[int, int]:
    """A run of ~``target_bytes``; returns (bytes, rows)."""
    folder.mkdir(parents=True)
    names = ["loss/policy", "ppo/policy/clipfrac", "objective/kl", "time/total", "env/all/reward/total"]
    names += [f"metric/{i:03d}" for i in range(keys - len(names))]
    row_bytes = len(",".join(f'"{n}":0.123456' for n in names)) + 16
    rows = max(100, target_bytes // row_bytes * 3 // 4)
    with open(folder / "metrics.jsonl", "w") as f:
        for step in [*range(rows), *range(2 * rows // 3, rows + 5)]:
            f.write(
                "{"
                + f'"step":{step},'
                + ",".join(f'"{n}":{(step * 7 + i) % 97 / 97:.6f}' for i, n in enumerate(names))
                + "}\n"
            )
            if step % 20 == 0:
                f.write(f'{{"step":{step},"test/env/all/reward/total":0.5}}\n')
    return (folder / "metrics.jsonl").stat().st_size, rows


def measure(args: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, seconds) of one child process."""
    code = (
        "import resource, subprocess, sys, time\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
        "dt = time.perf_counter() - t\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, dt)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    peak, dt = out.stdout.split()
    return float(peak), float(dt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=0.3)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        t = time.perf_counter()
        size, rows = write_run(run, int(args.gb * 1e9))
        print(
            f"run: {size / 1e9:.2f} GB, {rows} steps x 100 keys (written in {time.perf_counter() - t:.0f} s)"
        )
        py = sys.executable
        cases = {
            "floor: imports only": [py, "-c", "import rllog.cli, rllog.doctor"],
            "floor: streaming read": [py, "-c", STREAM, str(run / "metrics.jsonl")],
            "rllog summary": [py, "-m", "rllog", "summary", str(run)],
            "rllog doctor": [py, "-m", "rllog", "doctor", "--fail-on", "never", str(run)],
            "rllog tail -n 10": [py, "-m", "rllog", "tail", "-n", "10", str(run)],
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        for _ in range(args.repeat):
            for name, cmd in cases.items():
                results[name].append(measure(cmd))
        width = max(map(len, cases))
        print(f"{'':<{width}}  {'peak RSS MiB':>12}  {'seconds':>8}  (median of {args.repeat})")
        for name, rs in results.items():
            peak = statistics.median(r[0] for r in rs)
            dt = statistics.median(r[1] for r in rs)
            print(f"{name:<{width}}  {peak:12.0f}  {dt:8.1f}")
        base = statistics.median(r[1] for r in results["floor: streaming read"])
        for name in ("rllog summary", "rllog doctor"):
            dt = statistics.median(r[1] for r in results[name])
            print(f"{name}: {dt / base:.2f}x the streaming read's time")


if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    main()
