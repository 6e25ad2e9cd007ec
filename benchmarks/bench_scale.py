"""Scale: RunLogger.close and resume on long runs (issue 15).

Each measurement runs in a fresh subprocess (peak RSS from ``resource.getrusage``),
``--repeat`` times interleaved with the baseline; the median and range are printed.

- close: ``RunLogger.close()`` after ROWS rows x KEYS keys (index on), in seconds and
  peak RSS added by close; baseline: the same with ``index=False`` (the floor).
- resume: ``RunLogger(resume=True)`` on a metrics file of ROWS x KEYS whose last half
  is superseded (read the file, write half of it to metrics.superseded.jsonl, fsync,
  truncate); resume_keep: the same where the checkpoint is past every row (nothing
  moves); baseline: one streaming pass over the file (``for line in f``).

    PYTHONPATH=. python benchmarks/bench_scale.py --rows 100000 --keys 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, resource, shutil, sys, time
what, path, rows, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from rllog import RunLogger
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
names = [f"k/{i}" for i in range(keys)]
if what in ("close", "close_noindex"):
    lg = RunLogger(path, code_diff=False, index=(what == "close"))
    for s in range(rows):
        lg.log_metrics(s, {"progress/batch": s, **{k: s * 0.5 + j for j, k in enumerate(names)}})
    before = rss(); t = time.perf_counter(); lg.close(); dt = time.perf_counter() - t
elif what == "resume":
    before = rss(); t = time.perf_counter()
    lg = RunLogger(path, code_diff=False, index=False, resume=True); dt = time.perf_counter() - t
    lg.close()
else:  # stream: the floor of resume
    before = rss(); t = time.perf_counter()
    n = 0
    with open(os.path.join(path, "metrics.jsonl"), "rb") as f:
        for line in f:
            n += len(line)
    dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_added": rss() - before}))
"""


def child(what: str, path: str, rows: int, keys: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, what, path, str(rows), str(keys)], capture_output=True, check=True
    )
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def make_resume_run(path: str, rows: int, keys: int, batch: int | None = None) -> None:
    import os

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for s in range(rows):
            f.write(
                json.dumps({"step": s, "progress/batch": s, **{f"k/{i}": s * 0.5 + i for i in range(keys)}})
                + "\n"
            )
    with open(os.path.join(path, "checkpoints.jsonl"), "w") as f:
        f.write(json.dumps({"name": "half", "batch": rows // 2 if batch is None else batch}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("close", "resume"), help="measure only this (and its baseline)")
    a = ap.parse_args()
    res: dict[str, list[dict]] = {
        k: [] for k in ("close", "close_noindex", "resume", "resume_keep", "stream")
    }
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.repeat):
            for what in ("close", "close_noindex") if a.only != "resume" else ():
                res[what].append(child(what, f"{tmp}/{what}{r}", a.rows, a.keys))
            if a.only == "close":
                continue
            make_resume_run(f"{tmp}/resume{r}", a.rows, a.keys)
            res["stream"].append(child("stream", f"{tmp}/resume{r}", a.rows, a.keys))
            res["resume"].append(child("resume", f"{tmp}/resume{r}", a.rows, a.keys))
            make_resume_run(f"{tmp}/keep{r}", a.rows, a.keys, batch=a.rows)
            res["resume_keep"].append(child("resume", f"{tmp}/keep{r}", a.rows, a.keys))
    for what, runs in res.items():
        if not runs:
            continue
        secs = [x["seconds"] for x in runs]
        mib = [x["rss_added"] / 2**20 for x in runs]
        print(
            f"{what:14s} median {statistics.median(secs) * 1e3:8.1f} ms  [{min(secs) * 1e3:.1f}-{max(secs) * 1e3:.1f}]"
            f"  peak RSS added median {statistics.median(mib):7.1f} MiB"
        )
    ratio = [c["seconds"] / n["seconds"] for c, n in zip(res["close"], res["close_noindex"], strict=True)]
    if ratio:
        print(
            f"close/close_noindex  median {statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]"
        )
    ratio = [c["seconds"] / n["seconds"] for c, n in zip(res["resume"], res["stream"], strict=True)]
    if ratio:
        print(
            f"resume/stream        median {statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]"
        )
    ratio = [c["seconds"] / n["seconds"] for c, n in zip(res["resume_keep"], res["stream"], strict=True)]
    if ratio:
        print(
            f"resume_keep/stream   median {statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]"
        )


if __name__ == "__main__":
    main()
