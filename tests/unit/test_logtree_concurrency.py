"""Logtree from asyncio tasks and worker threads: every group keeps its own content."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from rllog import RunLogger, logtree
from rllog.storage import open_storage

N = 64


def log_group(g: int, yield_point=None) -> None:
    """One group of 2 trajectories; ``yield_point()`` between calls lets others interleave."""
    pause = yield_point or (lambda: None)
    with logtree.group(g):
        for t in range(2):
            with logtree.scope(f"Trajectory {t}"):
                pause()
                logtree.conversation(
                    [
                        {"role": "user", "content": f"prompt g{g}"},
                        {"role": "assistant", "content": f"reply g{g} t{t}"},
                    ]
                )
                pause()
                logtree.text(f"reward g{g} t{t}")
            logtree.trajectory_stats(t, total_reward=g + t / 10)


async def alog_group(g: int) -> None:
    with logtree.group(g):
        for t in range(2):
            with logtree.scope(f"Trajectory {t}"):
                await asyncio.sleep(0)
                logtree.conversation(
                    [
                        {"role": "user", "content": f"prompt g{g}"},
                        {"role": "assistant", "content": f"reply g{g} t{t}"},
                    ]
                )
                await asyncio.sleep(0.001 * ((g * 7) % 5))
                logtree.text(f"reward g{g} t{t}")
            logtree.trajectory_stats(t, total_reward=g + t / 10)


def check_groups(doc: dict, n: int = N) -> None:
    groups = [c for c in doc["root"]["children"] if c.get("attrs", {}).get("class") == "lt-group"]
    assert [grp["attrs"]["id"] for grp in groups] == [f"group-{g}" for g in range(n)]  # all, in order
    for g, grp in enumerate(groups):
        assert grp["children"][0]["children"][0]["children"] == [f"Group {g}"]
        trajs = grp["children"][1:]
        assert len(trajs) == 2
        for t, traj in enumerate(trajs):
            head, conv, text = traj["children"]
            assert head["children"] == [f"Trajectory {t}"]
            assert conv["data"]["messages"] == [
                {"role": "user", "content": f"prompt g{g}"},
                {"role": "assistant", "content": f"reply g{g} t{t}"},
            ]
            assert text["children"] == [f"reward g{g} t{t}"]
    trajs = doc["root"]["children"][-1]["children"][1]["data"]["trajectories"]
    assert [(r["group_idx"], r["traj_idx"], r["total_reward"]) for r in trajs] == [
        (g, t, g + t / 10) for g in range(n) for t in range(2)
    ]


def memory_storage():
    return open_storage(f"memory://lt-conc-{uuid.uuid4().hex}")


def test_64_asyncio_tasks_into_one_iteration():
    storage = memory_storage()

    async def main():
        with logtree.iteration_trace(storage, 5, num_groups_to_log=N):
            await asyncio.gather(*(alog_group(g) for g in reversed(range(N))))

    asyncio.run(main())
    check_groups(json.loads(storage.read("train_iteration_000005_logtree.json")))


def test_thread_pool_without_context_uses_the_open_trace():
    """Plain ThreadPoolExecutor workers (no copied context) log into the one open trace."""
    storage = memory_storage()
    barrier = threading.Barrier(8)

    def work(g):
        if g < 8:
            barrier.wait(timeout=10)  # all 8 threads inside at once
        log_group(g, yield_point=lambda: threading.Event().wait(0.0005))

    with logtree.iteration_trace(storage, 6, num_groups_to_log=N), ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(N)))
    check_groups(json.loads(storage.read("train_iteration_000006_logtree.json")))


def test_thread_pool_with_explicit_handle_keeps_nesting():
    with logtree.open_trace("t", num_groups_to_log=N) as trace, logtree.scope("Sampling") as sampling:

        def work(g):
            with sampling.bind():
                log_group(g)

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(work, range(N)))
        ctx_groups = [contextvars.copy_context() for _ in range(4)]
        with ThreadPoolExecutor(4) as pool:  # copy_context also carries the section
            list(pool.map(lambda c: c.run(logtree.text, "via context"), ctx_groups))
    doc = trace.to_dict()
    sampling_node = doc["root"]["children"][0]
    assert sampling_node["children"][0]["children"] == ["Sampling"]
    inner = {"title": doc["title"], "started_at": "", "path": None, "root": {**sampling_node, "children": [
        *[c for c in sampling_node["children"] if c.get("attrs", {}).get("class") == "lt-group"], doc["root"]["children"][-1]
    ]}}  # fmt: skip
    check_groups(inner)
    assert sum(c.get("children") == ["via context"] for c in sampling_node["children"]) == 4


def test_asyncio_to_thread_and_mixed():
    storage = memory_storage()

    async def main():
        with logtree.iteration_trace(storage, 7, num_groups_to_log=N):
            await asyncio.gather(
                *(asyncio.to_thread(log_group, g) if g % 2 else alog_group(g) for g in range(N))
            )

    asyncio.run(main())
    check_groups(json.loads(storage.read("train_iteration_000007_logtree.json")))


def test_two_open_traces_threads_without_context_are_noops():
    with logtree.open_trace("a") as a, logtree.open_trace("b") as b:
        t = threading.Thread(target=logtree.text, args=("lost",))
        t.start()
        t.join()
        assert logtree.current() is b
    assert a.root.children == [] and b.root.children == []


def test_logger_iteration_and_evaluation(tmp_path):
    with RunLogger(tmp_path, code_diff=False) as logger:
        with logger.iteration(3) as trace:
            assert logtree.current() is trace
            log_group(0)
            log_group(5)
        with logger.evaluation("gsm8k/test", 3, num_groups_to_log=1):
            log_group(0)
            log_group(1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "train_iteration_000003.html" in names and "train_iteration_000003_logtree.json" in names
    evals = [n for n in names if n.startswith("eval_")]
    assert len(evals) == 2 and all(n.startswith("eval_gsm8k_test-h") for n in evals)
    doc = json.loads((tmp_path / "train_iteration_000003_logtree.json").read_text())
    assert doc["title"] == "Train iteration 3"
    assert [c["attrs"]["id"] for c in doc["root"]["children"] if c["attrs"].get("class") == "lt-group"] == [
        "group-0"
    ]
    ev = json.loads((tmp_path / next(n for n in evals if n.endswith(".json"))).read_text())
    assert [r["group_idx"] for r in ev["root"]["children"][-1]["children"][1]["data"]["trajectories"]] == [
        0,
        0,
        1,
        1,
    ]


def test_logger_iteration_is_a_noop_on_other_ranks(tmp_path):
    logger = RunLogger(tmp_path / "r1", rank=1)
    with logger.iteration(0) as trace:
        assert trace is None and not logtree.is_active()
        log_group(0)
    with logger.evaluation("x", 0) as trace:
        assert trace is None
    logger.close()
    assert not (tmp_path / "r1").exists()


def test_logger_iteration_write_failure_warns_once_and_keeps_the_reports(tmp_path):
    """A report the storage refuses is kept and retried like a row; close names every file."""
    logger = RunLogger(tmp_path, code_diff=False, index=False)
    real = logger.storage.write

    def broken(name, data, durable=True):
        raise OSError("bucket gone")

    logger.storage.write = broken
    with (
        pytest.warns(RuntimeWarning, match="train_iteration_000001_logtree.json: bucket gone"),
        logger.iteration(1),
    ):
        logtree.text("x")
    with logger.iteration(2):  # second failure of the same kind: counted silently
        logtree.text("x")
    assert sum("bucket gone" in w for w in logger.warnings) == 1
    logger.storage.write = real
    logger.flush()  # checkpoints, flush and the next write retry them
    logger.log_checkpoint("c", batch=3)
    assert sorted(p.name for p in tmp_path.glob("train_iteration_*")) == [
        f"train_iteration_00000{i}{suffix}" for i in (1, 2) for suffix in (".html", "_logtree.json")
    ]
    logger.storage.write = broken
    with logger.iteration(3):
        logtree.text("x")
    with pytest.warns(RuntimeWarning, match="saved to"):
        logger.close()
    saved = next(w for w in logger.warnings if "saved to" in w)
    assert "train_iteration_000003.html" in saved and "train_iteration_000003_logtree.json" in saved
    folder = saved.rsplit(" ", 1)[-1]
    assert sorted(os.listdir(folder)) == [
        "train_iteration_000003.html",
        "train_iteration_000003_logtree.json",
    ]
