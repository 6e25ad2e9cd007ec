"""rllog's TRL callback vs ``report_to="none"`` and ``report_to="wandb"`` (offline) on the tiny GRPO run.

    python benchmarks/bench_trl.py [--steps 8] [--repeats 3]

The same tiny GRPOTrainer run (tests/integrations/tiny_trl.py: 2-layer Qwen2 on CPU,
4 completions a step, logging every step, no eval or save) is trained with

- ``none``: ``report_to="none"``;
- ``rllog``: ``report_to="none"`` + :func:`rllog.integrations.trl.attach` (metrics,
  config, and each step's completions as a logtree report and rollout summaries);
- ``wandb``: ``report_to="wandb"`` with ``WANDB_MODE=offline`` (its files in a temp folder).

interleaved (none, rllog, wandb, none, ...), ``--repeats`` times, in one process. For each
run it measures the time spent inside the tracker's callback methods (every ``on_*``
hook, by wrapping them), split into setup (``on_train_begin``/``on_train_end``: opening
and closing the run) and per logging step (every other hook, divided by the number of
logging steps); of the latter also the CPU time on the training thread
(``time.thread_time``: what the hooks compute, without waits for the disk or for the
cores of a busy machine) and the seconds in ``os.fsync``/``os.fdatasync`` (wandb writes
from its own process: none of its fsyncs are here; on a shared disk they vary most);
and the wall time of ``trainer.train()`` per step. Printed: medians with [min, max]
over the repeats, and the ratios rllog/wandb of the callback times (also without
rllog's fsyncs, and CPU only) and wall(x)/wall(none), as median [min, max] of the
per-repeat ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integrations")]

TMP = tempfile.mkdtemp(prefix="rllog-bench-trl-")
os.environ.update(
    WANDB_MODE="offline", WANDB_DIR=TMP, WANDB_SILENT="true", WANDB_CACHE_DIR=TMP, WANDB_CONFIG_DIR=TMP
)

from tiny_trl import trainer as tiny_trainer  # noqa: E402

from rllog.integrations.trl import RllogCallback, attach  # noqa: E402

SETUP = ("on_init_end", "on_train_begin", "on_train_end")
FSYNC = {"seconds": 0.0, "calls": 0}  # os.fsync and os.fdatasync in this process (every thread)


def _counted(sync):
    def counted(fd: int) -> None:
        t = time.perf_counter()
        try:
            sync(fd)
        finally:
            FSYNC["seconds"] += time.perf_counter() - t
            FSYNC["calls"] += 1

    return counted


for _name in ("fsync", "fdatasync"):  # still syncs; only counts (rllog looks os.fsync up at call time)
    if hasattr(os, _name):
        setattr(os, _name, _counted(getattr(os, _name)))


def _timed(cb: object, spent: dict[str, float]) -> None:
    """Wrap every ``on_*`` method of callback ``cb`` to add its seconds to ``spent``
    (``setup``/``step``), its CPU seconds on the calling thread (``setup_cpu``/``step_cpu``),
    and the seconds and calls of ``os.fsync`` made meanwhile (``step_fsync``/``step_fsyncs``)."""
    for name in dir(cb):
        if not name.startswith("on_"):
            continue
        fn = getattr(cb, name)
        key = "setup" if name in SETUP else "step"

        def wrapped(*a, __fn=fn, __key=key, **kw):
            t, c, f, n = time.perf_counter(), time.thread_time(), FSYNC["seconds"], FSYNC["calls"]
            try:
                return __fn(*a, **kw)
            finally:
                spent[__key] += time.perf_counter() - t
                spent[__key + "_cpu"] += time.thread_time() - c
                if __key == "step":
                    spent["step_fsync"] += FSYNC["seconds"] - f
                    spent["step_fsyncs"] += FSYNC["calls"] - n

        setattr(cb, name, wrapped)


def run_once(kind: str, steps: int, i: int) -> dict[str, float]:
    out = os.path.join(TMP, f"{kind}-{i}")
    overrides = {"eval_strategy": "no", "save_strategy": "no", "run_name": f"bench-{kind}-{i}"}
    tr = tiny_trainer("grpo", out, steps=steps, report_to="wandb" if kind == "wandb" else "none", **overrides)
    if kind == "rllog":
        attach(tr, os.path.join(out, "run"), code_diff=False)
    spent = dict.fromkeys(("setup", "setup_cpu", "step", "step_cpu", "step_fsync", "step_fsyncs"), 0.0)
    tracked = [
        cb
        for cb in tr.callback_handler.callbacks
        if isinstance(cb, RllogCallback) or type(cb).__name__ == "WandbCallback"
    ]
    assert len(tracked) == (0 if kind == "none" else 1), [
        type(c).__name__ for c in tr.callback_handler.callbacks
    ]
    for cb in tracked:
        _timed(cb, spent)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.train()
    wall = time.perf_counter() - t
    logging_steps = sum(1 for row in tr.state.log_history if "train_runtime" not in row)
    if kind == "rllog":
        assert os.path.exists(
            os.path.join(out, "run", f"train_iteration_{steps:06d}_rollout_summaries.jsonl")
        )
    return {
        "wall_per_step": wall / steps,
        "setup": spent["setup"],
        "per_log_step": spent["step"] / logging_steps,
        "fsync_per_log_step": spent["step_fsync"] / logging_steps,
        "fsyncs_per_log_step": spent["step_fsyncs"] / logging_steps,
        "no_fsync_per_log_step": (spent["step"] - spent["step_fsync"]) / logging_steps,
        "cpu_per_log_step": spent["step_cpu"] / logging_steps,
    }


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.4g} [{min(xs):.4g}, {max(xs):.4g}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    kinds = ("none", "rllog", "wandb")
    res: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
    run_once("none", 1, -1)  # warm-up: imports, first model build
    for i in range(args.repeats):
        for k in kinds:
            res[k].append(run_once(k, args.steps, i))
    print(
        f"tiny GRPO, {args.steps} steps, logging every step; median [min, max] of {args.repeats} interleaved repeats"
    )
    for k in kinds:
        r = res[k]
        print(
            f"{k:>6}: wall/step {_med([x['wall_per_step'] for x in r])} s"
            + (
                ""
                if k == "none"
                else f"; callback per logging step {_med([x['per_log_step'] * 1e3 for x in r])} ms"
                f" (CPU {_med([x['cpu_per_log_step'] * 1e3 for x in r])} ms)"
                f"; setup+close {_med([x['setup'] for x in r])} s"
            )
        )
        if k == "rllog":
            print(
                f"        of which in os.fsync {_med([x['fsync_per_log_step'] * 1e3 for x in r])} ms"
                f" ({_med([x['fsyncs_per_log_step'] for x in r])} calls); the rest"
                f" {_med([x['no_fsync_per_log_step'] * 1e3 for x in r])} ms"
            )
    n = args.repeats
    ratio = lambda a, b, key: [res[a][i][key] / res[b][i][key] for i in range(n)]  # noqa: E731  # a short helper
    print(f"callback per logging step, rllog/wandb: {_med(ratio('rllog', 'wandb', 'per_log_step'))}")
    print(
        "callback per logging step without rllog's fsyncs, rllog/wandb: "
        + _med([res["rllog"][i]["no_fsync_per_log_step"] / res["wandb"][i]["per_log_step"] for i in range(n)])
    )
    print(
        f"callback CPU time per logging step, rllog/wandb: {_med(ratio('rllog', 'wandb', 'cpu_per_log_step'))}"
    )
    print(f"setup+close, rllog/wandb: {_med(ratio('rllog', 'wandb', 'setup'))}")
    print(f"wall/step, rllog/none: {_med(ratio('rllog', 'none', 'wall_per_step'))}")
    print(f"wall/step, wandb/none: {_med(ratio('wandb', 'none', 'wall_per_step'))}")
    for k in ("rllog", "wandb"):
        over = [res[k][i]["per_log_step"] / res["none"][i]["wall_per_step"] for i in range(n)]
        print(f"{k} callback time per logging step / none's wall time per step: {_med(over)}")


if __name__ == "__main__":
    main()
