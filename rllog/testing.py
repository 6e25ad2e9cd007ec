"""Test helpers for code that uses or implements a :class:`rllog.storage.Storage`.

Two tools, for tests only (this module imports pytest; ``import rllog`` does not import it):

:class:`StorageConformance` checks that a storage keeps the contract of
:mod:`rllog.storage`. Subclass it in a test module and give it a ``storage`` fixture
that returns a fresh, empty handle (the suite closes it after each test)::

    import pytest
    from rllog.testing import StorageConformance

    class TestMyStorage(StorageConformance):
        @pytest.fixture
        def storage(self, tmp_path):
            return MyStorage(tmp_path / "run")

Every ``test_*`` method of the class then runs against ``MyStorage``. A second handle on
the same run is made by pickling the first (handles pickle as configuration), so the
storage must pickle to a handle that opens the same run.

:class:`FaultyStorage` wraps a storage and makes chosen calls fail, to test that a
training loop (or anything else writing a run) survives a failing backend::

    from rllog import RunLogger
    from rllog.storage import LocalStorage
    from rllog.testing import FaultyStorage

    def test_logging_survives_a_full_disk(tmp_path):
        storage = FaultyStorage(LocalStorage(tmp_path / "run"), fail_on={"append"}, times=3)
        with RunLogger(storage, code_diff=False) as logger:
            for step in range(10):
                logger.log_metrics(step, {"loss": 1.0 / (step + 1)})
        assert storage.failures == 3
"""

from __future__ import annotations

import errno
import pickle
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pytest

from rllog.storage import Storage

__all__ = ["StorageConformance", "FaultyStorage", "OPERATIONS"]

#: Names of the Storage calls :class:`FaultyStorage` can make fail.
OPERATIONS = frozenset(
    {
        "read",
        "read_range",
        "size",
        "write",
        "append",
        "truncate",
        "exists",
        "list",
        "remove",
        "flush",
        "close",
    }
)


def _enospc(operation: str, target: str) -> BaseException:
    return OSError(
        errno.ENOSPC, f"No space left on device (injected by FaultyStorage into {operation})", target
    )


class FaultyStorage:
    """A :class:`~rllog.storage.Storage` that passes every call to ``inner`` except the
    ones it makes fail.

    A failing call raises before ``inner`` is called, as a backend that refused the
    request: nothing of it reaches ``inner``.

    Args:
        inner: the storage that does the work.
        fail_on: names of the calls to fail, from :data:`OPERATIONS` (default: the
            write path, ``{"append", "write", "flush"}``).
        error: what a failing call raises: an exception instance (raised as is each
            time), or a callable ``(operation, target) -> exception`` (``target`` is the
            file's URL, or the storage's URL for ``list``/``flush``/``close``). Default:
            ``OSError(ENOSPC)`` naming the operation and the target. Use
            ``rllog.errors.StorageError(...)`` to act like a cloud outage.
        times: how many calls fail (counting every call in ``fail_on``); then calls pass
            through again. ``None``: every call fails until :meth:`heal`.
        delay: seconds to sleep at the start of every call in ``fail_on``, failing or
            not (a slow backend).

    Attributes:
        failures: calls failed so far.
        calls: calls in ``fail_on`` so far (failed or passed through).

    Raises:
        ValueError: ``fail_on`` names an unknown call, or ``times``/``delay`` is negative.

    Pickles with ``inner`` and its settings (the counters start again at 0); an
    ``error`` callable must be picklable for that (a module-level function).
    """

    def __init__(
        self,
        inner: Storage,
        *,
        fail_on: Iterable[str] = ("append", "write", "flush"),
        error: BaseException | Callable[[str, str], BaseException] | None = None,
        times: int | None = 1,
        delay: float = 0.0,
    ) -> None:
        fail_on = frozenset(fail_on)
        unknown = fail_on - OPERATIONS
        if unknown:
            raise ValueError(
                f"fail_on: unknown storage calls {sorted(unknown)}; expected some of {sorted(OPERATIONS)}"
            )
        if times is not None and times < 0:
            raise ValueError(f"times must be >= 0 or None (fail until heal()), got {times}")
        if delay < 0:
            raise ValueError(f"delay must be >= 0 seconds, got {delay}")
        self.inner = inner
        self.url = inner.url
        self.fail_on = fail_on
        self.error = error
        self.times = times
        self.delay = delay
        self.failures = 0
        self.calls = 0
        self._healed = False
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        settings = {"fail_on": self.fail_on, "error": self.error, "times": self.times, "delay": self.delay}
        return (_make_faulty_storage, (self.inner, settings))

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r}, fail_on={sorted(self.fail_on)}, times={self.times})"

    def heal(self) -> None:
        """Stop failing: every later call passes through."""
        with self._lock:
            self._healed = True

    def fail(self, times: int | None = 1) -> None:
        """Fail the next ``times`` calls in ``fail_on`` (``None``: all, until :meth:`heal`)."""
        with self._lock:
            self._healed = False
            self.times = None if times is None else self.failures + times

    def _fault(self, operation: str, name: str | None = None) -> None:
        if operation not in self.fail_on:
            return
        if self.delay:
            time.sleep(self.delay)
        with self._lock:
            self.calls += 1
            failing = not self._healed and (self.times is None or self.failures < self.times)
            if failing:
                self.failures += 1
        if failing:
            target = self.url if name is None else f"{self.url}/{name}"
            error = self.error
            if error is None:
                raise _enospc(operation, target)
            if isinstance(error, BaseException):
                raise error
            raise error(operation, target)

    def read(self, name: str) -> bytes:
        self._fault("read", name)
        return self.inner.read(name)

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        self._fault("read_range", name)
        return self.inner.read_range(name, start, end)

    def size(self, name: str) -> int:
        self._fault("size", name)
        return self.inner.size(name)

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        self._fault("write", name)
        self.inner.write(name, data, durable=durable)

    def append(self, name: str, data: bytes) -> None:
        self._fault("append", name)
        self.inner.append(name, data)

    def truncate(self, name: str, size: int) -> None:
        self._fault("truncate", name)
        self.inner.truncate(name, size)

    def exists(self, name: str) -> bool:
        self._fault("exists", name)
        return self.inner.exists(name)

    def list(self, prefix: str = "") -> list[str]:
        self._fault("list")
        return self.inner.list(prefix)

    def remove(self, name: str) -> None:
        self._fault("remove", name)
        self.inner.remove(name)

    def pending(self) -> dict[str, int]:
        return self.inner.pending()

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        self._fault("flush")
        self.inner.flush(durable, timeout)

    def close(self, timeout: float | None = None) -> None:
        self._fault("close")
        self.inner.close(timeout)


def _make_faulty_storage(inner: Storage, settings: dict[str, Any]) -> FaultyStorage:
    return FaultyStorage(inner, **settings)


class StorageConformance:
    """The Storage contract as pytest tests; subclass it and provide a ``storage``
    fixture (see the module docstring). Not collected itself (no ``Test`` prefix).

    The tests only use the public Storage calls and pickling, so they hold for any
    backend: local disk, object stores, wrappers. Crash cases are checked the way a
    backend-neutral test can: a handle dropped without ``close`` (after a durable flush)
    must not lose what it flushed, and torn tails must be cut by ``truncate``.
    """

    @pytest.fixture(autouse=True)
    def _handles(self, storage: Storage) -> Iterator[None]:
        self._opened: list[Storage] = [storage]
        yield
        for handle in reversed(self._opened):
            handle.close()

    def reopen(self, storage: Storage) -> Storage:
        """A new handle on the same run (unpickled from ``storage``), closed after the test."""
        clone: Storage = pickle.loads(pickle.dumps(storage))
        self._opened.append(clone)
        return clone

    # ------------------------------------------------------------------ identity

    def test_is_a_storage_with_its_url(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)
        assert storage.url and not storage.url.endswith("/")
        assert self.reopen(storage).url == storage.url

    def test_pickles_as_configuration(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b"1\n")
        storage.flush()
        clone = self.reopen(storage)
        assert type(clone) is type(storage) and clone.url == storage.url
        assert clone.read("metrics.jsonl") == b"1\n"
        assert len(pickle.dumps(storage)) < 2000  # configuration, not state

    # ------------------------------------------------------------------ write / read

    def test_write_then_read_returns_the_bytes(self, storage: Storage) -> None:
        data = bytes(range(256)) * 3
        storage.write("config.json", data)
        assert storage.read("config.json") == data
        assert storage.size("config.json") == 768
        storage.write("config.json", b"{}")
        assert storage.read("config.json") == b"{}"

    def test_write_nested_name_and_list(self, storage: Storage) -> None:
        storage.write("b.txt", b"b")
        storage.write("sub/dir/a.txt", b"a")
        storage.append("a.jsonl", b"{}\n")
        assert storage.list() == ["a.jsonl", "b.txt", "sub/dir/a.txt"]
        assert storage.list("sub/") == ["sub/dir/a.txt"]
        assert storage.list("zzz") == []

    def test_read_range(self, storage: Storage) -> None:
        storage.write("x.bin", b"0123456789")
        storage.append("x.bin", b"abc")
        assert storage.read_range("x.bin", 0, 3) == b"012"
        assert storage.read_range("x.bin", 8) == b"89abc"
        assert storage.read_range("x.bin", 9, 11) == b"9a"
        assert storage.read_range("x.bin", 11, 100) == b"bc"
        assert storage.read_range("x.bin", 20) == b""

    def test_write_not_durable_reads_back_and_a_durable_flush_keeps_it(self, storage: Storage) -> None:
        """``write(..., durable=False)`` (reports, rollout files between checkpoints): the
        bytes read back at once, a newer write replaces them, and after a durable flush
        another handle sees exactly the last ones."""
        storage.write("train_iteration_000001.html", b"<p>first</p>", durable=False)
        storage.write("iteration_000002/train.html", b"<p>2</p>", durable=False)
        storage.write("config.json", b"{}", durable=True)
        assert storage.read("train_iteration_000001.html") == b"<p>first</p>"
        storage.write("train_iteration_000001.html", b"<p>second</p>", durable=False)
        assert storage.read("train_iteration_000001.html") == b"<p>second</p>"
        assert storage.list() == ["config.json", "iteration_000002/train.html", "train_iteration_000001.html"]
        storage.flush(durable=True)
        assert storage.pending() == {}
        other = self.reopen(storage)
        assert other.read("train_iteration_000001.html") == b"<p>second</p>"
        assert other.read("iteration_000002/train.html") == b"<p>2</p>"

    def test_write_not_durable_then_removed_or_rewritten_durably(self, storage: Storage) -> None:
        """A file written with ``durable=False`` and removed (a resume moving a report aside)
        or rewritten durably before the durable flush: the flush raises nothing and the
        run holds what was written last."""
        storage.write("a.html", b"a", durable=False)
        storage.write("b.html", b"b", durable=False)
        storage.remove("a.html")
        storage.write("b.html", b"b2", durable=True)
        storage.flush(durable=True)
        storage.close()
        other = self.reopen(storage)
        assert other.list() == ["b.html"] and other.read("b.html") == b"b2"

    def test_close_keeps_writes_that_were_not_durable(self, storage: Storage) -> None:
        storage.write("train_iteration_000003_rollout_summaries.jsonl", b'{"traj_idx": 0}\n', durable=False)
        storage.close()
        other = self.reopen(storage)
        assert other.read("train_iteration_000003_rollout_summaries.jsonl") == b'{"traj_idx": 0}\n'

    def test_large_whole_file_is_atomic_and_exact(self, storage: Storage) -> None:
        data = b"<html>" + b"x" * (3 * 2**20) + b"</html>"
        storage.write("train_iteration_000001.html", data)
        storage.flush()
        assert storage.read("train_iteration_000001.html") == data

    # ------------------------------------------------------------------ append

    def test_append_keeps_order_across_flushes(self, storage: Storage) -> None:
        rows = [b'{"step": %d}\n' % i for i in range(30)]
        for i, row in enumerate(rows):
            storage.append("metrics.jsonl", row)
            if i % 7 == 3:
                storage.flush()
        assert storage.read("metrics.jsonl") == b"".join(rows)
        storage.flush(durable=True)
        assert storage.read("metrics.jsonl") == b"".join(rows)
        assert storage.size("metrics.jsonl") == sum(map(len, rows))

    def test_appended_bytes_are_visible_to_a_new_handle_after_flush(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b"1\n")
        storage.append("metrics.jsonl", b"2\n")
        storage.flush(durable=True)
        other = self.reopen(storage)
        assert other.read("metrics.jsonl") == b"1\n2\n"
        other.append("metrics.jsonl", b"3\n")
        other.close()
        storage.append("metrics.jsonl", b"4\n")
        storage.close()
        assert self.reopen(storage).read("metrics.jsonl") == b"1\n2\n3\n4\n"

    def test_write_replaces_earlier_appends_and_later_appends_follow(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b"old\n")
        storage.flush()
        storage.append("metrics.jsonl", b"staged\n")
        storage.write("metrics.jsonl", b"new\n")
        storage.append("metrics.jsonl", b"after\n")
        assert storage.read("metrics.jsonl") == b"new\nafter\n"
        storage.close()
        assert self.reopen(storage).read("metrics.jsonl") == b"new\nafter\n"

    def test_empty_append_creates_nothing_visible_twice(self, storage: Storage) -> None:
        storage.append("m.jsonl", b"a\n")
        storage.append("m.jsonl", b"")
        storage.flush()
        assert storage.read("m.jsonl") == b"a\n"

    # ------------------------------------------------------------------ exists / remove / errors

    def test_exists_and_remove(self, storage: Storage) -> None:
        assert not storage.exists("a.txt")
        storage.write("a.txt", b"a")
        storage.append("b.jsonl", b"b\n")
        assert storage.exists("a.txt") and storage.exists("b.jsonl")
        storage.flush()
        storage.remove("a.txt")
        storage.remove("b.jsonl")
        assert not storage.exists("a.txt") and not storage.exists("b.jsonl")
        assert storage.list() == []

    def test_missing_files_raise_file_not_found_naming_the_url(self, storage: Storage) -> None:
        calls: list[Callable[[], object]] = [
            lambda: storage.read("nope.txt"),
            lambda: storage.size("nope.txt"),
            lambda: storage.remove("nope.txt"),
        ]
        for call in calls:
            with pytest.raises(FileNotFoundError, match="nope.txt"):
                call()
        with pytest.raises(FileNotFoundError):
            storage.read_range("nope.txt", 0, 1)
        with pytest.raises(FileNotFoundError):
            storage.truncate("nope.txt", 0)

    @pytest.mark.parametrize("name", ["../escape", "/abs", "a\\b", "a//b", "a/./b", "", "x\x00y", "dir/"])
    def test_bad_names_are_refused(self, storage: Storage, name: str) -> None:
        with pytest.raises(ValueError):
            storage.write(name, b"x")
        with pytest.raises(ValueError):
            storage.write(name, b"x", durable=False)
        with pytest.raises(ValueError):
            storage.append(name, b"x")

    # ------------------------------------------------------------------ flush / close / pending

    def test_close_is_idempotent_and_flushes(self, storage: Storage) -> None:
        storage.append("checkpoints.jsonl", b'{"name": "000010"}\n')
        storage.close()
        storage.close()
        assert self.reopen(storage).read("checkpoints.jsonl") == b'{"name": "000010"}\n'

    def test_flush_and_close_take_a_timeout_in_seconds(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b"1\n")
        storage.flush(durable=True, timeout=30.0)
        storage.flush(timeout=None)
        assert storage.pending() == {}
        storage.close(timeout=30.0)
        storage.close(timeout=None)
        assert self.reopen(storage).read("metrics.jsonl") == b"1\n"

    def test_pending_is_empty_after_a_durable_flush(self, storage: Storage) -> None:
        assert storage.pending() == {}
        storage.append("metrics.jsonl", b"1\n")
        storage.write("config.json", b"{}")
        assert all(isinstance(n, int) and n > 0 for n in storage.pending().values())
        assert set(storage.pending()) <= {"metrics.jsonl", "config.json"}
        storage.flush(durable=True)
        assert storage.pending() == {}

    # ------------------------------------------------------------------ crash / truncation

    def test_durably_flushed_bytes_survive_a_handle_that_is_never_closed(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b"1\n2\n")
        storage.write("config.json", b"{}")
        storage.flush(durable=True)
        # as if the writer was killed here: another handle sees everything flushed
        other = self.reopen(storage)
        assert other.read("metrics.jsonl") == b"1\n2\n"
        assert other.read("config.json") == b"{}"

    def test_truncate_cuts_a_torn_tail_and_appends_follow(self, storage: Storage) -> None:
        storage.append("metrics.jsonl", b'{"step": 1}\n{"step": 2')  # killed mid-row
        storage.flush(durable=True)
        storage.truncate("metrics.jsonl", 12)
        assert storage.read("metrics.jsonl") == b'{"step": 1}\n'
        storage.append("metrics.jsonl", b'{"step": 2}\n')
        storage.close()
        assert self.reopen(storage).read("metrics.jsonl") == b'{"step": 1}\n{"step": 2}\n'

    def test_truncate_to_zero_and_out_of_range(self, storage: Storage) -> None:
        storage.write("x.bin", b"0123")
        with pytest.raises(ValueError):
            storage.truncate("x.bin", 5)
        with pytest.raises(ValueError):
            storage.truncate("x.bin", -1)
        assert storage.read("x.bin") == b"0123"
        storage.truncate("x.bin", 4)
        assert storage.read("x.bin") == b"0123"
        storage.truncate("x.bin", 0)
        assert storage.read("x.bin") == b"" and storage.size("x.bin") == 0 and storage.exists("x.bin")
