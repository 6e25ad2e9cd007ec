"""Reports and rollout summary files are fsynced in batches (at checkpoints and close), not
one by one, and still never behind a checkpoint record (issue 15, target 5).

Every test counts the real ``os.fsync`` calls (patched to record which file or folder each
one was for) and, where order matters, the ``os.write`` of the checkpoint record.
"""

from __future__ import annotations

import errno
import os
import pickle
import re
from pathlib import Path

import pytest

from rllog import RunLogger, logtree, read_run
from rllog._format.layout import CHECKPOINTS_FILE
from rllog.storage import LocalStorage

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _path(fd: int) -> str:
    """The file ``fd`` is open on; a temp file of an atomic write counts as its target
    (``.name.<pid>.<random>.tmp`` -> ``name``: its content is fsynced before the rename)."""
    path = os.readlink(f"/proc/self/fd/{fd}")
    folder, leaf = os.path.split(path)
    temp = re.fullmatch(r"\.(.+?)(\.\d+)?\.[0-9a-f]{16}\.tmp", leaf)
    return os.path.join(folder, temp.group(1)) if temp else path


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``("fsync", path)`` per fsync and ``("record", path)`` per write to checkpoints.jsonl, in order."""
    seen: list[tuple[str, str]] = []
    fsync, write = os.fsync, os.write

    def recording_fsync(fd: int) -> None:
        seen.append(("fsync", _path(fd)))
        fsync(fd)

    def recording_write(fd: int, data: bytes) -> int:
        path = _path(fd)
        if os.path.basename(path).startswith("checkpoints."):  # checkpoints.jsonl, checkpoints.rank1.jsonl
            seen.append(("record", path))
        return write(fd, data)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "write", recording_write)
    return seen


def _fsynced(calls: list[tuple[str, str]]) -> list[str]:
    return [path for kind, path in calls if kind == "fsync"]


def _groups(i: int) -> list:
    return [[{"steps": [{"reward": float(i), "ob_len": 3, "ac_len": 2}]} for _ in range(8)] for _ in range(4)]


def _iteration(logger: RunLogger, i: int) -> None:
    """One loop iteration: a 4x8 logtree report, its rollout summaries, a metrics row."""
    with logger.iteration(i):
        for g in range(4):
            with logtree.group(g):
                for t in range(8):
                    with logtree.scope(f"Trajectory {t}"):
                        logtree.text(f"answer {i}.{g}.{t}")
    logger.log_rollouts(i, _groups(i))
    logger.log_metrics(i, {"progress/batch": i, "reward": float(i)})


def _artifacts(run: Path, i: int) -> set[str]:
    return {
        str(run / f"train_iteration_{i:06d}{suffix}")
        for suffix in (".html", "_logtree.json", "_rollout_summaries.jsonl")
    }


def test_local_writes_that_are_not_durable_cost_no_fsync_until_a_durable_flush(tmp_path, calls):
    storage = LocalStorage(tmp_path / "run")
    names = [f"train_iteration_{i:06d}.html" for i in range(10)] + ["iteration_000010/train.html"]
    for name in names:
        storage.write(name, name.encode(), durable=False)
    assert _fsynced(calls) == []
    storage.flush(durable=True)
    synced = _fsynced(calls)
    run = str(tmp_path / "run")
    # each file once, and the folders that got new entries (the run's parent: it made the run)
    folders = [str(tmp_path), run, f"{run}/iteration_000010"]
    assert sorted(synced) == sorted([f"{run}/{name}" for name in names] + folders)
    calls.clear()
    storage.flush(durable=True)  # nothing new: nothing to fsync
    assert _fsynced(calls) == []
    storage.write("config.json", b"{}")  # durable (the default): its content at once
    assert _fsynced(calls) == [f"{run}/config.json"]
    storage.flush(durable=True)  # and the rename with the next durable flush
    assert _fsynced(calls)[1:] == [run]


def test_reports_between_checkpoints_are_not_fsynced_one_by_one(tmp_path, calls):
    """N iterations (report + rollout summaries + a row each) cost no fsync; the
    checkpoint fsyncs every file written before it, and the folder, before its record is
    written; close fsyncs what came after the last checkpoint."""
    run = tmp_path / "run"
    logger = RunLogger(run, code_diff=False, index=False)
    calls.clear()
    for i in range(5):
        _iteration(logger, i)
    assert _fsynced(calls) == []  # before: 3 per iteration (html, logtree json, rollout summaries)

    logger.log_checkpoint("000005", batch=5)
    record = calls.index(("record", str(run / CHECKPOINTS_FILE)))
    before = set(_fsynced(calls[:record]))
    written = set().union(*(_artifacts(run, i) for i in range(5)))
    assert written <= before
    assert {str(run / "metrics.jsonl"), str(run)} <= before
    assert str(run / CHECKPOINTS_FILE) in _fsynced(calls[record:])  # the record itself, after
    assert len(_fsynced(calls)) <= len(written) + 6  # each file once, plus the appended files and folders

    calls.clear()
    _iteration(logger, 5)
    assert _fsynced(calls) == []
    logger.close()
    assert _artifacts(run, 5) <= set(_fsynced(calls))
    assert read_run(run).rollout_summaries(5)[0]["total_reward"] == 5.0


def test_a_rank_writing_its_own_files_fsyncs_them_before_its_record(tmp_path, calls, monkeypatch):
    """``all_ranks=True``, rank 1 on local disk: its rows and reports are fsynced before its
    checkpoint record is written (before, its committer ran as for a bucket and appended
    the record first), and its reports are batched like rank 0's."""
    monkeypatch.setenv("RANK", "1")
    run = tmp_path / "run"
    logger = RunLogger(run, all_ranks=True, code_diff=False, index=False)
    calls.clear()
    _iteration(logger, 0)
    assert _fsynced(calls) == []
    logger.log_checkpoint("000001", batch=1)
    record = calls.index(("record", str(run / "checkpoints.rank1.jsonl")))
    before = set(_fsynced(calls[:record]))
    reports = {
        str(run / f"train_iteration_000000.rank1{suffix}")
        for suffix in (".html", "_logtree.json", "_rollout_summaries.jsonl")
    }
    assert reports | {str(run / "metrics.rank1.jsonl"), str(run)} <= before
    logger.close()


def test_a_failed_fsync_holds_the_record_back_until_the_files_are_durable(tmp_path, monkeypatch):
    """An fsync of a report that fails (EIO) keeps the checkpoint record back and the
    report pending; the next checkpoint fsyncs it again and then writes both records."""
    run = tmp_path / "run"
    logger = RunLogger(run, code_diff=False, index=False)
    _iteration(logger, 0)
    fsync = os.fsync
    failing = {"on": True}
    synced: list[str] = []

    def flaky_fsync(fd: int) -> None:
        path = _path(fd)
        if failing["on"] and path.endswith("_logtree.json"):
            raise OSError(errno.EIO, "Input/output error")
        synced.append(path)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", flaky_fsync)
    logger.log_checkpoint("000001", batch=1)
    assert not (run / CHECKPOINTS_FILE).exists() or (run / CHECKPOINTS_FILE).read_bytes() == b""
    assert any("000001" in w and "held back" in w for w in logger.warnings)
    failing["on"] = False
    synced.clear()
    logger.log_checkpoint("000002", batch=2)
    assert str(run / "train_iteration_000000_logtree.json") in synced
    logger.close()
    names = [line.split(b'"')[3] for line in (run / CHECKPOINTS_FILE).read_bytes().splitlines()]
    assert names == [b"000001", b"000002"]


def test_a_worker_logger_fsyncs_each_file_it_writes(tmp_path, calls):
    """A rollout worker (a pickled logger) has no checkpoint of its own to order its files
    behind, and the learner's checkpoint cannot wait for another process's files: its
    reports stay durable one by one."""
    run = tmp_path / "run"
    learner = RunLogger(run, code_diff=False, index=False)
    worker = pickle.loads(pickle.dumps(learner))
    calls.clear()
    _iteration_without_row(worker, 7)
    assert _artifacts(run, 7) <= set(_fsynced(calls))
    worker.close()
    learner.close()


def _iteration_without_row(logger: RunLogger, i: int) -> None:
    with logger.iteration(i):
        logtree.text("x")
    logger.log_rollouts(i, _groups(i))


def test_a_pending_file_replaced_by_a_symlink_is_not_fsynced_through_it(tmp_path, calls):
    storage = LocalStorage(tmp_path / "run")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not rllog's")
    storage.write("train_iteration_000001.html", b"<p>1</p>", durable=False)
    storage.write("gone.html", b"x", durable=False)
    os.unlink(storage.path("train_iteration_000001.html"))
    os.symlink(outside, storage.path("train_iteration_000001.html"))
    storage.remove("gone.html")
    storage.flush(durable=True)
    assert str(outside) not in _fsynced(calls)
    assert outside.read_bytes() == b"not rllog's"


# ------------------------------------------------------------------ power loss after the last checkpoint


def test_resume_after_reports_lost_to_a_power_loss_moves_them_aside_and_reads_on(tmp_path):
    """After a power loss, files written after the last checkpoint record but never
    fsynced may be empty or cut short. Resume moves those of iterations at or past the
    checkpoint to superseded/ byte for byte; an earlier iteration's cut file (an
    evaluation written after the record) stays, and readers skip its torn line."""
    run = tmp_path / "run"
    logger = RunLogger(run, code_diff=False, index=False)
    for i in range(3):
        _iteration(logger, i)
    logger.log_checkpoint("000003", batch=3, state_path="/ckpt/3")
    for i in range(3, 5):
        _iteration(logger, i)
    with logger.evaluation("test", 1):
        logtree.text("late evaluation of iteration 1")
    logger.log_rollouts(1, _groups(1), eval_name="test")
    logger.close()

    # what the power loss left of the files never fsynced
    cut = run / "train_iteration_000003_rollout_summaries.jsonl"
    data = cut.read_bytes()
    cut.write_bytes(data[: data.index(b"\n") + 40])  # one whole line, then cut mid-line
    for name in ("train_iteration_000004.html", "train_iteration_000004_logtree.json"):
        (run / name).write_bytes(b"")
    late = run / "eval_test_iteration_000001_rollout_summaries.jsonl"
    late_bytes = late.read_bytes()
    lines = late_bytes.splitlines(keepends=True)
    late.write_bytes(b"".join(lines[:5]) + lines[5][:40])
    (run / "eval_test_iteration_000001_logtree.json").write_bytes(b"")
    damaged = {name: (run / name).read_bytes() for name in os.listdir(run) if "iteration_00000" in name}

    resumed = RunLogger(run, resume=True, code_diff=False, index=True)
    assert resumed.resume_state is not None and resumed.resume_state.batch == 3
    for i in (3, 4):
        for name in _artifacts(run, i):
            base = os.path.basename(name)
            assert not (run / base).exists()
            assert (run / "superseded" / base).read_bytes() == damaged[base]  # empty and cut ones too
    assert late.read_bytes() == damaged[late.name]  # iteration 1 < 3: kept where it is
    _iteration(resumed, 3)
    resumed.close()  # writes index.html over the damaged files
    assert (run / "index.html").stat().st_size > 0

    back = read_run(run)
    assert len(back.rollout_summaries(3)) == 32
    assert len(back.rollout_summaries(3, superseded=True)) == 1  # the whole line before the cut
    assert len(back.rollout_summaries(1, "test")) == 5  # the torn sixth line skipped
    assert any("eval_test_iteration_000001_rollout_summaries.jsonl" in w for w in back.warnings)
    assert [row["step"] for row in back.metrics.to_dict("records")] == [0, 1, 2, 3]


def test_a_logger_never_closed_fsyncs_its_reports_at_interpreter_exit(tmp_path):
    """A loop that dies without close: the exit hook closes the logger, and its batch of
    reports is fsynced then (the fsyncs run where the interpreter still takes new threads,
    or one after the other)."""
    import json
    import subprocess
    import sys

    run = tmp_path / "run"
    script = f"""
import atexit, json, os
seen = []
fsync = os.fsync
def recording(fd):
    seen.append(os.readlink(f"/proc/self/fd/{{fd}}"))
    fsync(fd)
os.fsync = recording
from rllog import RunLogger, logtree
logger = RunLogger({str(run)!r}, code_diff=False, index=False)
seen.clear()
with logger.iteration(0):
    logtree.text("x")
logger.log_rollouts(0, [[{{"steps": [{{"reward": 1.0}}]}}]])
atexit.register(lambda: print(json.dumps(seen)))  # runs after rllog's exit hook
raise SystemExit(3)  # no close
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr
    synced = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert _artifacts(run, 0) <= synced
    assert "Traceback" not in out.stderr and "RuntimeWarning" not in out.stderr


def test_a_durable_flush_fsyncs_one_by_one_when_no_thread_may_start(tmp_path, calls, monkeypatch):
    """Late in interpreter shutdown the pool refuses work ("cannot schedule new futures
    after interpreter shutdown"): the batch is fsynced in the calling thread instead."""
    from concurrent.futures import ThreadPoolExecutor

    def refuse(self, fn, /, *args, **kwargs):
        raise RuntimeError("cannot schedule new futures after interpreter shutdown")

    storage = LocalStorage(tmp_path / "run")
    storage.write("a.html", b"a", durable=False)
    storage.write("b.html", b"b", durable=False)
    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    storage.flush(durable=True)
    assert {str(tmp_path / "run" / "a.html"), str(tmp_path / "run" / "b.html")} <= set(_fsynced(calls))
