"""Build and write the logtree of one RL iteration: rllog vs tinker-cookbook's logtree.

    python benchmarks/bench_logtree.py [--repeat 5] [--loop-repeat 3] [--only sizes|loop]

Each trajectory logs a scope with a conversation (system line, ~1,500-char prompt,
~4,000-char reply), three text lines and a 3-step table, plus its trajectory stats.
Every group gets full content in both libraries (num_groups_to_log = groups), so both
do the same work. Phases: build (the logging calls), HTML write (render + write), JSON
write (encode + write), each the best of --repeat alternating runs; sizes of the files
written. rllog writes through LocalStorage as a RunLogger does (atomic: temp file +
rename, ``durable=False``: the fsync comes in one batch at the next checkpoint, measured
by the loop below); tinker-cookbook writes plain files. The last size (256 x 16, every
group in full) is where Python's cyclic GC used to make rllog's cost per trajectory grow
with the tree.
tinker-cookbook is skipped, saying so, when it is not installed.

The loop (``--only loop``): a RunLogger logging, per 4 x 8 iteration, the report, its
rollout summaries and one metrics row, with a checkpoint every 10 iterations (and, the
worst case, every iteration): time per iteration with the report files fsynced in
batches (what RunLogger does) vs one by one (a LocalStorage whose writes are all
durable, what rllog did before) vs no fsync at all (the floor), interleaved,
--loop-repeat times; the median ratios and their range.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rllog import RunLogger, logtree
from rllog.logtree._io import html_bytes
from rllog.storage import LocalStorage

WORDS = "the model answers a question about arithmetic and then checks its own work carefully".split()


def _text(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n]


def make_iteration(groups: int, trajs: int, seed: int = 0) -> list[list[dict]]:
    rng = random.Random(seed)
    data = []
    for _g in range(groups):
        prompt = _text(rng, 1500) + " <b>&</b>"
        group = []
        for _t in range(trajs):
            reward = float(rng.random() < 0.5)
            group.append(
                {
                    "messages": [
                        {"role": "system", "content": "You are a careful assistant."},
                        {"role": "user", "content": prompt},
                        {"role": "assistant", "content": _text(rng, 4000)},
                    ],
                    "reward": reward,
                    "steps": [
                        {
                            "ob_len": 400 + 50 * s,
                            "ac_len": 300 + rng.randrange(600),
                            "reward": 0.0 if s < 2 else reward,
                        }
                        for s in range(3)
                    ],
                }
            )
        data.append(group)
    return data


def log_groups(data: list[list[dict]]) -> None:
    """The logtree calls of one iteration, into the current trace."""
    for g, group in enumerate(data):
        with logtree.group(g):
            for t, traj in enumerate(group):
                with logtree.scope(f"Trajectory {t}"):
                    logtree.conversation(traj["messages"])
                    logtree.text(f"Reward: {traj['reward']:.3f}")
                    logtree.text("Parsed answer: 42")
                    logtree.text("Format ok: True")
                    logtree.table(traj["steps"], caption="Steps")
                logtree.trajectory_stats(t, final_reward=traj["reward"], steps=traj["steps"])


def rllog_iteration(data: list[list[dict]], out: Path) -> dict[str, float]:
    storage = LocalStorage(out)
    t0 = time.perf_counter()
    trace = logtree.Trace("RL iteration 0", num_groups_to_log=len(data), path=str(out / "x.html"))
    with trace.bind():
        log_groups(data)
    t1 = time.perf_counter()
    storage.write("x.html", html_bytes(trace), durable=False)
    t2 = time.perf_counter()
    storage.write("x_logtree.json", trace.to_json(), durable=False)
    t3 = time.perf_counter()
    return {
        "build": t1 - t0,
        "html": t2 - t1,
        "json": t3 - t2,
        "html_bytes": storage.size("x.html"),
        "json_bytes": storage.size("x_logtree.json"),
    }


def tinker_iteration(data: list[list[dict]], out: Path) -> dict[str, float]:
    from tinker_cookbook.utils import logtree as tlt
    from tinker_cookbook.utils.logtree_formatters import ConversationFormatter

    t0 = time.perf_counter()
    with tlt.init_trace("RL iteration 0", path=None) as trace:
        for g, group in enumerate(data):
            with tlt.scope_header(f"Group {g}"):
                for t, traj in enumerate(group):
                    with tlt.scope_header(f"Trajectory {t}"):
                        tlt.log_formatter(ConversationFormatter(messages=traj["messages"]))
                        tlt.log_text(f"Reward: {traj['reward']:.3f}")
                        tlt.log_text("Parsed answer: 42")
                        tlt.log_text("Format ok: True")
                        tlt.table(traj["steps"], caption="Steps")
                with tlt.scope_header("Trajectory Details"):
                    for t, traj in enumerate(group):
                        tlt.table_from_dict(
                            {"total_reward": traj["reward"], "steps": 3}, caption=f"Trajectory {t}"
                        )
    t1 = time.perf_counter()
    trace.path = out / "t.html"
    tlt._write_trace(trace)  # what init_trace(path=...) runs on exit
    t2 = time.perf_counter()
    tlt.write_trace_json(trace, out / "t_logtree.json")
    t3 = time.perf_counter()
    return {
        "build": t1 - t0,
        "html": t2 - t1,
        "json": t3 - t2,
        "html_bytes": (out / "t.html").stat().st_size,
        "json_bytes": (out / "t_logtree.json").stat().st_size,
    }


def best_runs(peers: dict, data, repeat: int) -> dict[str, dict[str, float]]:
    """Run the libraries alternately ``repeat`` times; keep each phase's minimum.

    The minimum is the cost with the least interference from other processes on a
    shared machine; alternating gives both libraries the same conditions.
    """
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in peers}
    for _ in range(repeat):
        for name, fn in peers.items():
            with tempfile.TemporaryDirectory() as d:
                runs[name].append(fn(data, Path(d)))
    return {name: {k: min(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}


class DurableWrites(LocalStorage):
    """Every whole-file write fsynced at once, as before reports were batched."""

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        super().write(name, data)


class NoFsync(LocalStorage):
    """No fsync at all (not durable: the floor, to show what the fsyncs cost)."""

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        super().write(name, data, durable=False)

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        pass


def _log_iteration(logger: RunLogger, i: int, data: list[list[dict]], groups: list[list[dict]]) -> None:
    with logger.iteration(i, num_groups_to_log=len(data)):
        log_groups(data)
    logger.log_rollouts(i, groups)
    logger.log_metrics(i, {"progress/batch": i, "reward": sum(t["reward"] for g in data for t in g)})


def logger_loop(
    data: list[list[dict]], out: Path, storage: type[LocalStorage], every: int, iterations: int
) -> float:
    """Seconds per iteration of a RunLogger loop (report, rollout summaries, one row per
    iteration; a checkpoint every ``every`` iterations, the last one included); close is
    not timed (the last checkpoint left nothing to fsync)."""
    groups = [[{"steps": t["steps"], "final_reward": t["reward"]} for t in g] for g in data]
    logger = RunLogger(storage(out / "run"), code_diff=False, index=False)
    t0 = time.perf_counter()
    for i in range(iterations):
        _log_iteration(logger, i, data, groups)
        if (i + 1) % every == 0:
            logger.log_checkpoint(f"{i + 1:06d}", batch=i + 1)
    seconds = (time.perf_counter() - t0) / iterations
    logger.close()
    return seconds


def loop(repeat: int, iterations: int = 50) -> None:
    import statistics

    data = make_iteration(4, 8)
    peers = {
        "fsync per file (before)": DurableWrites,
        "batched (RunLogger)": LocalStorage,
        "no fsync (floor)": NoFsync,
    }
    with tempfile.TemporaryDirectory() as d:  # warm up: imports, templates, page cache
        logger_loop(data, Path(d), LocalStorage, 10, 3)
    for every in (10, 1):
        print(
            f"\n== RunLogger loop, 4 x 8, checkpoint every {every} iteration(s), {iterations} iterations, x{repeat} =="
        )
        runs: dict[str, list[float]] = {name: [] for name in peers}
        for r in range(repeat):
            order = list(peers.items()) if r % 2 == 0 else list(peers.items())[::-1]
            for name, storage in order:
                with tempfile.TemporaryDirectory() as d:
                    runs[name].append(logger_loop(data, Path(d), storage, every, iterations))
        for name, costs in runs.items():
            print(f"{name:26} ms/iteration: " + ", ".join(f"{c * 1e3:.2f}" for c in costs))
        before, batched, floor = runs.values()
        for what, num, den in (
            ("batched / fsync per file", batched, before),
            ("batched / no fsync", batched, floor),
        ):
            ratios = [b / a for a, b in zip(den, num, strict=True)]
            print(
                f"{what}: median {statistics.median(ratios):.2f}x "
                f"(range {min(ratios):.2f}-{max(ratios):.2f}x over {repeat} interleaved runs)"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--loop-repeat", type=int, default=3)
    ap.add_argument("--only", choices=("sizes", "loop"), help="run only the size table or only the loop")
    args = ap.parse_args()
    if args.only != "sizes":
        loop(args.loop_repeat)
    if args.only == "loop":
        return
    try:
        import tinker_cookbook.utils.logtree
        import tinker_cookbook.utils.logtree_formatters  # noqa: F401

        peers = {"rllog": rllog_iteration, "tinker-cookbook": tinker_iteration}
    except ImportError as exc:
        print(f"tinker-cookbook logtree not installed ({exc}); benchmarking rllog alone")
        peers = {"rllog": rllog_iteration}

    per_traj: dict[str, list[float]] = {name: [] for name in peers}
    for groups, trajs in [(4, 8), (16, 16), (64, 16), (256, 16)]:
        data = make_iteration(groups, trajs)
        n = groups * trajs
        print(f"\n== {groups} groups x {trajs} trajectories ({n} trajectories), best of {args.repeat} ==")
        print(
            f"{'library':16} {'build ms':>9} {'html ms':>9} {'json ms':>9} {'total ms':>9} {'us/traj':>8} {'html KB':>9} {'json KB':>9}"
        )
        results = best_runs(peers, data, args.repeat)
        for name, r in results.items():
            total = r["build"] + r["html"] + r["json"]
            per_traj[name].append(total / n * 1e6)
            print(
                f"{name:16} {r['build'] * 1e3:9.2f} {r['html'] * 1e3:9.2f} {r['json'] * 1e3:9.2f} {total * 1e3:9.2f} "
                f"{total / n * 1e6:8.1f} {r['html_bytes'] / 1024:9.1f} {r['json_bytes'] / 1024:9.1f}"
            )
        if len(results) == 2:
            a, b = results["rllog"], results["tinker-cookbook"]
            ratio = {k: b[k] / a[k] for k in ("build", "html", "json")}
            whole = sum(b[k] for k in ratio) / sum(a[k] for k in ratio)
            print(
                f"tinker-cookbook / rllog time: build {ratio['build']:.2f}x, html {ratio['html']:.2f}x, "
                f"json {ratio['json']:.2f}x, whole iteration {whole:.2f}x"
            )
    for name, costs in per_traj.items():
        print(
            f"{name}: cost per trajectory across sizes (us): {', '.join(f'{c:.1f}' for c in costs)}; "
            f"largest / smallest {max(costs) / min(costs):.2f}x (1.00x = flat)"
        )


if __name__ == "__main__":
    main()
