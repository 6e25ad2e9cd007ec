"""Logtree and Python's cyclic GC: a big report must not make the GC rescan the heap.

The cost itself is measured in benchmarks/bench_logtree.py (flat from 4x8 to 256x16
trajectories); here the mechanism is checked: the heap is frozen while a trace is
bound, rendering runs with the GC off, and both are undone afterwards.
"""

from __future__ import annotations

import gc
import sys

import pytest

from rllog import logtree
from rllog.storage import LocalStorage


@pytest.fixture
def low_gc_threshold():
    """Collect every 50 allocations, so any render with the GC on triggers collections."""
    old = gc.get_threshold()
    gc.set_threshold(50, 2, 2)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _fill(trace: logtree.Trace, groups: int, trajs: int) -> None:
    with trace.bind():
        for g in range(groups):
            with logtree.group(g):
                for t in range(trajs):
                    with logtree.scope(f"Trajectory {t}"):
                        logtree.conversation([{"role": "user", "content": f"q{g}.{t}"}])
                        logtree.table([{"step": 0, "reward": 1.0}])
                    logtree.trajectory_stats(t, total_reward=1.0)


@pytest.fixture
def unfrozen():
    """Start with no frozen heap (a library loaded by an earlier test may have frozen it);
    leave it as found."""
    was = gc.get_freeze_count() > 0
    gc.unfreeze()
    yield
    if was:
        gc.freeze()


def test_heap_is_frozen_while_a_trace_is_bound_and_handed_back_after(unfrozen):
    assert gc.get_freeze_count() == 0
    outer = logtree.Trace("a", num_groups_to_log=2)
    inner = logtree.Trace("b")
    from rllog.logtree import _model

    assert not _model._open_traces, f"traces left bound by earlier code: {_model._open_traces}"
    with outer.bind():
        frozen = gc.get_freeze_count()
        assert frozen > 1000  # the process's objects from before the trace
        with inner.bind():  # a second trace (an evaluation inside an iteration) changes nothing
            assert frozen // 2 < gc.get_freeze_count() <= frozen  # not frozen again (frozen objects may die)
        assert frozen // 2 < gc.get_freeze_count() <= frozen
    assert gc.get_freeze_count() == 0


def test_someone_elses_freeze_is_left_alone(unfrozen):
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with logtree.Trace("a").bind():
            pass
        assert gc.get_freeze_count() > before // 2  # not unfrozen by the trace (a few frozen objects may die)
    finally:
        gc.unfreeze()


def test_gc_off_is_left_off(unfrozen):
    gc.disable()
    try:
        with logtree.Trace("a").bind():
            assert gc.get_freeze_count() == 0
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_render_and_encode_run_without_collections(tmp_path, low_gc_threshold):
    trace = logtree.Trace("Train iteration 0", num_groups_to_log=8)
    _fill(trace, 8, 8)
    collections: list[str] = []
    rendering = {"view", "encode_doc", "_render_html", "_flatten", "html_bytes"}

    def seen(phase: str, info: dict) -> None:
        """Note a collection that starts inside the view, JSON or HTML building."""
        if phase != "start":
            return
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in rendering:
                collections.append(f"gen {info['generation']} in {frame.f_code.co_name}")
                return
            frame = frame.f_back

    storage = LocalStorage(tmp_path)
    write = storage.write
    writes: list[str] = []

    def counted_write(name: str, data: bytes) -> None:  # the storage's own work is not rendering
        gc.callbacks.remove(seen)
        writes.append(name)
        write(name, data)
        gc.callbacks.append(seen)

    storage.write = counted_write  # type: ignore[method-assign]  # instrumented for the test
    gc.callbacks.append(seen)
    try:
        logtree.write_trace(storage, trace, 0)
    finally:
        gc.callbacks.remove(seen)
    assert writes == ["train_iteration_000000_logtree.json", "train_iteration_000000.html"]
    assert collections == []
    assert gc.isenabled()  # turned back on
    assert (tmp_path / "train_iteration_000000.html").stat().st_size > 10_000
