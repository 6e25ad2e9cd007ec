"""Scale: RunLogger.close and resume on long runs (issue 15).

- close: ``RunLogger.close()`` after ROWS rows x KEYS keys (index on), in seconds and
  peak RSS added by close; baseline: the same with ``index=False`` (the floor). Each
  measurement in a fresh subprocess (peak RSS from ``resource.getrusage``).
- resume: ``RunLogger(path, resume=True)`` (the constructor: lock, resume, status file)
  on a metrics file of ROWS x KEYS, four runs:

  - ``foreign_keep`` / ``foreign_half``: rows written with ``json.dumps`` and a record
    written by hand (another tool, an older rllog: no ``metrics_at``), so resume reads
    the whole file; the checkpoint past every row (nothing moves) or at the middle (the
    last half moves: copied to metrics.superseded.jsonl, fsynced, the file cut);
  - ``rllog_keep`` / ``rllog_half``: the same written by RunLogger with
    ``log_checkpoint``: the record says where the file stood, so resume reads only the
    rows after it (none, or the last half).

  Baselines, in the same process on the same file just before each resume: ``line``, a
  plain streaming read (``for line in f``), and ``block``, 8 MiB blocks with their lines
  counted (``f.read(8 MiB).count(b"\n")``). The runs are fresh copies for every repeat
  (in the page cache, as after a crash on the same machine); cases are interleaved, and
  the median and range of the per-repeat ratios are printed. Peak RSS added by each
  resume (its RSS above the RSS just before it, read from ``/proc/self/statm`` every
  0.2 ms by a thread: the kernel's own peak misses blocks freed in between) is measured
  in a subprocess on another fresh copy.

    PYTHONPATH=. python benchmarks/bench_scale.py --only resume --rows 100000 --keys 100
    PYTHONPATH=. python benchmarks/bench_scale.py --only resume --rows 1000000 --keys 100 --repeat 1  # ~1.5 GB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, resource, sys, time
what, path, rows, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
from rllog import RunLogger
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
class Sampler:  # the RSS read every 0.2 ms from /proc (the kernel's peak misses freed blocks)
    def __init__(self):
        import threading
        self.page, self.stop, self.peak = os.sysconf("SC_PAGE_SIZE"), threading.Event(), 0
        self.thread = threading.Thread(target=self.run, daemon=True)
    def now(self):
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page
    def run(self):
        while not self.stop.wait(0.0002):
            self.peak = max(self.peak, self.now())
    def __enter__(self):
        self.before = self.peak = self.now(); self.thread.start(); return self
    def __exit__(self, *exc):
        self.stop.set(); self.thread.join(); self.peak = max(self.peak, self.now())
names = [f"k/{i}" for i in range(keys)]
if what in ("close", "close_noindex"):
    lg = RunLogger(path, code_diff=False, index=(what == "close"))
    for s in range(rows):
        lg.log_metrics(s, {"progress/batch": s, **{k: s * 0.5 + j for j, k in enumerate(names)}})
    before = rss(); t = time.perf_counter(); lg.close(); dt = time.perf_counter() - t
    added = rss() - before
else:  # resume: the peak RSS it adds above the RSS just before it
    with Sampler() as sampled:
        t = time.perf_counter()
        lg = RunLogger(path, code_diff=False, index=False, resume=True); dt = time.perf_counter() - t
    added = sampled.peak - sampled.before
    lg.close()
print(json.dumps({"seconds": dt, "rss_added": added}))
"""

RESUME_CASES = ("foreign_keep", "foreign_half", "rllog_keep", "rllog_half")


def child(what: str, path: str, rows: int, keys: int) -> dict:
    out = subprocess.run(  # run from the run's folder: ``-c`` puts the working folder first on sys.path
        [sys.executable, "-c", CHILD, what, path, str(rows), str(keys)],
        capture_output=True,
        check=True,
        cwd=os.path.dirname(path),
    )
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def _row(s: int, keys: int) -> dict:
    return {"progress/batch": s, **{f"k/{i}": s * 0.5 + i for i in range(keys)}}


def make_foreign_run(path: str, rows: int, keys: int, batch: int) -> None:
    """Rows as ``json.dumps`` writes them, one checkpoint record without ``metrics_at``."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for s in range(rows):
            f.write(json.dumps({"step": s, **_row(s, keys)}) + "\n")
    with open(os.path.join(path, "checkpoints.jsonl"), "w") as f:
        f.write(json.dumps({"name": "ckpt", "batch": batch, "state_path": "/ckpt"}) + "\n")


def make_rllog_run(path: str, rows: int, keys: int, batch: int) -> None:
    """The same rows logged by RunLogger, a checkpoint taken after row ``batch - 1``."""
    from rllog import RunLogger

    with RunLogger(path, code_diff=False, index=False) as logger:
        for s in range(rows):
            logger.log_metrics(s, _row(s, keys))
            if s == batch - 1:
                logger.log_checkpoint("ckpt", batch=batch, state_path="/ckpt")


def stream_lines(path: str) -> int:
    """The plain streaming read: Python's line iterator."""
    n = 0
    with open(path, "rb") as f:
        for _ in f:
            n += 1
    return n


def stream_blocks(path: str) -> int:
    """8 MiB blocks, their lines counted."""
    n = 0
    with open(path, "rb") as f:
        while block := f.read(8 << 20):
            n += block.count(b"\n")
    return n


def timed(fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def resume_bench(tmp: str, rows: int, keys: int, repeat: int, cases: tuple[str, ...]) -> None:
    from rllog import RunLogger

    templates = {}
    for case in cases:
        kind, where = case.split("_")
        batch = rows if where == "keep" else rows // 2
        templates[case] = f"{tmp}/template-{case}"
        (make_foreign_run if kind == "foreign" else make_rllog_run)(templates[case], rows, keys, batch)
    size = {c: os.path.getsize(f"{t}/metrics.jsonl") for c, t in templates.items()}
    secs: dict[str, dict[str, list[float]]] = {c: {"resume": [], "line": [], "block": []} for c in cases}
    mib: dict[str, list[float]] = {c: [] for c in cases}
    for r in range(repeat):
        for case in cases:
            run = f"{tmp}/{case}-{r}"
            shutil.copytree(templates[case], run)
            metrics = f"{run}/metrics.jsonl"
            secs[case]["line"].append(timed(stream_lines, metrics)[0])
            secs[case]["block"].append(timed(stream_blocks, metrics)[0])
            seconds, logger = timed(RunLogger, run, code_diff=False, index=False, resume=True)
            secs[case]["resume"].append(seconds)
            logger.close()
            moved = os.path.exists(f"{run}/metrics.superseded.jsonl")
            assert moved == case.endswith("half"), (case, logger.warnings)
            shutil.rmtree(run)
            shutil.copytree(templates[case], run)
            mib[case].append(child("resume", run, rows, keys)["rss_added"] / 2**20)
            shutil.rmtree(run)
    for case in cases:
        print(f"{case}: metrics.jsonl {size[case] / 2**20:.0f} MiB")
        for what, values in secs[case].items():
            print(
                f"  {what:6s} median {statistics.median(values) * 1e3:8.1f} ms "
                f"[{min(values) * 1e3:.1f}-{max(values) * 1e3:.1f}]"
            )
        for base in ("line", "block"):
            ratio = [a / b for a, b in zip(secs[case]["resume"], secs[case][base], strict=True)]
            print(
                f"  resume/{base:5s} median {statistics.median(ratio):6.2f}x "
                f"[{min(ratio):.2f}-{max(ratio):.2f}]"
            )
        print(
            f"  peak RSS added by resume median {statistics.median(mib[case]):.1f} MiB "
            f"[{min(mib[case]):.1f}-{max(mib[case]):.1f}]"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=("close", "resume"), help="measure only this (and its baseline)")
    ap.add_argument("--cases", default=",".join(RESUME_CASES), help="resume cases, comma-separated")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if a.only != "resume":
            close_bench(tmp, a.rows, a.keys, a.repeat)
        if a.only != "close":
            resume_bench(tmp, a.rows, a.keys, a.repeat, tuple(a.cases.split(",")))


def close_bench(tmp: str, rows: int, keys: int, repeat: int) -> None:
    res: dict[str, list[dict]] = {"close": [], "close_noindex": []}
    for r in range(repeat):
        for what in res:
            res[what].append(child(what, f"{tmp}/{what}{r}", rows, keys))
    for what, runs in res.items():
        secs = [x["seconds"] for x in runs]
        mib = [x["rss_added"] / 2**20 for x in runs]
        print(
            f"{what:14s} median {statistics.median(secs) * 1e3:8.1f} ms  [{min(secs) * 1e3:.1f}-{max(secs) * 1e3:.1f}]"
            f"  peak RSS added median {statistics.median(mib):7.1f} MiB"
        )
    ratio = [c["seconds"] / n["seconds"] for c, n in zip(res["close"], res["close_noindex"], strict=True)]
    print(f"close/close_noindex  median {statistics.median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]")


if __name__ == "__main__":
    main()
