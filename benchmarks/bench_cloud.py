"""rllog's FsspecStorage vs tinker-cookbook's FsspecStorage on the GCS emulator.

    python benchmarks/bench_cloud.py [--rows 2000] [--flush-every 50] [--kill-trials 0]

Both write the same metric rows (``metrics.jsonl``) to a gcp-storage-emulator on
127.0.0.1 through a counting proxy, calling ``flush`` every ``--flush-every`` rows,
then ``close``. Printed per writer: bytes uploaded (request bodies), requests, wall
time, and the time inside ``append`` (what ``log_metrics`` pays) at p50/p99; then the
ratios tinker/rllog. tinker-cookbook is skipped, saying so, if it is not installed.

``--kill-trials N`` also runs N kill -9 trials of a writer process (tests/cloud/cloud_writer.py)
and checks every acknowledged row is present once after the same machine resumes.

``--resume-mb 50,300`` also measures ``RunLogger(url, resume=True)`` on GCS runs of that
many MB of metrics.jsonl whose checkpoint stands at 90 % of the rows (the last 10 % move
to metrics.superseded.jsonl): bytes uploaded and downloaded, requests and wall time of
the resume, "streamed" (the run without its checkpoint snapshot: the kept prefix is
streamed back, as before snapshots) against "snapshot" (the cut composes the snapshot
taken at the checkpoint). Each trial resumes a fresh copy of the run, the two cases
interleaved ``--repeat`` times::

    PYTHONPATH=. python benchmarks/bench_cloud.py --rows 0 --resume-mb 50,300 --repeat 3
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


KEYS = [f"k/{i}" for i in range(60)]


def build_resume_run(server: GcsServer, mb: float) -> tuple[dict[str, bytes], int, int]:
    """A run of ``mb`` MB of metric rows with a checkpoint at 90 % of them, written by
    RunLogger on the emulator (one upload at the checkpoint, one at close); ``(its
    objects by name, bytes kept at resume, bytes moved)``."""
    from rllog import RunLogger
    from rllog.storage import FsspecStorage

    def row(s: int) -> dict:
        return {"progress/batch": s, **{k: s * 0.5 + j for j, k in enumerate(KEYS)}}

    size = (
        len(json.dumps({"step": 123456, **row(123456)}, separators=(",", ":"))) + 1
    )  # a row as rllog writes it
    rows = int(mb * 1e6 / size)
    checkpoint = int(rows * 0.9)
    url = f"gs://{server.new_bucket()}/runs/{unique('run')}"
    options = server.storage_options()
    with RunLogger(url, code_diff=False, index=False, flush_interval=3600, **options) as logger:
        for s in range(rows):
            logger.log_metrics(s, row(s))
            if s == checkpoint - 1:
                logger.log_checkpoint("c", batch=checkpoint)
    storage = FsspecStorage(url, spill=False, **options)
    try:
        root = storage._root
        objects = {path[len(root) + 1 :]: storage.fs.cat_file(path) for path in storage.fs.find(root)}
    finally:
        storage.close()
    metrics = objects["metrics.jsonl"]
    kept = sum(len(line) for line in metrics.splitlines(keepends=True)[:checkpoint])
    assert objects.get(".rllog-parts/snapshots/metrics.jsonl") == metrics[:kept], (
        "no snapshot at the checkpoint"
    )
    return objects, kept, len(metrics) - kept


def resume_trial(server: GcsServer, proxy: FaultProxy, objects: dict[str, bytes], snapshot: bool) -> dict:
    """Resume a fresh copy of the run (without its snapshot unless ``snapshot``) through the proxy."""
    import gcsfs

    from rllog import RunLogger

    bucket = server.new_bucket()
    prefix = f"runs/{unique('run')}"
    fs = gcsfs.GCSFileSystem(skip_instance_cache=True, **server.storage_options())  # not counted
    for name, data in objects.items():
        if snapshot or not name.startswith(".rllog-parts/snapshots/"):
            fs.pipe_file(f"{bucket}/{prefix}/{name}", data)
    proxy.reset()
    t = time.perf_counter()
    with RunLogger(
        f"gs://{bucket}/{prefix}",
        resume=True,
        code_diff=False,
        index=False,
        **server.storage_options(proxy.endpoint),
    ):
        pass
    wall = time.perf_counter() - t
    stats = proxy.stats
    result = {
        "upload": stats.upload_bytes,
        "download": stats.download_bytes,
        "requests": stats.requests,
        "wall": wall,
    }
    for path in fs.find(f"{bucket}/{prefix}"):  # free the emulator's memory
        fs.rm_file(path)
    return result


def resume_bench(server: GcsServer, proxy: FaultProxy, sizes: list[float], repeat: int) -> None:
    import statistics

    cases = ("streamed", "snapshot")
    print(f"resume on GCS (emulator on 127.0.0.1, through a counting proxy); {repeat} interleaved repeats")
    print(
        f"{'MB':>6}{'case':>10}{'kept MB':>9}{'moved MB':>9}{'upload MB':>11}{'download MB':>13}"
        f"{'requests':>10}{'wall s (median, range)':>26}"
    )
    for mb in sizes:
        objects, kept, moved = build_resume_run(server, mb)
        got: dict[str, list[dict]] = {c: [] for c in cases}
        for i in range(repeat):
            for case in cases if i % 2 == 0 else cases[::-1]:
                got[case].append(resume_trial(server, proxy, objects, case == "snapshot"))
        for case in cases:
            runs = got[case]
            walls = [r["wall"] for r in runs]
            print(
                f"{mb:>6g}{case:>10}{kept / 1e6:>9.1f}{moved / 1e6:>9.1f}"
                f"{statistics.median(r['upload'] for r in runs) / 1e6:>11.2f}"
                f"{statistics.median(r['download'] for r in runs) / 1e6:>13.2f}"
                f"{statistics.median(r['requests'] for r in runs):>10.0f}"
                f"{statistics.median(walls):>10.2f} ({min(walls):.2f}-{max(walls):.2f})"
            )
        ups = [a["upload"] / b["upload"] for a, b in zip(got["streamed"], got["snapshot"], strict=True)]
        walls = [a["wall"] / b["wall"] for a, b in zip(got["streamed"], got["snapshot"], strict=True)]
        print(
            f"{mb:>6g}  streamed/snapshot: upload median {statistics.median(ups):.1f}x "
            f"({min(ups):.1f}-{max(ups):.1f}), wall median {statistics.median(walls):.2f}x "
            f"({min(walls):.2f}-{max(walls):.2f})"
        )


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


def writer_bench(server: GcsServer, proxy: FaultProxy, args: argparse.Namespace) -> None:
    """rllog (and tinker-cookbook, if installed) writing ``--rows`` rows; see the module docstring."""
    import gcsfs

    from rllog.storage import FsspecStorage

    rows = make_rows(args.rows)
    results = []
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--flush-every", type=int, default=50)
    parser.add_argument("--kill-trials", type=int, default=0)
    parser.add_argument("--resume-mb", default="", help="comma-separated MB of metrics.jsonl, e.g. 50,300")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repeats of each resume case")
    args = parser.parse_args()
    server = GcsServer(PORT)
    proxy = FaultProxy(server.endpoint)
    try:
        if args.rows:
            writer_bench(server, proxy, args)
        if args.kill_trials:
            kill_trials(server, args.kill_trials)
        if args.resume_mb:
            resume_bench(server, proxy, [float(x) for x in args.resume_mb.split(",")], args.repeat)
    finally:
        proxy.stop()
        server.stop()


if __name__ == "__main__":
    main()
