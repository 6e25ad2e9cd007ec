"""Cost of writing one iteration's rollout summaries: rllog vs tinker-cookbook vs plain orjson, in one process.

Input: 1,024 trajectories (128 groups of 8) x 3 steps; each step has a 4-float metrics
dict and 2 short log strings. Each path goes end to end, from the loop's objects to
the file on disk: building the records, encoding them, one atomic file write. Prints
the min and median ms per 1,024 trajectories over ``--repeats`` interleaved runs, and
ratios (on a busy machine the min is the steadier of the two).

    python benchmarks/bench_rollouts.py [--repeats 30]

Paths:
- the floor: msgspec ``encode_lines`` of the very records rllog builds + one
  ``LocalStorage.write`` (what any writer of this file must at least do); the ratios
  to it are rllog's targets (<= 1.5x from dicts and from ready records, <= 2.5x from
  tinker-cookbook objects);
- rllog, from ready records (``TrajectorySummary`` structs, as ``build_rollout_summaries``
  returns them, one set per iteration);
- rllog, from plain dicts (``write_rollouts`` on a ``LocalStorage``; its atomic write
  fsyncs, as the floor's does; the peers do not: the "no fsync" paths show rllog without
  that cost too);
- rllog, from tinker-cookbook ``TrajectoryGroup`` objects (duck-typed);
- tinker-cookbook: ``serialize_rollout_summaries`` + ``TrainingRunStore.write_rollouts``
  (``json.dumps`` per record, temp file + rename) on the same objects
  (``pip install --no-deps tinker-cookbook==0.6.1`` + its logging deps + torch);
- plain orjson: dict records built by hand from the dicts, ``orjson.dumps`` per line,
  one file write (no NaN handling, no checks).
Peers that are not installed are skipped, with the reason.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import msgspec

from rllog._write.rollouts import build_rollout_summaries, write_rollouts
from rllog.storage import LocalStorage

N_GROUPS, GROUP_SIZE, N_STEPS = 128, 8, 3


def make_dict_groups(seed: int = 0) -> list[list[dict[str, Any]]]:
    rng = random.Random(seed)
    return [
        [
            {
                "steps": [
                    {
                        "reward": rng.random(),
                        "ob_len": rng.randrange(50, 500),
                        "ac_len": rng.randrange(10, 300),
                        "episode_done": s == N_STEPS - 1,
                        "metrics": {
                            "format": rng.random(),
                            "correct": rng.random(),
                            "len": rng.random() * 100,
                            "time/env": rng.random(),
                        },
                        "logs": {
                            "answer": f"{rng.randrange(1000)}",
                            "verdict": rng.choice(["ok", "wrong format"]),
                        },
                    }
                    for s in range(N_STEPS)
                ],
                "final_reward": rng.random(),
                "trajectory_metrics": {"group_correct": rng.random()},
                "final_ob_len": rng.randrange(500, 900),
            }
            for _ in range(GROUP_SIZE)
        ]
        for _ in range(N_GROUPS)
    ]


def make_tinker_groups(dict_groups: list[list[dict[str, Any]]]) -> list[Any]:
    import tinker
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

    out = []
    for group in dict_groups:
        trajs = [
            Trajectory(
                [
                    Transition(
                        tinker.ModelInput.from_ints([1] * s["ob_len"]),
                        TokensWithLogprobs([2] * s["ac_len"], None),
                        s["reward"],
                        s["episode_done"],
                        s["metrics"],
                        s["logs"],
                    )
                    for s in t["steps"]
                ],
                tinker.ModelInput.from_ints([1] * t["final_ob_len"]),
            )
            for t in group
        ]
        out.append(
            TrajectoryGroup(
                trajs, [t["final_reward"] for t in group], [t["trajectory_metrics"] for t in group]
            )
        )
    return out


class NoFsyncStorage(LocalStorage):
    """rllog's LocalStorage with the atomic write's fsync left out (what the peers do)."""

    def write(self, name: str, data: bytes) -> None:
        path = self.path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def orjson_path(root: Path, groups: list[list[dict[str, Any]]], iteration: int) -> None:
    import orjson

    lines = []
    for g, group in enumerate(groups):
        for t, traj in enumerate(group):
            steps = [
                {
                    "step_idx": i,
                    "ob_len": s["ob_len"],
                    "ac_len": s["ac_len"],
                    "reward": s["reward"],
                    "episode_done": s["episode_done"],
                    "metrics": s["metrics"],
                    "logs": s["logs"],
                }
                for i, s in enumerate(traj["steps"])
            ]
            lines.append(
                orjson.dumps(
                    {
                        "schema_version": 1,
                        "split": "train",
                        "iteration": iteration,
                        "group_idx": g,
                        "traj_idx": t,
                        "tags": [],
                        "sampling_client_step": None,
                        "total_reward": sum(s["reward"] for s in traj["steps"]) + traj["final_reward"],
                        "final_reward": traj["final_reward"],
                        "trajectory_metrics": traj["trajectory_metrics"],
                        "final_ob_len": traj["final_ob_len"],
                        "steps": steps,
                    }
                )
            )
    path = root / f"train_iteration_{iteration:06d}_rollout_summaries.jsonl"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(b"\n".join(lines) + b"\n")
    os.replace(tmp, path)


def run_interleaved(
    paths: dict[str, Callable[[int], object]], repeats: int
) -> dict[str, tuple[float, float]]:
    """(min, median) ms of each path; the paths take turns, so a busy machine slows them alike."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    for fn in paths.values():
        fn(0)  # warm up
    for i in range(repeats):
        for name, fn in paths.items():
            t0 = time.perf_counter()
            fn(i + 1)
            times[name].append(time.perf_counter() - t0)
    return {name: (min(ts) * 1000, statistics.median(ts) * 1000) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    dict_groups = make_dict_groups()
    n_traj = N_GROUPS * GROUP_SIZE
    print(
        f"{n_traj} trajectories x {N_STEPS} steps (4-float metrics, 2 log strings); {args.repeats} runs each"
    )
    paths: dict[str, Callable[[int], object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        st = LocalStorage(root / "rllog")
        nofsync = NoFsyncStorage(root / "rllog-nofsync")
        paths["rllog (dicts)"] = lambda i: write_rollouts(st, i, dict_groups)
        # one set of records per iteration: like the other paths, each run writes a new file
        # (rewriting one file costs the file system more than creating one)
        ready = [build_rollout_summaries(i, dict_groups) for i in range(args.repeats + 1)]
        paths["rllog (ready records)"] = lambda i: write_rollouts(st, i, ready[i])
        encoder = msgspec.json.Encoder()
        floor_name = "floor: msgspec encode_lines + one write"
        paths[floor_name] = lambda i: st.write(
            f"train_iteration_{i:06d}_floor.jsonl", encoder.encode_lines(ready[i])
        )
        paths["rllog (dicts, no fsync)"] = lambda i: write_rollouts(nofsync, i, dict_groups)
        try:
            import orjson  # noqa: F401

            (root / "orjson").mkdir()
            paths["plain orjson (dicts)"] = lambda i: orjson_path(root / "orjson", dict_groups, i)
        except ImportError as exc:
            print(f"  skipped plain orjson: not installed ({exc})")
        try:
            from tinker_cookbook.rl.rollout_logging import serialize_rollout_summaries
            from tinker_cookbook.stores import LocalStorage as TinkerLocalStorage
            from tinker_cookbook.stores import TrainingRunStore

            tinker_groups = make_tinker_groups(dict_groups)
        except ImportError as exc:
            print(f"  skipped tinker-cookbook: not installed ({exc})")
        else:
            taglist = [[] for _ in tinker_groups]
            store = TrainingRunStore(TinkerLocalStorage(root / "tinker"))

            def tinker_path(i: int) -> None:
                records = serialize_rollout_summaries(
                    split="train", iteration=i, trajectory_groups_P=tinker_groups, taglist_P=taglist
                )
                store.write_rollouts(i, records)

            paths["tinker-cookbook serialize+json.dumps"] = tinker_path
            paths["rllog (tinker objects)"] = lambda i: write_rollouts(st, i, tinker_groups)
            paths["rllog (tinker objects, no fsync)"] = lambda i: write_rollouts(nofsync, i, tinker_groups)
        results = run_interleaved(paths, args.repeats)
        st.close()
        nofsync.close()
    width = max(map(len, results))
    print(f"  {'path':<{width}}  {'min':>8}  {'median':>8}  (ms per {n_traj} trajectories)")
    for name, (best, med) in results.items():
        print(f"  {name:<{width}}  {best:8.2f}  {med:8.2f}")
    peer = results.get("tinker-cookbook serialize+json.dumps")
    if peer is not None:
        print("speed-up over the tinker-cookbook path (its time / this path's time), by min and by median:")
        for name, (best, med) in results.items():
            print(f"  {name:<{width}}  {peer[0] / best:6.1f}x  {peer[1] / med:6.1f}x")
    floor = results[floor_name]
    print("time / the floor (msgspec encode_lines of the same records + one write), by min and by median:")
    for name in ("rllog (dicts)", "rllog (ready records)", "rllog (tinker objects)"):
        if name in results:
            ours = results[name]
            print(f"  {name:<{width}}  {ours[0] / floor[0]:6.2f}x  {ours[1] / floor[1]:6.2f}x")
    if "plain orjson (dicts)" in results:
        ours, base = results["rllog (dicts)"], results["plain orjson (dicts)"]
        print(
            f"rllog (dicts) / plain orjson: {ours[0] / base[0]:.2f}x the time (min), {ours[1] / base[1]:.2f}x (median)"
        )


if __name__ == "__main__":
    main()
