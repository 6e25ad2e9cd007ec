"""rllog's FsspecStorage vs tinker-cookbook's FsspecStorage on the GCS emulator.

    python benchmarks/bench_cloud.py [--rows 2000] [--flush-every 50] [--kill-trials 0]

Both write the same metric rows (``metrics.jsonl``) to a gcp-storage-emulator on
127.0.0.1 through a counting proxy, calling ``flush`` every ``--flush-every`` rows,
then ``close``. Printed per writer: bytes uploaded (request bodies), requests, wall
time, and the time inside ``append`` (what ``log_metrics`` pays) at p50/p99; then the
ratios tinker/rllog. tinker-cookbook is skipped, saying so, if it is not installed.

``--kill-trials N`` also runs N kill -9 trials of a writer process (tests/cloud/cloud_writer.py)
and checks every acknowledged row is present once after the same machine resumes.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from servers import FaultProxy, GcsServer, configure_gcs_env, free_port, unique  # noqa: E402

PORT = free_port()
configure_gcs_env(PORT)  # before gcsfs is imported
import os  # noqa: E402

os.environ.setdefault("RLLOG_SPILL_DIR", tempfile.mkdtemp(prefix="rllog-bench-spill-"))


def make_rows(n: int) -> list[bytes]:
    rng = random.Random(0)
    keys = [
        "progress/batch",
        "progress/done_frac",
        "env/all/reward/total",
        "entropy",
        "kl_sample_train_v1",
        "kl_sample_train_v2",
        "optim/lr",
        "ac_tokens_per_turn",
        "time/sample",
        "time/train",
    ]
    keys += [f"env/all/metric_{k}" for k in range(20)]
    return [(json.dumps({"step": i, **{k: rng.random() for k in keys}}) + "\n").encode() for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(name: str, open_storage, rows: list[bytes], flush_every: int, proxy: FaultProxy) -> dict:
    storage = open_storage()
    proxy.reset()
    times = []
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        t = time.perf_counter()
        storage.append("metrics.jsonl", row)
        times.append(time.perf_counter() - t)
        if (i + 1) % flush_every == 0:
            storage.flush()
    storage.close()
    wall = time.perf_counter() - t0
    stats = proxy.stats
    return {
        "writer": name,
        "upload_bytes": stats.upload_bytes,
        "requests": stats.requests,
        "wall_s": wall,
        "append_p50_us": percentile(times, 0.5) * 1e6,
        "append_p99_us": percentile(times, 0.99) * 1e6,
    }


def kill_trials(server: GcsServer, trials: int) -> None:
    writer_py = str(ROOT / "tests" / "cloud" / "cloud_writer.py")
    from rllog.storage import FsspecStorage

    rng = random.Random(1)
    worst = 0
    for trial in range(trials):
        url = f"gs://{server.new_bucket()}/run"
        args = [
            sys.executable,
            writer_py,
            url,
            json.dumps(server.storage_options()),
            "w",
            "1000000",
            "25",
            "0.05",
        ]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline() == "READY\n"
        time.sleep(rng.uniform(0, 1.0))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acked = max([int(x.split()[1]) for x in out.splitlines() if x.startswith("ACK")], default=-1)
        resumed = FsspecStorage(url, **server.storage_options())
        resumed.close()
        reader = FsspecStorage(url, spill=False, **server.storage_options())
        data = reader.read("metrics.jsonl") if reader.exists("metrics.jsonl") else b""
        reader.close()
        got = [json.loads(line)["i"] for line in data.splitlines()]
        assert got == list(range(len(got))) and len(got) > acked, (
            f"trial {trial}: acked {acked}, got {len(got)}"
        )
        worst = max(worst, len(got) - acked - 1)
    print(
        f"kill -9: {trials} trials, every acknowledged row present once; "
        f"up to {worst} rows past the last acknowledgement recovered from the spill journal"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--flush-every", type=int, default=50)
    parser.add_argument("--kill-trials", type=int, default=0)
    args = parser.parse_args()

    import gcsfs

    from rllog.storage import FsspecStorage

    server = GcsServer(PORT)
    proxy = FaultProxy(server.endpoint)
    rows = make_rows(args.rows)
    results = []
    try:
        bucket = server.new_bucket()
        options = server.storage_options(proxy.endpoint)
        results.append(
            run(
                "rllog",
                lambda: FsspecStorage(f"gs://{bucket}/{unique('rllog')}", **options),
                rows,
                args.flush_every,
                proxy,
            )
        )
        try:
            from tinker_cookbook.stores import FsspecStorage as TinkerStorage
        except ImportError as exc:
            print(
                f"tinker-cookbook not installed ({exc}); skipping it "
                "(pip install --no-deps tinker-cookbook==0.6.1)"
            )
        else:
            fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **options)
            results.append(
                run(
                    "tinker-cookbook",
                    lambda: TinkerStorage(fs, f"{bucket}/{unique('tinker')}"),
                    rows,
                    args.flush_every,
                    proxy,
                )
            )
        size = sum(map(len, rows))
        print(
            f"{args.rows} rows ({size} bytes of metrics.jsonl), flush every {args.flush_every} rows, "
            "GCS emulator on 127.0.0.1"
        )
        print(
            f"{'writer':<16}{'upload bytes':>14}{'x file':>8}{'requests':>10}{'wall s':>9}"
            f"{'append p50 us':>15}{'append p99 us':>15}"
        )
        for r in results:
            print(
                f"{r['writer']:<16}{r['upload_bytes']:>14}{r['upload_bytes'] / size:>8.2f}{r['requests']:>10}"
                f"{r['wall_s']:>9.2f}{r['append_p50_us']:>15.1f}{r['append_p99_us']:>15.1f}"
            )
        if len(results) == 2:
            ours, peer = results
            print(
                "ratios tinker-cookbook / rllog: "
                + ", ".join(
                    f"{k} {peer[k] / ours[k]:.2f}x"
                    for k in ("upload_bytes", "requests", "wall_s", "append_p50_us", "append_p99_us")
                )
            )
        if args.kill_trials:
            kill_trials(server, args.kill_trials)
    finally:
        proxy.stop()
        server.stop()


if __name__ == "__main__":
    main()
