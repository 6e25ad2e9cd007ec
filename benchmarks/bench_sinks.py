"""Cost on the training thread of ``report_to`` sinks, and of the trackers' own loggers.

For each configuration (no sinks; each sink; all sinks; the live doctor) a RunLogger logs
``--rows`` rows of 100 floats; the per-call time of ``log_metrics`` is measured on the
calling thread (the sinks run on their background thread; close is not timed). The
configurations run interleaved, ``--repeats`` times, and the median ratio to "none" is
printed with its range. For comparison, the same rows through ``wandb.log`` (offline)
and the tensorboard package's ``EventFileWriter`` (100 ``simple_value`` per event), and
an unused ``logger.timer`` context.

    WANDB_MODE=offline python benchmarks/bench_sinks.py [--rows 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import warnings

from rllog import RunLogger
from rllog.sinks import Console, TensorBoard, Trackio, Wandb


def rows(n: int) -> list[dict[str, float]]:
    rng = random.Random(0)
    keys = [f"env/all/metric_{k:02d}" for k in range(100)]
    return [{k: rng.random() for k in keys} for _ in range(n)]


def _quiet_wandb() -> Wandb:
    return Wandb(
        project="bench",
        mode="offline",
        settings={"x_disable_stats": True, "x_disable_meta": True, "x_disable_machine_info": True},
    )


CONFIGS = {
    "none": lambda: {},
    "console": lambda: {"report_to": Console(stream=open(os.devnull, "w"))},  # closed with the process
    "tensorboard": lambda: {"report_to": TensorBoard()},
    "wandb": lambda: {"report_to": _quiet_wandb()},
    "trackio": lambda: {"report_to": Trackio(project="bench")},  # $TRACKIO_DIR: set below to the temp folder
    "all": lambda: {"report_to": [TensorBoard(), _quiet_wandb(), Console(stream=open(os.devnull, "w"))]},
    "doctor": lambda: {"doctor": True},
}


def per_call_rllog(name: str, data: list[dict[str, float]], root: str) -> float:
    lg = RunLogger(
        os.path.join(root, f"{name}-{time.time_ns()}"),
        code_diff=False,
        index=False,
        sink_queue_size=len(data) + 10,
        **CONFIGS[name](),
    )
    t = time.perf_counter
    times = []
    for i, row in enumerate(data):
        t0 = t()
        lg.log_metrics(i, row)
        times.append(t() - t0)
    lg.close()
    return statistics.median(times)


def per_call_wandb(data: list[dict[str, float]], root: str) -> float:
    import wandb

    run = wandb.init(
        project="bench",
        mode="offline",
        dir=root,
        settings=wandb.Settings(
            console="off", x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True
        ),
    )
    times = []
    for i, row in enumerate(data):
        t0 = time.perf_counter()
        run.log(row, step=i)
        times.append(time.perf_counter() - t0)
    run.finish()
    return statistics.median(times)


def per_call_event_file_writer(data: list[dict[str, float]], root: str) -> float:
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(os.path.join(root, f"tb-{time.time_ns()}"))
    times = []
    for i, row in enumerate(data):
        t0 = time.perf_counter()
        s = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=k, simple_value=v) for k, v in row.items()]
        )
        w.add_event(event_pb2.Event(step=i, wall_time=time.time(), summary=s))
        times.append(time.perf_counter() - t0)
    w.close()
    return statistics.median(times)


def unused_timer(root: str, n: int = 20000) -> float:
    lg = RunLogger(os.path.join(root, f"timer-{time.time_ns()}"), code_diff=False, index=False)
    timer = lg.timer
    t0 = time.perf_counter()
    for _ in range(n):
        with timer("x"):
            pass
    dt = (time.perf_counter() - t0) / n
    lg._timings.take()
    lg.close()
    return dt


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    warnings.simplefilter("ignore")
    data = rows(args.rows)
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as root:
        os.environ.setdefault("WANDB_DIR", root)
        os.environ.setdefault("TRACKIO_DIR", os.path.join(root, "trackio"))
        for _ in range(args.repeats):
            for name in CONFIGS:
                results.setdefault(name, []).append(per_call_rllog(name, data, root))
            results.setdefault("wandb.log (peer)", []).append(per_call_wandb(data, root))
            results.setdefault("EventFileWriter (peer)", []).append(per_call_event_file_writer(data, root))
            results.setdefault("unused timer", []).append(unused_timer(root))
    base = results["none"]
    print(f"{'config':<24} {'median us/call':>15} {'added us':>10} {'ratio to none (range)':>24}")
    for name, xs in results.items():
        ratios = [x / b for x, b in zip(xs, base, strict=True)]
        added = statistics.median([x - b for x, b in zip(xs, base, strict=True)])
        print(
            f"{name:<24} {1e6 * statistics.median(xs):>15.2f} {1e6 * added:>10.2f} "
            f"{statistics.median(ratios):>10.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    main()
