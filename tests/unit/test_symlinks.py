"""The run folder is rllog's alone: a symlink planted in it (to a file of the victim's)
is refused with StorageError, and the victim is untouched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rllog import RunLogger
from rllog.errors import StorageError
from rllog.storage import LocalStorage

VICTIM = b"the victim's own bytes, no newline at the end"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    p = tmp_path / "victim.txt"
    p.write_bytes(VICTIM)
    return p


def _plant(run: Path, name: str, target: Path) -> None:
    (run / name).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, run / name)


@pytest.mark.parametrize("name", ["metrics.jsonl", "checkpoints.jsonl", ".rllog.lock"])
def test_a_run_with_a_planted_link_is_refused_at_open(tmp_path: Path, victim: Path, name: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    _plant(run, name, victim)
    with pytest.raises(StorageError, match="symlink"):
        with RunLogger(run, code_diff=False, index=False) as logger:
            logger.log_metrics(0, {"a": 1.0})
    assert victim.read_bytes() == VICTIM


def test_a_planted_checkpoints_jsonl_link_holds_back_the_record(tmp_path: Path, victim: Path) -> None:
    victim.write_bytes(VICTIM + b"\n")  # a whole last line: nothing to repair at open
    run = tmp_path / "run"
    run.mkdir()
    _plant(run, "checkpoints.jsonl", victim)
    with pytest.warns(RuntimeWarning, match="symlink"):
        with RunLogger(run, code_diff=False, index=False) as logger:
            logger.log_metrics(0, {"a": 1.0})
            logger.log_checkpoint("000001", batch=1)
    assert victim.read_bytes() == VICTIM + b"\n"


@pytest.mark.parametrize("name", ["config.json", "index.html", "code.diff", "checkpoints/000010.npz"])
def test_atomic_writes_never_replace_or_follow_a_link(tmp_path: Path, victim: Path, name: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    if name.startswith("checkpoints/"):  # the folder is the link
        (tmp_path / "elsewhere").mkdir()
        os.symlink(tmp_path / "elsewhere", run / "checkpoints")
    else:
        _plant(run, name, victim)
    storage = LocalStorage(run)
    with pytest.raises(StorageError, match="symlink"):
        storage.write(name, b"new")
    with pytest.raises(StorageError, match="symlink"):
        storage.append(name, b"new")
    assert victim.read_bytes() == VICTIM
    assert not any((tmp_path / "elsewhere").iterdir()) if name.startswith("checkpoints/") else True
    assert not [p for p in run.rglob("*.tmp")]


def test_temp_names_are_unpredictable_and_exclusive(tmp_path: Path, victim: Path) -> None:
    import threading

    run = tmp_path / "run"
    run.mkdir()
    # the names a writer used to choose: pid and thread id
    _plant(run, f".config.json.{os.getpid()}.{threading.get_ident()}.tmp", victim)
    LocalStorage(run).write("config.json", b"{}\n")
    assert (run / "config.json").read_bytes() == b"{}\n" and victim.read_bytes() == VICTIM


def test_truncate_and_hard_links_are_refused(tmp_path: Path, victim: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    os.link(victim, run / "metrics.jsonl")
    storage = LocalStorage(run)
    with pytest.raises(StorageError):
        storage.append("metrics.jsonl", b"x\n")
    with pytest.raises(StorageError):
        storage.truncate("metrics.jsonl", 3)
    assert victim.read_bytes() == VICTIM


def test_finished_runs_hold_no_lock_file(tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunLogger(run, code_diff=False, index=False) as logger:
        assert (run / ".rllog.lock").exists()
        logger.log_metrics(0, {"a": 1.0})
    assert not (run / ".rllog.lock").exists()
    with RunLogger(run, code_diff=False, index=False, resume=True):
        pass  # the next writer takes it again


def test_read_only_file_system_is_a_storage_error(tmp_path: Path, monkeypatch) -> None:
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):  # a read-only mount (root ignores chmod)
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(30, "Read-only file system")  # EROFS
        return real_open(path, flags, *args, **kwargs)

    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(StorageError, match="not writable"):
        RunLogger(run, code_diff=False, index=False)
    with pytest.raises(StorageError, match="not writable"):
        LocalStorage(run).write("config.json", b"{}")


def test_read_only_run_folder_is_a_storage_error(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; see the read-only file system test")
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o500)
    try:
        with pytest.raises(StorageError, match="not writable"):
            RunLogger(run, code_diff=False, index=False)
    finally:
        run.chmod(0o700)
