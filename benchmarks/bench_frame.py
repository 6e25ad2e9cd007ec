"""`read_run(...).metrics` on a long run vs ``pandas.read_json(lines=True)`` (issue 15, target 3).

Writes metrics.jsonl files of ROWS x KEYS float keys (plus a NaN, an Infinity and a
-Infinity column, an int column and, with ``--strings N``, N string columns), then reads
each in a fresh subprocess per reader, interleaved, ``--repeat`` times:

- rllog: ``read_run(path).metrics``
- rllog columns=: ``read_run(path, columns=[3 keys]).metrics``
- pandas: ``pandas.read_json(path, lines=True)``

``--before DIR`` adds the same two rllog reads with rllog imported from another checkout.
Each child first reads a 10-row file the same way (imports, code paths loaded), resets
its peak RSS (``/proc/self/clear_refs``; Linux), then measures the read's wall time, the
peak RSS it added (``VmHWM`` after minus ``VmRSS`` before) and the final DataFrame's
``memory_usage(deep=True)``. Printed: median and range of time / pandas' time and of
peak added / DataFrame. Targets: time <= 0.5x pandas, peak <= 2x the DataFrame.

    python benchmarks/bench_frame.py --rows 100000 --keys 100 --strings 3 [--before ../main]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import pandas as pd
from rllog import read_run
what, path, warm = sys.argv[1], sys.argv[2], sys.argv[3]
def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))
def read(path):
    if what == "pandas":
        return pd.read_json(path + "/metrics.jsonl", lines=True)
    if what == "rllog":
        return read_run(path).metrics
    return read_run(path, columns=["k/1", "k/50", "inf"]).metrics
read(warm)  # modules imported, code paths loaded: not the read's data
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # peak RSS (VmHWM) := RSS now (ru_maxrss would start at the parent's RSS)
before = status("VmRSS:")
t = time.perf_counter()
df = read(path)
dt = time.perf_counter() - t
import rllog
print(json.dumps({"rllog": rllog.__file__, "seconds": dt, "added": status("VmHWM:") - before,
                  "frame": int(df.memory_usage(deep=True).sum()), "shape": list(df.shape)}))
"""


def child(what: str, path: str, warm: str, checkout: str) -> dict:
    """One read in a fresh process importing rllog from ``checkout`` (run in the data's
    folder: ``python -c`` puts the working folder first on ``sys.path``)."""
    env = {**os.environ, "PYTHONPATH": checkout}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, what, path, warm],
        capture_output=True,
        check=True,
        env=env,
        cwd=os.path.dirname(path),
    )
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def write_run(path: str, rows: int, keys: int, strings: int) -> int:
    os.makedirs(path, exist_ok=True)
    names = [f"k/{i}" if i in (1, 50) else f"env/group_{i % 10}/metric_{i:03d}" for i in range(keys)]
    words = ["ok", "timeout", "format_error", "correct answer", "wrong"]
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for s in range(rows):
            parts = [
                f'"step": {s}',
                '"nan": NaN',
                '"inf": Infinity',
                '"ninf": -Infinity',
                f'"count": {s * 3}',
            ]
            parts += [f'"{name}": {math.sin(s + i)!r}' for i, name in enumerate(names)]
            parts += [f'"s/{i}": "{words[(s + i) % len(words)]}"' for i in range(strings)]
            f.write("{" + ", ".join(parts) + "}\n")
    return os.path.getsize(os.path.join(path, "metrics.jsonl"))


def span(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}x [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--strings", type=int, default=0, help="string-valued columns added")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--before", help="another rllog checkout (e.g. ../main) measured the same way, interleaved"
    )
    a = ap.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    readers = [
        ("pandas", "pandas", here),
        ("rllog", "rllog", here),
        ("rllog columns=", "rllog_columns", here),
    ]
    if a.before:
        readers += [("before", "rllog", a.before), ("before columns=", "rllog_columns", a.before)]
    res: dict[str, list[dict]] = {name: [] for name, _, _ in readers}
    with tempfile.TemporaryDirectory() as tmp:
        size = write_run(f"{tmp}/run", a.rows, a.keys, a.strings)
        write_run(f"{tmp}/warm", 10, a.keys, a.strings)
        print(f"file: {size / 1e6:.0f} MB, {a.rows} rows x {a.keys + 4} numeric + {a.strings} string keys")
        for _ in range(a.repeat):
            for name, what, checkout in readers:
                res[name].append(child(what, f"{tmp}/run", f"{tmp}/warm", checkout))
    for name, runs in res.items():
        secs = [x["seconds"] for x in runs]
        added = [x["added"] / 2**20 for x in runs]
        print(
            f"{name:16s} {statistics.median(secs) * 1e3:7.0f} ms [{min(secs) * 1e3:.0f}-{max(secs) * 1e3:.0f}]"
            f"  peak added {statistics.median(added):7.1f} MiB  frame {runs[0]['frame'] / 2**20:6.1f} MiB"
            f"  shape {runs[0]['shape']}  ({runs[0]['rllog']})"
        )
    for name, runs in res.items():
        m = [x["added"] / x["frame"] for x in runs]
        t = [x["seconds"] / p["seconds"] for x, p in zip(runs, res["pandas"], strict=True)]
        print(f"{name:16s} time/pandas {span(t)}  peak added/frame {span(m)}")


if __name__ == "__main__":
    main()
