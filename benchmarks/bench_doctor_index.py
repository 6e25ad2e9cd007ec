"""Time `rllog doctor` and `rllog index` on the largest real logs (copied to a temp run folder).

    PYTHONPATH=. python benchmarks/bench_doctor_index.py

Prints the median of 5 runs of: reading the run, diagnose() alone, check_run (read +
diagnose), write_index (read + diagnose + render + atomic write), and the page size.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

from rllog._read.view import open_run
from rllog.doctor import check_run, diagnose
from rllog.index import write_index

REALDATA = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
FILES = {
    "8,200-row sparse SFT log (1.2 MB)": next(
        REALDATA.glob("extra/HazyResearch__act-prm-tinker/**/metrics.jsonl"), None
    ),
    "683-row tinker SFT log": REALDATA
    / "tinker/arvindcr4__tinker-rl-lab/experiments/results/distillation_off_metrics.jsonl",
    "113-row tinker RL run": REALDATA / "tinker/sushantmehta-code__tinker-cookbook/logs_v2p7/metrics.jsonl",
}


def median_ms(fn, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main() -> None:
    if not REALDATA.is_dir():
        print(f"skipped: no real data at {REALDATA}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for label, src in FILES.items():
            if src is None or not src.exists():
                print(f"{label}: skipped, file missing")
                continue
            run = Path(tmp) / src.parent.name[:40]
            run.mkdir()
            shutil.copyfile(src, run / "metrics.jsonl")
            view = open_run(run)
            print(f"{label}: {len(view.metrics)} rows x {view.metrics.shape[1]} columns")
            print(f"  read run       {median_ms(lambda run=run: open_run(run)):8.1f} ms")
            print(
                f"  diagnose only  {median_ms(lambda view=view: diagnose(view.metrics, nonfinite=view.nonfinite)):8.1f} ms"
            )
            print(f"  check_run      {median_ms(lambda run=run: check_run(run)):8.1f} ms")
            print(
                f"  write_index    {median_ms(lambda run=run: write_index(run)):8.1f} ms  "
                f"({(run / 'index.html').stat().st_size / 1024:.0f} KiB page)"
            )


if __name__ == "__main__":
    main()
