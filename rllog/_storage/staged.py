"""FsspecStorage: a writer of a run under an object-store URL.

Appends and writes are staged (memory and a local spill journal, :mod:`rllog._storage.spill`)
and uploaded by one background thread per handle; ``flush`` is a barrier that waits
for everything staged before it. How each object store grows a file is in
:mod:`rllog._storage.objectops`.
"""

from __future__ import annotations

import atexit
import os
import random
import secrets
import socket
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from rllog._format.layout import CHECKPOINTS_FILE
from rllog._storage import objectops
from rllog._storage.base import check_name
from rllog._storage.spill import NULL_JOURNAL, Journal, SpillJournal, run_folder, spill_root
from rllog.errors import StorageError, StoragePermanentError

__all__ = ["FsspecStorage", "run_at_exit"]

#: Files whose every append is uploaded only after everything staged before it (in any
#: file) is uploaded: a checkpoint record never reaches the bucket before its rows. All
#: other files are independent and uploaded concurrently.
ORDERED_FILES = frozenset({CHECKPOINTS_FILE})

#: Uploads of independent files in flight at once, per handle.
UPLOAD_CONCURRENCY = 4


class FsspecStorage:
    """A run under an object-store URL (``gs://``, ``s3://``, ``memory://``, any fsspec URL).

    Writes never wait on the network. ``append`` and ``write`` stage bytes in memory
    and in a local spill journal (``$RLLOG_SPILL_DIR`` or ``~/.cache/rllog/spill/``,
    see :mod:`rllog._storage.spill`; ~5 us a row) and return; a background thread uploads them
    every ``flush_interval`` seconds, and ``flush``/``close`` wait for it. Every upload
    of one file is one coalesced request (or two), so an object gets at most one write
    per flush, well under GCS's ~1 write/s/object.

    Upload cost (:mod:`rllog._storage.objectops`): on GCS the new bytes only (a part object composed
    onto the file server-side; re-based once per ~1,000 flushes; a cut at resume starts
    from the snapshot of the last checkpoint, :meth:`snapshot`); on S3 the new bytes
    as a segment object that readers join, folded server-side into bounded chunks and
    composed into the file's one object at close, plus the file's first 5 MiB once more
    (``S3Ops``); elsewhere the whole
    file per flush. ``write`` is one PUT of the whole file: atomic.

    Failures: 429, 5xx, timeouts and dropped connections are retried with exponential
    backoff and jitter, forever, while the rows stay in memory and in the spill journal;
    the first failure of an outage is reported once as a ``RuntimeWarning``. A missing
    bucket or a refused permission is detected at open (``StoragePermanentError``)
    when listing the run can tell. An upload that may or may not have happened (a
    dropped connection) is checked against the object before it is re-sent, so rows are
    not duplicated.

    What a crash loses: nothing that reached the spill journal if the run is reopened on
    the same machine (the next writer of this URL uploads a dead writer's journal before
    its own rows); otherwise at most the rows of one flush interval.

    Many writers: each handle (each process, or each unpickled copy) is its own writer.
    On GCS and S3, two writers appending to one object keep each other's rows (GCS:
    compose with ``ifGenerationMatch``; S3: each segment claims its offset with
    ``If-None-Match``). The tests run this against the GCS emulator behind a proxy that
    enforces the generation preconditions the emulator ignores, and against moto, which
    enforces them on PUT (not on completing a multipart upload: two S3 writers closing
    at the same instant rely on real S3's ``If-Match`` on the compose). Other backends are single-writer per object.

    Args:
        url: the run's URL.
        flush_interval: seconds between background uploads.
        flush_timeout: seconds ``flush`` waits before it gives up, unless the call
            passes its own (``flush(timeout=...)``); kept as :attr:`flush_timeout`.
        close_timeout: seconds ``close`` waits for the final upload, unless the call
            passes its own (``close(timeout=...)``); kept as :attr:`close_timeout`.
        request_timeout: seconds one HTTP request may take.
        spill: keep the local spill journal (default: yes, except for ``memory://``).
        storage_options: passed to ``fsspec.core.url_to_fs`` (e.g. ``token="anon"``,
            ``endpoint_url=...``, ``client_kwargs=...``).

    Raises:
        StoragePermanentError: at open, if the bucket does not exist or may not be read.
        ImportError: if the backend's package (``gcsfs``, ``s3fs``) is missing.
    """

    #: Backoff between retries of a failed upload: ``backoff_initial * 2**n`` seconds, at
    #: most ``backoff_max``, times a random factor in [0.5, 1].
    backoff_initial = 0.5
    backoff_max = 30.0

    def __init__(
        self,
        url: str,
        *,
        flush_interval: float = 5.0,
        flush_timeout: float = 30.0,
        close_timeout: float = 60.0,
        request_timeout: float = 30.0,
        spill: bool | None = None,
        **storage_options: Any,
    ) -> None:
        if flush_interval <= 0 or flush_timeout <= 0 or close_timeout <= 0 or request_timeout <= 0:
            raise ValueError(
                f"flush_interval, flush_timeout, close_timeout, request_timeout must be > 0 seconds, got "
                f"{flush_interval}, {flush_timeout}, {close_timeout}, {request_timeout}"
            )
        self.url = url.rstrip("/")
        self.storage_options = storage_options
        self.flush_interval = flush_interval
        self.flush_timeout = flush_timeout
        self.close_timeout = close_timeout
        self.request_timeout = request_timeout
        self.spill = spill
        self._open(adopt=True)

    def _open(self, adopt: bool) -> None:
        import fsspec

        protocol = self.url.split("://", 1)[0]
        options = objectops.backend_options(protocol, self.storage_options, self.request_timeout)
        self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        self._root = root.rstrip("/")
        writer_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._ops = objectops.make_ops(self.fs, writer_id, self._root)
        self._pid = os.getpid()
        self._state = threading.RLock()  # staged bytes and counters
        self._wake = threading.Condition(self._state)
        self._locks: dict[str, threading.Lock] = {}  # per file: one upload at a time; readers wait for it
        self._pool = ThreadPoolExecutor(UPLOAD_CONCURRENCY, thread_name_prefix=f"rllog-upload {self.url}")
        self._stop = threading.Event()  # close gave up waiting: abandon retries
        self._poke = threading.Event()  # cuts a retry's backoff short (flush, close)
        self._seq = 0  # appends/writes so far
        self._uploaded_seq = 0  # everything up to this one is uploaded
        self._last_cycle: tuple[int, BaseException | None] = (0, None)  # (start seq, error)
        self._kicked = self._closing = self._closed = False
        self._warned: set[str] = set()
        self._names_ok: set[str] = set()
        self._probe()
        journals: list[_Journal] = []
        if self.spill if self.spill is not None else protocol != "memory":
            run_dir = run_folder(spill_root(), self.url)
            for orphan in SpillJournal.orphans(run_dir) if adopt else []:
                journal = _Journal(orphan)
                loaded = orphan.load()
                # ordered files last: a dead writer's checkpoint records wait for all its rows
                for name in sorted(loaded, key=lambda n: n in ORDERED_FILES):
                    spilled = loaded[name]
                    self._seq += 1
                    staged = _Staged(self._seq, spilled.base, spilled.tail, spilled.intent)
                    if name in ORDERED_FILES:
                        staged.marks = [(self._seq, len(spilled.tail))] if spilled.tail else []
                    journal.staged[name] = staged
                journals.append(journal)
            journals.append(_Journal(SpillJournal.create(run_dir, writer_id, self.url)))
        else:
            journals.append(_Journal(NULL_JOURNAL))
        self._journals = journals
        self._thread = threading.Thread(target=self._run, name=f"rllog-upload {self.url}", daemon=True)
        self._thread.start()
        _OPEN_STORAGES.add(self)
        run_at_exit()

    def __reduce__(self) -> tuple[Any, ...]:
        options = dict(
            self.storage_options,
            flush_interval=self.flush_interval,
            flush_timeout=self.flush_timeout,
            close_timeout=self.close_timeout,
            request_timeout=self.request_timeout,
            spill=self.spill,
        )
        return (_make_fsspec_storage, (self.url, options))

    def __repr__(self) -> str:
        return f"FsspecStorage({self.url!r})"

    # ------------------------------------------------------------------ staging

    def _lock_for(self, name: str) -> threading.Lock:
        """The lock of one file: held by its upload; readers of the file wait for it."""
        with self._state:
            lock = self._locks.get(name)
            if lock is None:
                lock = self._locks[name] = threading.Lock()
            return lock

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}"

    def _check(self, name: str) -> None:
        if name not in self._names_ok:
            check_name(name)
            self._names_ok.add(name)
        if self._closed:
            raise ValueError(f"{self!r} is closed; open a new storage to write to {self.url}/{name}")
        if self._pid != os.getpid():  # a forked child: a fresh writer; the parent uploads its own rows
            self._open(adopt=False)

    def _spill(self, journal: _Journal, record: Callable[[Journal], None]) -> None:
        """``record(journal.spill)``; on a local disk error (``OSError``) warn once and keep
        going in memory only (the journal becomes :data:`NULL_JOURNAL`)."""
        try:
            record(journal.spill)
        except OSError as exc:
            self._warn_once(
                "spill",
                f"rllog: local spill journal {journal.spill.folder} failed ({exc}); "
                "staged rows are now kept in memory only, and a crash loses them",
            )
            journal.spill = NULL_JOURNAL

    def append(self, name: str, data: bytes) -> None:
        """Stage ``data`` for the end of ``name``; returns without touching the network."""
        self._check(name)
        if not data:
            return
        with self._state:
            journal = self._journals[-1]
            staged = journal.staged.get(name)
            self._seq += 1
            if staged is None:
                staged = journal.staged[name] = _Staged(self._seq, None, b"", None)
                if name in ORDERED_FILES:
                    staged.marks = []
            staged.tail += data
            staged.last = self._seq
            if staged.marks is not None:
                staged.marks.append((self._seq, len(staged.tail)))
            self._spill(journal, lambda spill: spill.append(name, data))

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        """Stage ``data`` as the whole new content of ``name`` (uploaded in one PUT:
        readers see the old file or the new one). Appends staged before it are dropped.
        ``durable`` changes nothing: every write is uploaded in the background and is
        durable once a flush has seen it uploaded."""
        self._check(name)
        data = bytes(data)
        with self._state:
            self._drop(name)
            self._seq += 1
            journal = self._journals[-1]
            staged = journal.staged[name] = _Staged(self._seq, data, b"", None)
            if name in ORDERED_FILES:
                staged.marks = []
            self._spill(journal, lambda spill: spill.stage_write(name, data))

    def truncate(self, name: str, size: int) -> None:
        """Cut ``name`` to its first ``size`` bytes: :meth:`cut` with nothing after them."""
        self.cut(name, size)

    def cut(self, name: str, size: int, then: bytes = b"") -> None:
        """Replace ``name`` with its first ``size`` bytes followed by ``then``, atomically (a
        reader sees the old file or the new one), before returning: what is staged is
        uploaded first (a durable :meth:`flush`), then the object is cut where it lies
        (:meth:`rllog._storage.objectops.ObjectOps.cut`): on S3 server-side, nothing
        downloaded; on GCS a compose of the file's snapshot (:meth:`snapshot`) and the
        bytes after it when the snapshot is a checked prefix no longer than ``size``,
        else the prefix streamed back in 8 MiB pieces; elsewhere read and written whole.
        Memory holds ``then`` and at most one piece. Appends by this handle racing with
        it from other threads raise (nothing is lost).

        Raises:
            FileNotFoundError: no such file.
            ValueError: ``size`` is negative or larger than the file.
            StorageError: the upload before it or the cut failed after retries (the file
                is then unchanged or cut, never torn).
        """
        self._check(name)
        self.flush(durable=True)  # the object holds every byte: the cut is one operation on it
        with self._lock_for(name):
            with self._state:
                base, tail = self._staged_view(name)
            if base is not None or tail:
                raise StorageError(
                    f"{self.url}/{name} was appended to while it was being cut; nothing was cut"
                )
            remote = self._remote_size(name)
            if remote is None:
                raise FileNotFoundError(f"no such file: {self.url}/{name}")
            if not 0 <= size <= remote:
                raise ValueError(f"cannot truncate {self.url}/{name} ({remote} bytes) to {size} bytes")
            objectops.call_with_retry(f"cut {self.url}/{name}", self._ops.cut, self._path(name), size, then)

    def _drop(self, name: str) -> bool:
        """Forget everything staged for ``name`` (under ``_state``); True if there was some."""
        had = False
        for journal in self._journals:
            staged = journal.staged.pop(name, None)
            if staged is not None:
                had = had or staged.base is not None or bool(staged.tail)
                staged.epoch += 1  # an upload in flight must not update it
                self._spill(journal, lambda spill: spill.remove_name(name))
        return had

    def _staged_view(self, name: str) -> tuple[bytes | None, bytes]:
        """(base, tail): what ``name`` becomes after upload is ``base or remote`` + ``tail``."""
        base: bytes | None = None
        tails: list[bytes] = []
        for journal in self._journals:
            staged = journal.staged.get(name)
            if staged is not None:
                if staged.base is not None:
                    base, tails = staged.base, []
                tails.append(bytes(staged.tail))
        return base, b"".join(tails)

    def pending(self) -> dict[str, int]:
        """Bytes staged and not yet uploaded, per file name."""
        with self._state:
            out: dict[str, int] = {}
            for journal in self._journals:
                for name, staged in journal.staged.items():
                    out[name] = out.get(name, 0) + len(staged.base or b"") + len(staged.tail)
            return {name: n for name, n in out.items() if n}

    # ------------------------------------------------------------------ reading

    def read(self, name: str) -> bytes:
        """The whole file, staged bytes included. Raises FileNotFoundError, StorageError."""
        check_name(name)
        with self._lock_for(name):
            with self._state:
                base, tail = self._staged_view(name)
            if base is not None:
                return base + tail
            try:
                remote = objectops.call_with_retry(
                    f"read {self.url}/{name}", self._ops.read, self._path(name)
                )
            except FileNotFoundError:
                if not tail:
                    raise FileNotFoundError(f"no such file: {self.url}/{name}") from None
                remote = b""
            return remote + tail

    def _remote_size(self, name: str) -> int | None:
        stat = objectops.call_with_retry(f"stat {self.url}/{name}", self._ops.stat, self._path(name))
        return None if stat is None else stat.size

    def size(self, name: str) -> int:
        """Bytes in the file, staged bytes included. Raises FileNotFoundError."""
        check_name(name)
        with self._lock_for(name):
            with self._state:
                base, tail = self._staged_view(name)
            if base is not None:
                return len(base) + len(tail)
            remote = self._remote_size(name)
            if remote is None and not tail:
                raise FileNotFoundError(f"no such file: {self.url}/{name}")
            return (remote or 0) + len(tail)

    def read_range(self, name: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file (``end=None``: to the end; clipped to the size)."""
        check_name(name)
        with self._lock_for(name):
            with self._state:
                base, tail = self._staged_view(name)
            if base is not None:
                return (base + tail)[start:end]
            remote = self._remote_size(name)
            if remote is None and not tail:
                raise FileNotFoundError(f"no such file: {self.url}/{name}")
            remote = remote or 0
            stop = remote + len(tail) if end is None else min(end, remote + len(tail))
            head = b""
            if start < min(stop, remote):
                head = objectops.call_with_retry(
                    f"read {self.url}/{name}",
                    self._ops.read_range,
                    self._path(name),
                    start,
                    min(stop, remote),
                )
            return head + tail[max(0, start - remote) : max(0, stop - remote)]

    def exists(self, name: str) -> bool:
        check_name(name)
        with self._state:
            base, tail = self._staged_view(name)
        if base is not None or tail:
            return True
        return self._remote_size(name) is not None

    def list(self, prefix: str = "") -> list[str]:
        """Names of files under the run starting with ``prefix``, sorted (staged ones too)."""
        names = objectops.list_names(self.fs, self._root, self.url)
        with self._state:
            for journal in self._journals:
                names.update(n for n, s in journal.staged.items() if s.base is not None or s.tail)
        return sorted(n for n in names if n.startswith(prefix))

    def remove(self, name: str) -> None:
        """Delete the file now (staged bytes included). Raises FileNotFoundError."""
        self._check(name)
        with self._lock_for(name):
            with self._state:
                had = self._drop(name)
                self._seq += 1
            if self._remote_size(name) is not None:
                objectops.call_with_retry(f"remove {self.url}/{name}", self._ops.remove, self._path(name))
            elif not had:
                raise FileNotFoundError(f"no such file: {self.url}/{name}")

    # ------------------------------------------------------------------ uploading

    def _probe(self) -> None:
        """At open: list the run (the bucket exists and may be read), then create and
        delete a small object under ``.rllog-parts/<writer>/`` (it may be written), so
        write-denied credentials fail here, not at the first upload with every row."""
        try:
            self._ops.probe()
            probe = f"{self._root}/{objectops.PARTS_DIR}/{self._ops.writer_id}/write-probe"
            self._ops.put(probe, b"rllog write probe\n")
            self._ops.remove(probe)
        except Exception as exc:
            kind = "permanent" if isinstance(exc, FileNotFoundError) else objectops.classify(exc)
            if kind == "permanent":
                raise StoragePermanentError(
                    f"cannot write a run to {self.url}: {type(exc).__name__}: {exc}. Check the bucket "
                    "name and that the credentials (storage_options) may list, create and delete objects there."
                ) from exc
            self.outage_at_open = f"{type(exc).__name__}: {exc}"  # RunLogger skips its start-up reads
            self._warn_once(
                "outage",
                f"rllog: {self.url} is unreachable at open ({type(exc).__name__}: {exc}); "
                "rows are kept locally and uploaded when it answers",
            )

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _kind(self, exc: BaseException) -> str:
        if isinstance(exc, FileNotFoundError):  # the bucket, or a part someone cleaned up
            try:
                self._ops.probe()
            except FileNotFoundError:
                return "permanent"
            except Exception:
                pass
            return "transient"
        return objectops.classify(exc)

    def _run(self) -> None:
        due = time.monotonic() + self.flush_interval
        while True:
            with self._state:
                while not (self._kicked or self._closing) and time.monotonic() < due:
                    self._wake.wait(due - time.monotonic())
                self._kicked = False
                closing = self._closing
            error = self._cycle()
            permanent = error is not None and isinstance(error, StoragePermanentError)
            due = time.monotonic() + (max(60.0, self.flush_interval) if permanent else self.flush_interval)
            if closing or self._stop.is_set():
                return

    def _cycle(self) -> BaseException | None:
        """Upload everything staged: independent files concurrently (at most
        :data:`UPLOAD_CONCURRENCY` at once, each retried on its own, so one failing file
        does not hold back the others), then the ordered files (:data:`ORDERED_FILES`),
        each append only once nothing staged before it is left. Returns the first
        failure (None if none)."""
        with self._state:
            start = self._seq
            oldest: dict[str, int] = {}
            for journal in self._journals:
                for name, staged in journal.staged.items():
                    oldest[name] = min(oldest.get(name, staged.seq), staged.seq)
        names = sorted(oldest, key=lambda n: oldest[n])
        errors: list[BaseException] = []
        futures: list[Future[None]] = []
        for name in names:
            if name not in ORDERED_FILES:
                try:
                    futures.append(self._pool.submit(self._upload_name, name))
                except RuntimeError:  # the pool is shut down (interpreter exit): upload here
                    futures.append(_run_now(self._upload_name, name))
        for name in names:
            if name in ORDERED_FILES:  # each time an older file is done, what it held back may go
                running = set(futures)
                while True:
                    try:
                        self._upload_name(name)
                    except Exception as exc:
                        errors.append(exc)
                        break
                    if not running or not self._staged_left(name):
                        break
                    done, running = wait(running, return_when=FIRST_COMPLETED)
        wait(futures)
        errors.extend(e for e in (future.exception() for future in futures) if e is not None)
        error: BaseException | None = errors[0] if errors else None
        if error is not None and self._kind(error) == "permanent":
            error = StoragePermanentError(f"cannot upload to {self.url}: {type(error).__name__}: {error}")
            self._warn_once("permanent", f"rllog: {error}; rows are kept locally ({self._where()})")
        with self._state:
            left_behind = any(
                staged.seq <= start and not staged.empty()
                for journal in self._journals
                for staged in journal.staged.values()
            )
            if error is None and not left_behind and not self._closed:
                self._uploaded_seq = max(self._uploaded_seq, start)
            if not self._closed:
                for journal in self._journals[:-1]:
                    if not journal.staged:  # a dead writer's journal, all uploaded
                        self._spill(journal, lambda spill: spill.close(True))
                self._journals[:-1] = [j for j in self._journals[:-1] if j.staged]
            self._last_cycle = (start, error)
            self._wake.notify_all()
        return error

    def _staged_left(self, name: str) -> bool:
        with self._state:
            return any(not j.staged[name].empty() for j in self._journals if name in j.staged)

    def _upload_name(self, name: str) -> None:
        """Upload ``name`` from each journal holding it, oldest journal first, retrying
        transient failures with backoff until it is done or close gives up."""
        from tenacity import Retrying, retry_if_exception

        def once() -> None:
            for journal in list(self._journals):
                if name in journal.staged:
                    while self._upload_one(journal, name):
                        pass  # stopped at a snapshot mark (:meth:`snapshot`): the rest goes now
                    staged = journal.staged.get(name)
                    if staged is not None and not staged.empty():
                        return  # an ordered file held back: a newer journal's appends wait too

        Retrying(
            retry=retry_if_exception(lambda e: self._kind(e) != "permanent"),
            wait=self._backoff,
            stop=lambda _state: self._stop.is_set(),
            sleep=self._sleep,
            before_sleep=self._on_retry,
            reraise=True,
        )(once)

    def _sleep(self, seconds: float) -> None:
        self._poke.wait(seconds)
        self._poke.clear()

    def _backoff(self, state: Any) -> float:
        from tenacity import wait_exponential

        if self._kind(state.outcome.exception()) == "conflict":
            return random.uniform(0.0, 0.1)  # another writer just wrote: go again on top of it
        wait = wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max)(state)
        return wait * random.uniform(0.5, 1.0)  # jitter: writers that failed together retry apart

    def _on_retry(self, state: Any) -> None:
        exc = state.outcome.exception()
        if self._kind(exc) != "conflict":
            self._warn_once(
                "outage",
                f"rllog: upload to {self.url} failed ({type(exc).__name__}: {exc}); retrying with backoff. "
                f"Rows are kept in memory and in {self._where()} meanwhile",
            )

    def _where(self) -> str:
        folder = self._journals[-1].spill.folder
        return f"the spill journal {folder}" if folder is not None else "memory only (no spill journal)"

    def _upload_one(self, journal: _Journal, name: str) -> bool:
        """One attempt at uploading what is staged for ``name`` in ``journal``. Stops at
        a snapshot mark (:meth:`snapshot`), takes the snapshot, and returns True when
        bytes after the mark are left to upload now (else False)."""
        with self._lock_for(name):
            with self._state:
                staged = journal.staged.get(name)
                if staged is None or staged.empty():
                    journal.staged.pop(name, None)
                    return False
                base, full, epoch, intent = staged.base, bytes(staged.tail), staged.epoch, staged.intent
                last = staged.last
                tail = full
                split = staged.marks is None and staged.snap is not None and staged.snap < len(tail)
                if split:  # upload up to the mark, snapshot, then the rest (a lower seq bound stays)
                    tail = full[: staged.snap]
                if staged.marks is not None:  # ordered: only what nothing older staged elsewhere waits for
                    floor = min(
                        (
                            other.seq
                            for j in self._journals
                            for other_name, other in j.staged.items()
                            if other_name != name and not other.empty()
                        ),
                        default=self._seq + 1,
                    )
                    if base is not None and staged.seq >= floor:
                        return False
                    tail = full[: max((n for seq, n in staged.marks if seq < floor), default=0)]
                    if base is None and not tail:
                        return False
            path = self._path(name)
            done = None
            if base is None and not tail:
                done = 0  # only a snapshot mark is staged
            elif base is not None:
                self._ops.put(path, base + tail)
                done = len(tail)
            elif intent is not None:  # an earlier attempt may have landed: look before resending
                size_before, length = intent
                stat = self._ops.stat(path)
                if stat is not None and stat.size >= size_before + length:
                    landed = self._ops.read_range(path, size_before, size_before + length)
                    done = length if landed == full[:length] else None
            if done is None:

                def before_send(size_before: int) -> None:
                    with self._state:
                        if self._closed:  # close gave up: do not send what the journal cannot track
                            raise StorageError(f"{self!r} was closed during the upload of {name}")
                        if staged.epoch == epoch:
                            staged.intent = (size_before, len(tail))
                            self._spill(journal, lambda spill: spill.set_intent(name, size_before, len(tail)))

                self._ops.append(path, tail, before_send)
                done = len(tail)
            with self._state:
                if self._closed:  # close gave up meanwhile: the journal (intent) tells the next writer
                    return False
                if staged.epoch != epoch:  # rewritten or removed meanwhile
                    return False
                staged.base = None
                del staged.tail[:done]
                staged.intent = None
                empty = not staged.tail
                if staged.marks is not None:
                    staged.marks = [(seq, n - done) for seq, n in staged.marks if n > done]
                    staged.seq = staged.marks[0][0] if staged.marks else staged.last + 1
                elif not empty and not split:  # what is left was appended after this upload began
                    staged.seq = last + 1
                n, base_done = done, base is not None
                if done or base_done:
                    self._spill(journal, lambda spill: spill.committed(name, n, base_done, empty))
                snap = staged.snap
                if snap is not None:
                    snap = staged.snap = snap - done  # uploads never pass the mark
                if empty and snap is None and journal.staged.get(name) is staged:
                    del journal.staged[name]
            if snap is None:
                return False
            if snap > 0:
                return True  # an earlier attempt's bytes landed short of the mark: on to it now
            self._take_snapshot(name, path)
            with self._state:
                if staged.snap == 0:
                    staged.snap = None
                if staged.empty() and journal.staged.get(name) is staged:
                    del journal.staged[name]
                return not staged.empty() and staged.epoch == epoch and not self._closed

    def snapshot(self, name: str) -> None:
        """Ask for a server-side copy of ``name`` as it stands once what is staged for it
        now is uploaded (:meth:`rllog._storage.objectops.ObjectOps.snapshot`), so that a
        later :meth:`cut` of it to at least that size sends only the bytes after it. The
        upload thread stops at that point, takes the copy (one request, nothing
        uploaded), then uploads the rest. Only on GCS (elsewhere it does nothing); returns
        at once. Best effort: a failed copy warns once and changes nothing else (a cut
        then sends the whole prefix, as without it). Not kept in the spill journal; not
        for :data:`ORDERED_FILES` (nothing is done)."""
        self._check(name)
        if not self._ops.snapshots or name in ORDERED_FILES:
            return
        with self._state:
            journal = self._journals[-1]
            staged = journal.staged.get(name)
            if staged is None:  # everything uploaded: copy the object as it is
                self._seq += 1
                staged = journal.staged[name] = _Staged(self._seq, None, b"", None)
            staged.snap = len(staged.tail)

    def _take_snapshot(self, name: str, path: str) -> None:
        """(upload thread, under the file's lock) :meth:`snapshot`'s copy; warns once on failure."""
        try:
            self._ops.snapshot(path)
        except Exception as exc:
            self._warn_once(
                "snapshot",
                f"rllog: could not keep a server-side copy of {self.url}/{name} at a checkpoint "
                f"({type(exc).__name__}: {exc}); the rows are safe, but a resume from that checkpoint "
                "uploads the rows before it once more",
            )

    def flush(self, durable: bool = False, timeout: float | None = None) -> None:
        """Upload everything staged before this call and wait for it: a barrier (bytes
        staged after the call starts are not waited for).

        Args:
            durable: raise if not everything was uploaded (else warn once).
            timeout: seconds to wait at most; ``None``: :attr:`flush_timeout`. ``0``
                only kicks the upload thread. Nothing is cancelled when it runs out:
                the bytes stay staged and keep being retried in the background.

        Raises (``durable=True``; with ``durable=False`` it warns once instead):
            StoragePermanentError: the bucket refuses the upload.
            StorageError: not uploaded within ``timeout`` seconds.
            ValueError: ``timeout`` is negative.
        """
        timeout = self._timeout(timeout, self.flush_timeout)
        if self._closed:
            return
        deadline = time.monotonic() + timeout
        with self._state:
            target = self._seq
            self._kicked = True
            self._wake.notify_all()
            self._poke.set()
            while self._uploaded_seq < target:
                start, error = self._last_cycle
                if error is not None and start >= target and isinstance(error, StoragePermanentError):
                    break
                if time.monotonic() >= deadline or not self._thread.is_alive():
                    break
                self._wake.wait(deadline - time.monotonic())
            if self._uploaded_seq >= target:
                return
            error = self._last_cycle[1]
        cls = StoragePermanentError if isinstance(error, StoragePermanentError) else StorageError
        message = (
            f"flush of {self.url} did not complete within {timeout:g} s "
            f"({type(error).__name__ if error else 'still uploading'}: {error}); not yet uploaded: "
            f"{self._describe_pending()}; kept in {self._where()} and retried in the background"
        )
        if durable:
            raise cls(message)
        self._warn_once("flush", "rllog: " + message)

    @staticmethod
    def _timeout(timeout: float | None, default: float) -> float:
        if timeout is None:
            return default
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds or None (the handle's default), got {timeout}")
        return timeout

    def _describe_pending(self) -> str:
        pending = self.pending()
        return ", ".join(f"{name} ({n} bytes)" for name, n in sorted(pending.items())) or "nothing"

    def close(self, timeout: float | None = None) -> None:
        """Upload everything and stop the background thread. Idempotent; a no-op in a
        forked child that never wrote.

        Args:
            timeout: seconds to wait for the final upload; ``None``:
                :attr:`close_timeout`. Past it, retries are abandoned and close
                returns within about one more second; a request still in flight is
                recorded in the journal (its intent), so the next writer checks
                whether it landed before re-sending it.

        Never raises for upload failures: it warns (``RuntimeWarning``) with what was not
        uploaded and where the spill journal keeps it (the next writer of the run on
        this machine uploads it first).

        Raises:
            ValueError: ``timeout`` is negative.
        """
        timeout = self._timeout(timeout, self.close_timeout)
        if self._closed or self._pid != os.getpid():
            return
        deadline = time.monotonic() + timeout
        with self._state:
            self._closing = True
            self._wake.notify_all()
        self._poke.set()
        self._thread.join(timeout)
        if self._thread.is_alive():  # past the timeout: abandon retries, leave a request in flight
            self._stop.set()
            self._poke.set()
            self._thread.join(max(0.0, min(1.0, deadline + 1.0 - time.monotonic())))
        self._pool.shutdown(wait=False)
        with self._state:  # from here the upload thread touches neither the journals nor the bucket
            self._closed = True
            _OPEN_STORAGES.discard(self)
            pending = self.pending()
            for journal in self._journals:
                try:
                    journal.spill.close(not pending)
                except OSError:
                    pass  # the folder is gone: nothing more can be kept there
        if pending:
            warnings.warn(
                f"rllog: closing {self.url} after {timeout:g} s with bytes not uploaded "
                f"({self._last_cycle[1] or 'still uploading'}): {self._describe_pending()}. They are kept in "
                f"{self._where()}; the next writer of this run on this machine (RunLogger(..., resume=True) or "
                "any open of the same URL) uploads them first.",
                RuntimeWarning,
                stacklevel=2,
            )
        else:
            try:
                self._ops.cleanup(own_only=True)
            except Exception:
                pass  # leftover part objects are removed by the next writer after an hour


class _Staged:
    """What one writer has staged for one file: ``base`` (whole new content) or the
    remote file, then ``tail``. ``seq`` orders files for upload; ``epoch`` changes when
    the file is rewritten or removed; ``intent`` is an upload in flight."""

    __slots__ = ("seq", "last", "base", "tail", "intent", "epoch", "marks", "snap")

    def __init__(self, seq: int, base: bytes | None, tail: bytes, intent: tuple[int, int] | None) -> None:
        self.seq = seq  # no staged byte of this file is older than this (a lower bound)
        self.last = seq  # the newest append or write
        self.base = base
        self.tail = bytearray(tail)
        self.intent = intent
        self.epoch = 0
        #: ordered files (:data:`ORDERED_FILES`) only: (seq, tail length after it) per
        #: append, so an upload sends only the appends with nothing older staged elsewhere
        self.marks: list[tuple[int, int]] | None = None
        #: bytes of ``tail`` after which a snapshot of the object is wanted (:meth:`FsspecStorage.snapshot`)
        self.snap: int | None = None

    def empty(self) -> bool:
        return self.base is None and not self.tail and self.snap is None


class _Journal:
    """Staged files of one writer (ours, or a dead one adopted from its spill journal)."""

    __slots__ = ("spill", "staged")

    def __init__(self, spill: Journal) -> None:
        self.spill = spill
        self.staged: dict[str, _Staged] = {}


_OPEN_STORAGES: weakref.WeakSet[FsspecStorage] = weakref.WeakSet()
_EXIT_FIRST: list[Callable[[], None]] = []  # run at exit before open storages are closed
_exit_hook_registered = False


def run_at_exit(callback: Callable[[], None] | None = None) -> None:
    """Make sure open storages are closed (their staged bytes uploaded) at interpreter
    exit, also when the program ends with an uncaught exception and never called close;
    ``callback`` (e.g. closing open loggers) runs first.

    The hook runs in ``threading``'s shutdown, before ``concurrent.futures`` refuses new
    work and before ``atexit`` handlers close HTTP sessions: a plain ``atexit`` hook runs
    too late (s3fs: "cannot schedule new futures after shutdown"; gcsfs: "Session is
    closed"). Falls back to ``atexit`` where that is not available.
    """
    global _exit_hook_registered
    if callback is not None and callback not in _EXIT_FIRST:
        _EXIT_FIRST.append(callback)
    if _exit_hook_registered:
        return
    _exit_hook_registered = True
    import concurrent.futures.thread  # noqa: F401  # its exit hook first, so ours runs before it

    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("no threading._register_atexit")
        register(_close_at_exit)  # callbacks run last-registered first
    except RuntimeError:  # already shutting down, or another Python
        atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    for callback in _EXIT_FIRST:
        try:
            callback()
        except Exception as exc:  # one failure must not keep the storages from closing
            warnings.warn(
                f"rllog: closing at exit failed: {type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=1
            )
    for storage in list(_OPEN_STORAGES):
        storage.close()


def _run_now(fn: Callable[[str], None], name: str) -> Future[None]:
    """``fn(name)`` in this thread, as a finished future."""
    future: Future[None] = Future()
    try:
        fn(name)
        future.set_result(None)
    except Exception as exc:
        future.set_exception(exc)
    return future


def _make_fsspec_storage(url: str, options: dict[str, Any]) -> FsspecStorage:
    return FsspecStorage(url, **options)
