"""S3 appends on moto: flush time and requests as the file grows, upload bytes / size.

    python benchmarks/bench_s3.py [--sizes-mb 1,10,100] [--row-kb 1] [--flush-kb 256]

Appends rows of ``--row-kb`` KiB to ``metrics.jsonl`` on a moto server on 127.0.0.1
through a counting proxy, flushing every ``--flush-kb`` KiB, until the file reaches each
of ``--sizes-mb`` MiB; at each size prints the median flush time and requests of the
last 10 flushes, then closes and prints upload bytes / final size and the close time.
S3's real 5 MiB part minimum is kept (moto is told nothing else).
Pass ``--old`` to run the same against ``git show main:rllog/_storage/objectops.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("RLLOG_SPILL_DIR", tempfile.mkdtemp(prefix="rllog-bench-spill-"))

from servers import FaultProxy, S3Server  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mb", default="1,10,100")
    parser.add_argument("--row-kb", type=float, default=1.0)
    parser.add_argument("--flush-kb", type=float, default=256.0)
    parser.add_argument("--old", action="store_true")
    args = parser.parse_args()
    if args.old:
        import subprocess

        old = subprocess.run(
            ["git", "-C", str(ROOT), "show", "main:rllog/_storage/objectops.py"],
            capture_output=True,
            check=True,
        ).stdout
        import rllog._storage.objectops as ops

        exec(compile(old, ops.__file__, "exec"), ops.__dict__)  # the old S3Ops, in place
    from rllog.storage import FsspecStorage

    s3 = S3Server()
    proxy = FaultProxy(s3.endpoint)
    url = f"s3://{s3.new_bucket()}/run"
    storage = FsspecStorage(url, spill=False, flush_interval=3600, **s3.storage_options(proxy.endpoint))
    row = b'{"step": 0, "pad": "' + b"x" * int(args.row_kb * 1024 - 22) + b'"}\n'
    per_flush = max(1, int(args.flush_kb * 1024 // len(row)))
    written = 0
    print(f"{'old' if args.old else 'new'} S3Ops: rows {len(row)} B, flush every {per_flush} rows")
    print(f"{'size MiB':>9} {'flush ms (median of 20)':>24} {'requests/flush':>15}")
    for size_mb in [float(s) for s in args.sizes_mb.split(",")]:
        times, reqs = [], []
        while written < size_mb * 2**20:
            for _ in range(per_flush):
                storage.append("metrics.jsonl", row)
            written += per_flush * len(row)
            before = proxy.stats.requests
            t = time.perf_counter()
            storage.flush(durable=True, timeout=600)
            times.append(time.perf_counter() - t)
            reqs.append(proxy.stats.requests - before)
        print(
            f"{size_mb:9.0f} {1000 * statistics.median(times[-20:]):24.1f} {statistics.median(reqs[-20:]):15.0f}"
        )
    t = time.perf_counter()
    storage.close(timeout=600)
    close_s = time.perf_counter() - t
    final = len(storage.fs.cat_file(f"{storage._root}/metrics.jsonl"))
    assert final == written, (final, written)
    print(
        f"upload bytes / final size: {proxy.stats.upload_bytes / final:.3f}  (final {final / 2**20:.0f} MiB)"
    )
    print(f"close: {close_s:.2f} s")
    proxy.stop()


if __name__ == "__main__":
    main()
