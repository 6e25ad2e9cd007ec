"""S3 appends on moto: flush cost as the file grows, and upload bytes / final size.

    python benchmarks/bench_s3.py [--sizes-mb 1,10,100] [--row-kb 1] [--flush-kb 256]
                                  [--repeat 3] [--old-ref main] [--no-old]

Two writers append the same rows of ``--row-kb`` KiB to ``metrics.jsonl`` in two buckets
of one moto server on 127.0.0.1, each through its own counting proxy, flushing every
``--flush-kb`` KiB, in turn (one flush of one, then one of the other): this branch's
``S3Ops`` and the one of ``git show <--old-ref>:rllog/_storage/objectops.py``. At each of
``--sizes-mb`` MiB it prints, per writer, the median over the last 20 flushes of the
flush time, requests and KiB downloaded (listings, mostly), and the time ratio
new/old. After close: object bytes (PUT bodies: segments, chunks, parts) and all
request bodies (plus multipart and delete XML) over the final size, and the close time.
With ``--repeat N`` the whole run is done N times and ratios are given as the median
and range. S3's real 5 MiB part minimum is kept (moto is told nothing else); moto keeps
objects over 5 MiB in temporary files and builds a completed multipart object in
memory (about 3x the file size at close).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("RLLOG_SPILL_DIR", tempfile.mkdtemp(prefix="rllog-bench-spill-"))

from servers import FaultProxy, S3Server  # noqa: E402


def old_objectops(ref: str) -> types.ModuleType:
    """``rllog/_storage/objectops.py`` as it is at git ``ref``, as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:rllog/_storage/objectops.py"],
        capture_output=True,
        check=True,
    ).stdout
    module = types.ModuleType(f"objectops_{ref}")
    module.__file__ = f"{ref}:rllog/_storage/objectops.py"
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


class Writer:
    """One storage on its own bucket and proxy, with its flush measurements."""

    def __init__(self, s3: S3Server, name: str, ops_module: types.ModuleType | None) -> None:
        from rllog.storage import FsspecStorage

        self.name = name
        self.proxy = FaultProxy(s3.endpoint)
        url = f"s3://{s3.new_bucket()}/run"
        self.storage = FsspecStorage(
            url, spill=False, flush_interval=3600, **s3.storage_options(self.proxy.endpoint)
        )
        if ops_module is not None:  # the old S3Ops behind the same staging
            ops = self.storage._ops
            self.storage._ops = ops_module.S3Ops(ops.fs, ops.writer_id, ops.root)
        self.times: list[float] = []
        self.requests: list[int] = []
        self.fetched: list[int] = []

    def flush(self) -> None:
        stats = self.proxy.stats
        before, got = stats.requests, stats.download_bytes
        t = time.perf_counter()
        self.storage.flush(durable=True, timeout=600)
        self.times.append(time.perf_counter() - t)
        self.requests.append(stats.requests - before)
        self.fetched.append(stats.download_bytes - got)

    def last(self) -> tuple[float, float, float]:
        """Median flush ms, requests, KiB downloaded over the last 20 flushes."""
        return (
            1000 * statistics.median(self.times[-20:]),
            statistics.median(self.requests[-20:]),
            statistics.median(self.fetched[-20:]) / 1024,
        )

    def close(self, written: int) -> dict[str, float]:
        t = time.perf_counter()
        self.storage.close(timeout=600)
        close_s = time.perf_counter() - t
        final = self.storage.fs.size(f"{self.storage._root}/metrics.jsonl")
        assert final == written, (self.name, final, written)
        log = self.proxy.stats.log
        objects = sum(n for method, path, n in log if method == "PUT" and "metrics.jsonl" in path)
        bodies = self.proxy.stats.upload_bytes  # the only file written (and an 18-byte probe at open)
        self.proxy.stop()
        return {"objects": objects / final, "bodies": bodies / final, "close_s": close_s, "final": final}


def run(args: argparse.Namespace, s3: S3Server, old: types.ModuleType | None) -> dict[str, Any]:
    writers = [Writer(s3, "new", None)] + ([Writer(s3, "old", old)] if old is not None else [])
    row = b'{"step": 0, "pad": "' + b"x" * int(args.row_kb * 1024 - 22) + b'"}\n'
    per_flush = max(1, int(args.flush_kb * 1024 // len(row)))
    batch = row * per_flush
    written = 0
    out: dict[str, Any] = {"sizes": []}
    for size_mb in [float(s) for s in args.sizes_mb.split(",")]:
        while written < size_mb * 2**20:
            for writer in writers:  # in turn: load on the machine hits both alike
                writer.storage.append("metrics.jsonl", batch)
                writer.flush()
            written += len(batch)
        out["sizes"].append((size_mb, {w.name: w.last() for w in writers}))
        report_size(size_mb, out["sizes"][-1][1])
    out["close"] = {w.name: w.close(written) for w in writers}
    return out


def report_size(size_mb: float, last: dict[str, tuple[float, float, float]]) -> None:
    cells = "  ".join(
        f"{name}: {ms:7.1f} ms {req:3.0f} req {kib:6.1f} KiB" for name, (ms, req, kib) in last.items()
    )
    ratio = f"  new/old {last['new'][0] / last['old'][0]:.2f}" if "old" in last else ""
    print(f"{size_mb:8.0f} MiB  {cells}{ratio}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes-mb", default="1,10,100")
    parser.add_argument("--row-kb", type=float, default=1.0)
    parser.add_argument("--flush-kb", type=float, default=256.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--old-ref", default="main")
    parser.add_argument("--no-old", action="store_true", help="only this branch's S3Ops")
    args = parser.parse_args()
    old = None if args.no_old else old_objectops(args.old_ref)
    s3 = S3Server()
    print(f"rows {int(args.row_kb * 1024)} B, a flush every {args.flush_kb:g} KiB; old = {args.old_ref}")
    runs = []
    for i in range(args.repeat):
        print(f"run {i + 1}/{args.repeat}: per flush, median of the last 20", flush=True)
        runs.append(run(args, s3, old))
        for name, c in runs[-1]["close"].items():
            print(
                f"  {name}: object bytes / final {c['objects']:.4f}, all request bodies / final "
                f"{c['bodies']:.4f} (final {c['final'] / 2**20:.1f} MiB), close {c['close_s']:.2f} s",
                flush=True,
            )
    if old is not None and args.repeat > 1:
        print("flush time new/old, median [range] over runs:")
        for k, (size_mb, _) in enumerate(runs[0]["sizes"]):
            ratios = sorted(r["sizes"][k][1]["new"][0] / r["sizes"][k][1]["old"][0] for r in runs)
            print(f"{size_mb:8.0f} MiB  {statistics.median(ratios):.2f} [{ratios[0]:.2f}, {ratios[-1]:.2f}]")
    s3.stop()


if __name__ == "__main__":
    main()
