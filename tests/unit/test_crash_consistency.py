"""Races, forks, short writes and crash leftovers on the write side (local disk and memory://).

Each test reproduces a failure found by a fault campaign (issue 14) and asserts what the
run holds afterwards: no unreadable line, no lost record, nothing left behind.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
import uuid

import pytest

from rllog import RunLogger
from rllog._format.layout import CHECKPOINTS_FILE
from rllog.storage import LocalStorage

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _groups(i: int) -> list:
    return [[{"steps": [{"reward": float(i)}]}]]


class SlowWrites(LocalStorage):
    """Whole-file writes take a little while, so threads overlap inside them."""

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        time.sleep(0.001)
        super().write(name, data, durable=durable)


def test_rollouts_and_checkpoints_from_eight_threads_raise_nothing(tmp_path):
    """8 user threads log rollouts and checkpoints at once: before the fix two threads
    walked the unwritten-files dict together and one raised KeyError into the caller."""
    logger = RunLogger(SlowWrites(tmp_path / "run"), code_diff=False, index=False)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(12):
                it = t * 100 + i
                logger.log_metrics(it, {"x": float(it)})
                logger.log_rollouts(it, _groups(it))
                if i % 4 == 3:
                    logger.log_checkpoint(f"{it:06d}", batch=it)
        except BaseException as exc:  # any exception from the loop's calls is the bug
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    logger.close()
    assert errors == []
    assert len(list((tmp_path / "run").glob("train_iteration_*_rollout_summaries.jsonl"))) == 96
    lines = (tmp_path / "run" / CHECKPOINTS_FILE).read_bytes().splitlines()
    assert len(lines) == 24 and all(json.loads(line)["name"] for line in lines)


def test_committer_thread_survives_rollouts_on_a_bucket(monkeypatch):
    """On a bucket the committer thread and log_rollouts shared the dict without a lock and
    the thread died (KeyError); later records then waited for close."""
    url = f"memory://{uuid.uuid4().hex}/run"
    logger = RunLogger(url, code_diff=False, index=False)
    files = logger._rollouts
    real_write = logger.storage.write

    def slow_write(name: str, data: bytes) -> None:
        time.sleep(0.002)
        real_write(name, data)

    monkeypatch.setattr(logger.storage, "write", slow_write)
    for i in range(40):
        logger.log_metrics(i, {"x": float(i)})
        files.unwritten[f"extra_{i:03d}.jsonl"] = b"{}\n"  # a backlog the thread walks
        logger.log_rollouts(i, _groups(i))
        logger.log_checkpoint(f"{i:06d}", batch=i)
    deadline = time.monotonic() + 20
    while logger._checkpoints.pending and time.monotonic() < deadline:
        time.sleep(0.05)
    assert logger._checkpoints._thread is not None and logger._checkpoints._thread.is_alive()
    assert logger._checkpoints.pending == []  # committed in the background, not at close
    logger.close()


def _fork_and_close(logger: RunLogger, hold) -> int:
    """Fork while ``hold`` is held by another thread; the child closes the logger. Returns
    the child's exit status (0: close returned within 10 s)."""
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with hold:
            held.set()
            release.wait()

    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # the child: no holder thread here
        signal.alarm(10)
        try:
            logger.log_metrics(1, {"x": 1.0})
            logger.log_checkpoint("child", batch=2)
            logger.close(timeout=2)
        finally:
            os._exit(0)
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize("which", ["checkpoints", "metrics", "files"])
def test_fork_while_a_lock_is_held_child_close_returns(which):
    """os.fork() while another thread holds a writer lock: the child's close used to block forever."""
    logger = RunLogger(f"memory://{uuid.uuid4().hex}/run", code_diff=False, index=False)
    logger.log_checkpoint("parent", batch=1)  # starts the committer thread
    owner = {"checkpoints": logger._checkpoints, "metrics": logger._metrics, "files": logger._rollouts}[which]
    hold = getattr(owner, "_lock", threading.Lock())  # (before the fix, the files had no lock)
    status = _fork_and_close(logger, hold)
    logger.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child killed by the alarm: {status}"


class ShortWriteOnce(LocalStorage):
    """The first append to checkpoints.jsonl writes 9 bytes, then fails with ENOSPC (a
    short write at a page boundary on a full disk)."""

    fail = True

    def append(self, name: str, data: bytes) -> None:
        if name == CHECKPOINTS_FILE and self.fail:
            self.fail = False
            fd = self.append_fd(name)
            os.write(fd, data[:9])
            raise OSError(errno.ENOSPC, "No space left on device")
        super().append(name, data)


def test_short_write_of_a_checkpoint_record_is_cut_back_before_the_retry(tmp_path):
    logger = RunLogger(ShortWriteOnce(tmp_path / "run"), code_diff=False, index=False)
    logger.log_metrics(0, {"x": 0.0})
    logger.log_checkpoint("000001", batch=1)  # short write: held back, file cut back
    assert (tmp_path / "run" / CHECKPOINTS_FILE).read_bytes() == b""
    logger.log_metrics(1, {"x": 1.0})
    logger.log_checkpoint("000002", batch=2)  # the retry writes both, whole
    logger.close()
    lines = (tmp_path / "run" / CHECKPOINTS_FILE).read_bytes().splitlines()
    assert [json.loads(line)["name"] for line in lines] == ["000001", "000002"]
    resumed = RunLogger(tmp_path / "run", resume=True, code_diff=False, index=False)
    assert resumed.resume_state is not None and resumed.resume_state.batch == 2
    resumed.close()


def test_stale_tmp_files_of_killed_writers_are_removed_at_open(tmp_path):
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    dead = _dead_pid()
    stale = [run / f".metrics.jsonl.{dead}.140.tmp", run / "sub" / f".x.html.{dead}.7.tmp"]
    live = run / f".config.json.{os.getpid()}.1.tmp"  # a write in progress in a live process
    other = run / "notes.tmp"  # not ours
    for path in [*stale, live, other]:
        path.write_bytes(b"partial")
    logger = RunLogger(run, code_diff=False, index=False)
    logger.close()
    assert [p.exists() for p in stale] == [False, False]
    assert live.exists() and other.exists()
    assert any("removed 2 temp file(s)" in w for w in logger.warnings)


def test_the_temp_file_of_a_writer_killed_mid_write_is_removed_at_open(tmp_path):
    """A real leftover, not a made-up name: a child killed inside ``LocalStorage.write``
    leaves its temp file, and the next open removes it (the name must carry the pid that
    remove_stale_tmp reads)."""
    run = tmp_path / "run"

    def chunks():
        yield b"<html>half a report"
        os._exit(0)  # killed mid-write

    pid = os.fork()
    if pid == 0:
        LocalStorage(run).write_chunks("train_iteration_000001.html", chunks())
        os._exit(1)
    os.waitpid(pid, 0)
    leftovers = [p.name for p in run.iterdir()]
    assert len(leftovers) == 1 and leftovers[0].startswith(".train_iteration_000001.html.")
    logger = RunLogger(run, code_diff=False, index=False)
    logger.close()
    assert not (run / leftovers[0]).exists()
    assert any("removed 1 temp file(s)" in w for w in logger.warnings)


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_run_folder_deleted_mid_run_is_recreated_with_every_row(tmp_path):
    """``rm -rf`` of the run folder mid-run: rows went on to an unlinked file, a
    checkpoint record claimed them and nothing was said. Now the next checkpoint notices,
    rewrites metrics.jsonl and checkpoints.jsonl from their open files, and warns."""
    import shutil

    run = tmp_path / "run"
    logger = RunLogger(str(run), code_diff=False, index=False)
    for i in range(20):
        logger.log_metrics(i, {"x": float(i)})
    logger.log_checkpoint("000020", batch=20)
    shutil.rmtree(run)
    for i in range(20, 30):
        logger.log_metrics(i, {"x": float(i)})
    logger.log_checkpoint("000030", batch=30)
    said = "\n".join(logger.warnings)
    assert "was deleted" in said and "metrics.jsonl" in said and "Lost:" in said, said
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_bytes().splitlines()]
    assert [r["x"] for r in rows] == [float(i) for i in range(30)]
    records = [json.loads(line) for line in (run / CHECKPOINTS_FILE).read_bytes().splitlines()]
    assert [r["batch"] for r in records] == [20, 30]
    logger.close()
    resumed = RunLogger(str(run), resume=True, code_diff=False, index=False)
    assert resumed.resume_state is not None and resumed.resume_state.batch == 30
    resumed.close()


def test_run_folder_that_cannot_be_recreated_gets_no_checkpoint_record(tmp_path):
    """The folder is deleted and a file takes its place: the rows cannot be rescued now,
    so no checkpoint record claims them; once the folder can be made again, both are."""
    import shutil

    run = tmp_path / "run"
    logger = RunLogger(str(run), code_diff=False, index=False)
    for i in range(10):
        logger.log_metrics(i, {"x": float(i)})
    shutil.rmtree(run)
    run.write_bytes(b"in the way")
    logger.log_checkpoint("000010", batch=10)
    assert any("recreating it failed" in w for w in logger.warnings), logger.warnings
    assert run.read_bytes() == b"in the way"
    run.unlink()
    logger.log_checkpoint("000011", batch=10)  # rescued now, then both records
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_bytes().splitlines()]
    assert [r["x"] for r in rows] == [float(i) for i in range(10)]
    records = [json.loads(line)["name"] for line in (run / CHECKPOINTS_FILE).read_bytes().splitlines()]
    assert records == ["000010", "000011"]
    logger.close()


def _cut_rows(run, keep: int) -> None:
    """What a power loss on a lying filesystem leaves: the first ``keep`` rows of metrics.jsonl."""
    lines = (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    (run / "metrics.jsonl").write_bytes(b"".join(lines[:keep]))


@pytest.mark.parametrize("every", [1, 10])
def test_resume_names_rows_that_vanished_after_their_checkpoint(tmp_path, every):
    """Rows fsynced before a checkpoint record, gone at resume: the resume says which."""
    run = tmp_path / "run"
    logger = RunLogger(str(run), code_diff=False, index=False)
    for i in range(0, 100, every):
        logger.log_metrics(i, {"x": float(i)})
    logger.log_checkpoint("000100", batch=100)
    logger.close()
    resumed = RunLogger(str(run), resume=True, code_diff=False, index=False)
    resumed.close()
    assert not any("missing" in w for w in resumed.warnings), resumed.warnings  # sparse logging is no gap
    _cut_rows(run, 60 // every)
    with pytest.warns(RuntimeWarning, match="missing"):
        resumed = RunLogger(str(run), resume=True, code_diff=False, index=False)
    resumed.close()
    said = "\n".join(resumed.warnings)
    assert f"the last row before it is at {60 - every}" in said and "up to 99" in said, said
    assert resumed.resume_state is not None and resumed.resume_state.batch == 100


def test_resume_gap_check_uses_last_logged_step_of_epoch_records(tmp_path):
    run = tmp_path / "run"
    logger = RunLogger(str(run), code_diff=False, index=False)
    for i in range(30):
        logger.log_metrics(i, {"x": float(i), "epoch": i // 10})
    logger.log_checkpoint("e3", batch=0, epoch=3)  # batch counts within the epoch
    logger.close()
    _cut_rows(run, 25)
    with pytest.warns(RuntimeWarning, match="missing"):
        resumed = RunLogger(str(run), resume=True, code_diff=False, index=False)
    resumed.close()
    assert any("after 24 up to 29" in w for w in resumed.warnings), resumed.warnings
