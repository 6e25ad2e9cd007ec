"""The Storage contract (:class:`rllog.testing.StorageConformance`) run against local disk,
memory://, the GCS emulator and moto S3; the read-only handle; :class:`rllog.testing.FaultyStorage`."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from servers import unique

from rllog.errors import StorageError
from rllog.storage import FsspecStorage, LocalStorage, ReadOnlyStorage, Storage, open_storage
from rllog.testing import FaultyStorage, StorageConformance


class TestLocalStorage(StorageConformance):
    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return LocalStorage(tmp_path / "run")


class TestMemoryStorage(StorageConformance):
    @pytest.fixture
    def storage(self) -> Storage:
        return open_storage(f"memory://{unique('rllog-test')}/run")


@pytest.mark.cloud
class TestGcsStorage(StorageConformance):
    @pytest.fixture
    def storage(self, gcs_server) -> Storage:
        return open_storage(
            f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}", **gcs_server.storage_options()
        )


@pytest.mark.cloud
class TestS3Storage(StorageConformance):
    @pytest.fixture
    def storage(self, s3_server) -> Storage:
        return open_storage(
            f"s3://{s3_server.new_bucket()}/runs/{unique('run')}", **s3_server.storage_options()
        )


class TestFaultyStorageWithoutFaults(StorageConformance):
    """A FaultyStorage that fails nothing is the storage it wraps."""

    @pytest.fixture
    def storage(self, tmp_path: Path) -> Storage:
        return FaultyStorage(LocalStorage(tmp_path / "run"), times=0)

    def test_pickles_as_configuration(self, storage: Storage) -> None:  # type(clone) is FaultyStorage too
        super().test_pickles_as_configuration(storage)


# ---------------------------------------------------------------------------- read-only


def _spill_entries() -> set[str]:
    root = Path(os.environ["RLLOG_SPILL_DIR"])
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.cloud
def test_reading_a_bucket_run_read_only_starts_no_thread_and_spills_nothing(gcs_server) -> None:
    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    options = gcs_server.storage_options()
    writer = FsspecStorage(url, **options)
    writer.append("metrics.jsonl", b'{"step": 0}\n{"step": 1}\n')
    writer.write("config.json", b"{}")
    writer.close()
    threads, spilled = threading.active_count(), _spill_entries()
    for _ in range(3):
        reader = open_storage(url, mode="r", **options)
        assert isinstance(reader, ReadOnlyStorage) and isinstance(reader, Storage)
        assert reader.list() == ["config.json", "metrics.jsonl"]
        assert reader.read("metrics.jsonl") == b'{"step": 0}\n{"step": 1}\n'
        assert reader.read_range("metrics.jsonl", 12) == b'{"step": 1}\n'
        assert reader.size("config.json") == 2 and reader.exists("config.json") and not reader.exists("x")
        assert reader.pending() == {}
        reader.flush(durable=True)
        reader.close()
        reader.close()
    assert threading.active_count() == threads
    assert _spill_entries() == spilled


def test_read_only_handle_refuses_changes_naming_url_and_call() -> None:
    url = f"memory://{unique('rllog-test')}/run"
    writer = open_storage(url)
    writer.write("a.txt", b"a")
    writer.close()
    reader = open_storage(url, mode="r", flush_interval=1.0, spill=False)  # writer options are ignored
    for call, do in [
        ("write", lambda: reader.write("a.txt", b"b")),
        ("append", lambda: reader.append("a.txt", b"b")),
        ("truncate", lambda: reader.truncate("a.txt", 0)),
        ("remove", lambda: reader.remove("a.txt")),
    ]:
        with pytest.raises(StorageError, match=f"{call}.*{url}.*read-only"):
            do()
    assert reader.read("a.txt") == b"a"
    with pytest.raises(FileNotFoundError, match="nope"):
        reader.read("nope")


def test_open_storage_mode(tmp_path: Path) -> None:
    local = open_storage(tmp_path / "run", mode="r")
    assert isinstance(local, LocalStorage) and not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="'w'.*'r'.*'a'"):
        open_storage(tmp_path / "run", mode="a")  # type: ignore[arg-type]  # a wrong mode on purpose


# ---------------------------------------------------------------------------- FaultyStorage


def test_faulty_storage_fails_the_next_appends_then_passes_through(tmp_path: Path) -> None:
    storage = FaultyStorage(LocalStorage(tmp_path / "run"), fail_on={"append"}, times=2)
    for i in range(2):
        with pytest.raises(OSError) as info:
            storage.append("m.jsonl", b"%d\n" % i)
        assert info.value.errno == errno.ENOSPC and "m.jsonl" in str(info.value)
    storage.append("m.jsonl", b"2\n")
    storage.write("c.json", b"{}")  # not in fail_on
    assert storage.read("m.jsonl") == b"2\n" and storage.failures == 2 and storage.calls == 3
    storage.fail(times=None)
    with pytest.raises(OSError):
        storage.append("m.jsonl", b"3\n")
    storage.heal()
    storage.append("m.jsonl", b"4\n")
    storage.close()
    assert LocalStorage(tmp_path / "run").read("m.jsonl") == b"2\n4\n"


def test_faulty_storage_custom_error_and_validation(tmp_path: Path) -> None:
    storage = FaultyStorage(
        LocalStorage(tmp_path / "run"),
        fail_on={"flush"},
        error=lambda op, target: StorageError(f"{op} of {target}: bucket unreachable"),
    )
    with pytest.raises(StorageError, match="flush of .*run: bucket unreachable"):
        storage.flush(durable=True)
    storage.flush(durable=True)
    with pytest.raises(ValueError, match="unknown storage calls"):
        FaultyStorage(storage, fail_on={"appendd"})


def test_run_logger_survives_a_full_disk(tmp_path: Path) -> None:
    from rllog import RunLogger, read_run

    storage = FaultyStorage(LocalStorage(tmp_path / "run"), fail_on={"append"}, times=3)
    with pytest.warns(RuntimeWarning):
        with RunLogger(storage, code_diff=False, index=False) as logger:
            for step in range(10):
                logger.log_metrics(step, {"loss": 1.0 / (step + 1)})
    assert storage.failures == 3
    assert len(read_run(tmp_path / "run").metrics) >= 1
