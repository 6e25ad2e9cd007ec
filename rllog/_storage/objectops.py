"""Backend operations behind FsspecStorage: how one object grows on each object store.

Object stores cannot append. Each backend here implements :meth:`ObjectOps.append`
(add bytes at the end of one object) so that the bytes uploaded are those of the new
rows, and so that two writers appending to one object never lose each other's rows:

- GCS (:class:`GcsOps`): the new bytes go to a part object (one per writer and file,
  overwritten each flush, deleted at close) and a server-side compose
  ``[object, part] -> object`` adds it, with ``ifGenerationMatch`` on the object so a
  concurrent writer's compose makes ours fail with 412 and retry on top of theirs.
  Upload cost: the new bytes; 2 requests per flush (part PUT, compose). A composite
  object may hold at most 1,024 components: before the next compose would pass
  ``max_components`` (1,000), the object is re-based (downloaded and uploaded whole
  once, with the generation precondition), so 1 flush in ~1,000 costs the file size.
  Compose takes at most 32 sources; we always send 1 or 2. A cut (resume) starts from
  the file's snapshot, a server-side copy taken at the last checkpoint
  (:meth:`GcsOps.snapshot`), when it is a prefix of the object: the kept rows are not
  uploaded again; else the prefix is streamed back.
- S3 (:class:`S3Ops`): S3 cannot append or join objects under 5 MiB server-side, so
  each flush uploads its bytes as a new immutable segment object (``If-None-Match: *``
  on its offset: of two writers one wins, the other re-lists and goes after it), folded
  server-side (``UploadPartCopy``) into a bounded chunk; readers join the object and its
  segments; close composes them into one plain object. Upload cost: the new bytes,
  plus the file's first 5 MiB once more (a file under 5 MiB: once more at close), the
  least S3 allows; 3 to 8 requests per flush whatever the file's size.
- Anything else (``memory://``, other fsspec backends, :class:`GenericOps`): read the
  whole object and write it back. Correct for one writer per process (``memory://`` is
  guarded by a process-wide lock); costs the file size per flush.

Errors are sorted by :func:`classify` into ``"conflict"`` (a precondition failed:
retry at once), ``"permanent"`` (no bucket, no permission: retrying will not help) and
``"transient"`` (everything else: 429, 5xx, timeouts, resets; retry with backoff).
:func:`call_with_retry` is the read path's short retry loop, shared by the staged
(writer) and read-only storages.
"""

from __future__ import annotations

import hashlib
import threading
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rllog.errors import StorageError, StoragePermanentError

_T = TypeVar("_T")

#: GCS limits (https://cloud.google.com/storage/docs/composite-objects).
GCS_MAX_COMPONENTS = 1024
GCS_MAX_COMPOSE_SOURCES = 32
#: Bytes per request when a cut streams an object's prefix back to GCS (a multiple of
#: the 256 KiB that resumable uploads require of every chunk but the last).
GCS_CUT_CHUNK = 8 * 2**20
#: S3's smallest part of a multipart upload, except the last one.
S3_MIN_PART = 5 * 2**20
#: Where part objects live, inside the run; never listed as run files.
PARTS_DIR = ".rllog-parts"
#: Where S3 segment objects live, inside :data:`PARTS_DIR` (see :class:`S3Ops`).
SEGMENTS_DIR = "segments"
#: Where GCS snapshots live, inside :data:`PARTS_DIR` (see :meth:`GcsOps.snapshot`); one
#: object per file, shared by the run's writers, kept at close.
SNAPSHOTS_DIR = "snapshots"

_PERMANENT_S3_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "NoSuchBucket",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccountProblem",
    "InvalidBucketName",
}


class Conflict(Exception):
    """Another writer changed the object between our read of it and our write."""


@dataclass
class ObjectStat:
    size: int  # bytes
    version: str  # GCS generation / S3 ETag; "" when the backend has none
    components: int = 1  # GCS component count
    crc32c: str = ""  # GCS: base64 of the big-endian CRC-32C of the whole object; "" when unknown


#: botocore/google-auth errors that come before any request reaches the server
_PERMANENT_CLIENT_ERRORS = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "ParamValidationError",
        "InvalidBucketName",
        "DefaultCredentialsError",
        "RefreshError",
    }
)


def classify(exc: BaseException) -> str:
    """``"conflict"``, ``"permanent"`` or ``"transient"`` for an exception from a backend."""
    if isinstance(exc, Conflict):
        return "conflict"
    if isinstance(exc, (TypeError, AttributeError, NameError, AssertionError, ImportError)):
        return "permanent"  # a bug or a bad option: retrying will not help
    if any(type(e).__name__ in _PERMANENT_CLIENT_ERRORS for e in (exc, exc.__cause__, exc.__context__)):
        return "permanent"  # no credentials, an invalid bucket name: no retry fixes them
    code = _s3_code(exc)
    if code == "PreconditionFailed" or code == "ConditionalRequestConflict":
        return "conflict"
    if code in _PERMANENT_S3_CODES or isinstance(exc, PermissionError):
        return "permanent"
    status = getattr(exc, "code", None)  # gcsfs HttpError
    if isinstance(status, int) and status in (401, 403):
        return "permanent"
    if isinstance(exc, FileExistsError):
        return "conflict"
    message = str(exc)
    if isinstance(exc, OSError) and message.startswith("Forbidden"):  # gcsfs 403
        return "permanent"
    if isinstance(exc, ValueError) and message.startswith("Bad Request"):
        return "permanent"
    return "transient"


def call_with_retry(what: str, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``, retried up to 5 attempts (~3 s of exponential backoff with jitter) on
    transient errors.

    Raises:
        FileNotFoundError: as ``fn`` raised it (never retried).
        StoragePermanentError: ``fn`` failed with a permanent error (see :func:`classify`).
        StorageError: ``fn`` still failed after the last attempt; the message starts
            with ``what`` (which should name the URL).
    """
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

    try:
        return Retrying(
            retry=retry_if_exception(
                lambda e: not isinstance(e, FileNotFoundError) and classify(e) != "permanent"
            ),
            wait=wait_exponential(multiplier=0.2, max=5) + wait_random(0, 0.2),
            stop=stop_after_attempt(5),
            reraise=True,
        )(fn, *args)
    except FileNotFoundError:
        raise
    except Exception as exc:
        cls = StoragePermanentError if classify(exc) == "permanent" else StorageError
        raise cls(f"{what} failed: {type(exc).__name__}: {exc}") from exc


def _s3_code(exc: BaseException) -> str | None:
    for e in (exc, exc.__cause__):
        response = getattr(e, "response", None)
        if isinstance(response, dict):
            return response.get("Error", {}).get("Code")
    return None


class ObjectOps:
    """Read and write whole objects, append to one; see the module docstring for costs.

    Paths are fsspec paths (``bucket/key``). Every method makes one attempt (the
    backend's own retries are off); the caller retries by :func:`classify`.
    """

    def __init__(self, fs: Any, writer_id: str, root: str) -> None:
        self.fs = fs
        self.writer_id = writer_id
        self.root = root

    def stat(self, path: str) -> ObjectStat | None:
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return ObjectStat(int(info["size"]), "")

    def read(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def read_range(self, path: str, start: int, end: int | None) -> bytes:
        return self.fs.cat_file(path, start=start, end=end)

    def put(self, path: str, data: bytes) -> None:
        """Replace the object with ``data`` in one request (atomic)."""
        self.fs.pipe_file(path, data)
        self.forget(path)

    def append(self, path: str, data: bytes, before_send: Callable[[int], None]) -> None:
        """Add ``data`` at the end of the object, creating it if missing.

        ``before_send(size_before)`` is called just before the request that commits the
        bytes, with the object size they land after, so that after an ambiguous failure
        (the request may or may not have happened) the caller can check
        ``read_range(path, size_before, size_before + len(data)) == data``.
        Raises :class:`Conflict` when another writer got there first.
        """
        with _MEMORY_LOCK:
            old = self.read(path) if self.fs.isfile(path) else b""
            before_send(len(old))
            self.fs.pipe_file(path, old + data)

    def remove(self, path: str) -> None:
        self.fs.rm_file(path)
        self.forget(path)

    def cut(self, path: str, size: int, then: bytes = b"") -> None:
        """Replace the object with its first ``size`` bytes followed by ``then``, atomically
        (a reader sees the old object or the new one). Idempotent: done twice, it gives the
        same object, so a retry after an ambiguous failure is safe. Here: read the prefix
        and write it back (memory holds it); :class:`S3Ops` and :class:`GcsOps` do better.

        Raises:
            FileNotFoundError: no such object.
            ValueError: ``size`` is negative or larger than the object.
        """
        with _MEMORY_LOCK:
            old = self.read(path)
            if not 0 <= size <= len(old):
                raise ValueError(f"cannot cut {path} ({len(old)} bytes) to {size} bytes")
            self.fs.pipe_file(path, old[:size] + then)
        self.forget(path)

    #: whether :meth:`snapshot` does anything (GCS only)
    snapshots = False

    def snapshot(self, path: str) -> None:
        """Keep a server-side copy of the object as it is now, which a later :meth:`cut`
        to at least its size starts from instead of sending its bytes again. Here:
        nothing (S3 cuts server-side anyway; other backends rewrite whole)."""

    def forget(self, path: str) -> None:
        """Drop anything cached about ``path`` (after it was replaced or removed)."""

    def probe(self) -> None:
        """Check, at open, that the bucket is there and readable; raise if not."""
        bucket = self.root.split("/", 1)[0]
        if self.fs.protocol and "memory" not in self.fs.protocol and not self.fs.exists(bucket):
            raise FileNotFoundError(f"bucket {bucket!r} does not exist")

    def cleanup(self, own_only: bool) -> None:
        """Delete part objects: this writer's, or also others' older than an hour."""


_MEMORY_LOCK = threading.Lock()


class GcsOps(ObjectOps):
    """GCS through gcsfs internals (``_call``): compose with generation preconditions."""

    max_components = GCS_MAX_COMPONENTS - 24  # re-base with room to spare

    def __init__(self, fs: Any, writer_id: str, root: str) -> None:
        super().__init__(fs, writer_id, root)
        # one attempt per call: our caller retries with backoff and keeps the rows
        raw = getattr(type(fs)._request, "__wrapped__", None)
        if raw is not None:
            fs._request = types.MethodType(raw, fs)
        self._known: dict[str, ObjectStat] = {}  # what our last write returned, per path
        self._lock = threading.Lock()

    def _split(self, path: str) -> tuple[str, str]:
        bucket, key = path.split("/", 1)
        return bucket, key

    def _resource(self, path: str, meta: dict[str, Any]) -> ObjectStat:
        stat = ObjectStat(
            int(meta["size"]),
            str(meta["generation"]),
            int(meta.get("componentCount") or 1),
            str(meta.get("crc32c") or ""),
        )
        with self._lock:
            self._known[path] = stat
        return stat

    def forget(self, path: str) -> None:
        with self._lock:
            self._known.pop(path, None)

    def stat(self, path: str) -> ObjectStat | None:
        bucket, key = self._split(path)
        try:
            meta = self.fs.call("GET", "b/{}/o/{}", bucket, key, json_out=True)
        except FileNotFoundError:
            return None
        return self._resource(path, meta)

    def _upload(self, path: str, data: bytes, **preconditions: Any) -> ObjectStat:
        bucket, key = self._split(path)
        meta = self.fs.call(
            "POST",
            f"{self.fs._location}/upload/storage/v1/b/{{}}/o",
            bucket,
            uploadType="media",
            name=key,
            headers={"Content-Type": "application/octet-stream"},
            data=data,
            json_out=True,
            **preconditions,
        )
        return self._resource(path, meta)

    def put(self, path: str, data: bytes) -> None:
        if not data:  # an empty object: gcsfs' own upload (the GCS emulator drops an empty media upload)
            self.fs.pipe_file(path, b"")
            self.forget(path)
            return
        self._upload(path, data)

    def _part_path(self, path: str) -> str:
        bucket, key = self._split(path)
        digest = hashlib.sha1(key.encode()).hexdigest()[:16]
        return f"{bucket}/{self.root.split('/', 1)[1]}/{PARTS_DIR}/{self.writer_id}/{digest}"

    def append(self, path: str, data: bytes, before_send: Callable[[int], None]) -> None:
        with self._lock:
            stat = self._known.get(path)
        if stat is None:
            stat = self.stat(path)
        try:
            if stat is None:
                before_send(0)
                self._upload(path, data, ifGenerationMatch="0")
            elif stat.components + 1 > self.max_components:
                old = self._read_gen(path, stat)
                before_send(stat.size)
                self._upload(path, old + data, ifGenerationMatch=stat.version)
            else:
                self._compose(path, stat, data, before_send)
        except FileExistsError as exc:  # gcsfs raises it for 412 Precondition Failed
            self.forget(path)
            raise Conflict(f"{path} changed under us") from exc
        except Exception:
            self.forget(path)
            raise

    snapshots = True

    def _snapshot_path(self, path: str) -> str:
        """``<run>/.rllog-parts/snapshots/<quoted name>``: named by the file's name in the
        run, so a copy of the run keeps its snapshots."""
        from urllib.parse import quote

        name = path[len(self.root) + 1 :]
        return f"{self.root}/{PARTS_DIR}/{SNAPSHOTS_DIR}/{quote(name, safe='')}"

    def snapshot(self, path: str) -> None:
        """Copy the object server-side to its snapshot
        (``<run>/.rllog-parts/snapshots/<quoted name>``, replacing the previous one):
        one compose with the object as its only source, pinned to the generation our last
        write of it returned (``objectPreconditions.ifGenerationMatch``: if another writer
        composed onto it since, 412 and nothing is copied). Nothing is uploaded; the copy
        is billed as storage. An empty or missing object is not copied. One attempt."""
        with self._lock:
            stat = self._known.get(path)
        if stat is None:
            stat = self.stat(path)
        if stat is None or stat.size == 0:
            return
        bucket, key = self._split(path)
        target = self._split(self._snapshot_path(path))[1]
        self.fs.call(
            "POST",
            "b/{}/o/{}/compose",
            bucket,
            target,
            headers={"Content-Type": "application/json"},
            json={
                "kind": "storage#composeRequest",
                "sourceObjects": [{"name": key, "objectPreconditions": {"ifGenerationMatch": stat.version}}],
                "destination": {"name": target, "bucket": bucket, "contentType": "application/octet-stream"},
            },
            json_out=True,
        )

    def cut(self, path: str, size: int, then: bytes = b"") -> None:
        """GCS cannot copy a byte range server-side (compose and rewrite take whole
        objects). When the object's snapshot (:meth:`snapshot`, taken at the last
        checkpoint) is a prefix of the object no longer than ``size``, the cut sends only
        the bytes after it: bytes ``[snapshot size, size)`` and ``then`` go to a part
        object (one upload, or a resumable one in :data:`GCS_CUT_CHUNK` pieces), and one
        compose ``[snapshot, part] -> object`` with ``ifGenerationMatch`` replaces the
        object. The snapshot is checked, not trusted: the object's CRC-32C must be that
        of the snapshot (its CRC-32C, as GCS keeps it) continued over the object's bytes
        after it, which are read for that (the rows after the checkpoint: what resume
        reads anyway). Otherwise (no snapshot, a longer or stale one, no CRC-32C) the
        first ``size`` bytes are streamed back: ranged reads of the object's current
        generation, :data:`GCS_CUT_CHUNK` bytes at a time, into one resumable upload that
        replaces the object with ``ifGenerationMatch``; the bytes cross the network
        twice, and a stale snapshot is deleted afterwards. Either way atomic (a
        concurrent writer's compose makes it fail with :class:`Conflict`); memory holds
        one chunk and ``then``. A prefix of at most one chunk is one read and one upload."""
        stat = self.stat(path)
        if stat is None:
            raise FileNotFoundError(path)
        if not 0 <= size <= stat.size:
            raise ValueError(f"cannot cut {path} ({stat.size} bytes) to {size} bytes")
        if size == stat.size and not then:
            return
        try:
            snap, middle, stale = self._usable_snapshot(path, stat, size)
            if snap is not None:
                self._cut_on_snapshot(path, stat, size, then, snap, middle)
                return
            if size + len(then) <= GCS_CUT_CHUNK:
                data = self._read_gen(path, stat, 0, size) + then
                if data:
                    self._upload(path, data, ifGenerationMatch=stat.version)
                else:
                    self.put(path, b"")
            else:
                self._stream(path, path, stat, 0, size, then, ifGenerationMatch=stat.version)
        except FileExistsError as exc:  # 412: the object changed under us
            self.forget(path)
            raise Conflict(f"{path} changed while it was cut") from exc
        except Exception:
            self.forget(path)
            raise
        if stale:
            try:
                self.fs.rm_file(self._snapshot_path(path))
            except Exception:
                pass  # checked again (and refused) by the next cut

    def _usable_snapshot(
        self, path: str, stat: ObjectStat, size: int
    ) -> tuple[ObjectStat | None, bytes | None, bool]:
        """``(snapshot, middle, stale)``: the snapshot's stat when it is a prefix of
        generation ``stat.version`` of the object no longer than ``size`` (else None),
        with ``middle`` the object's bytes ``[its size, size)`` when they fit one chunk
        (else None); ``stale`` when there is a snapshot that is not such a prefix (the
        cut deletes it). Reads the object's bytes after the snapshot once."""
        snap = self.stat(self._snapshot_path(path))
        if snap is None or not stat.crc32c or not snap.crc32c:
            return None, None, False  # none, or nothing to check it with
        if snap.size > size:
            return None, None, True
        try:
            import base64

            import google_crc32c
        except ImportError:  # pragma: no cover - gcsfs needs google-cloud-storage, which needs it
            return None, None, False
        crc = int.from_bytes(base64.b64decode(snap.crc32c), "big")
        keep = size - snap.size <= GCS_CUT_CHUNK
        middle: list[bytes] = []
        pos = snap.size
        while pos < stat.size:
            end = min(stat.size, pos + GCS_CUT_CHUNK)
            data = self._read_gen(path, stat, pos, end)
            crc = google_crc32c.extend(crc, data)
            if keep and pos < size:
                middle.append(data[: size - pos])
            pos = end
        if base64.b64encode(crc.to_bytes(4, "big")).decode() != stat.crc32c:
            return None, None, True
        return snap, b"".join(middle) if keep else None, False

    def _cut_on_snapshot(
        self, path: str, stat: ObjectStat, size: int, then: bytes, snap: ObjectStat, middle: bytes | None
    ) -> None:
        """The cut of :meth:`cut` from the snapshot ``snap`` (checked): ``middle`` is bytes
        ``[snap.size, size)`` of the object, or None to stream them."""
        bucket, key = self._split(path)
        sources: list[dict[str, Any]] = [
            {
                "name": self._split(self._snapshot_path(path))[1],
                "objectPreconditions": {"ifGenerationMatch": snap.version},
            }
        ]
        rest = size - snap.size + len(then)
        if rest:
            part = self._part_path(path)
            if middle is not None and rest <= GCS_CUT_CHUNK:
                self._upload(part, middle + then)
            else:
                self._stream(part, path, stat, snap.size, size, then)
            sources.append({"name": self._split(part)[1]})
        meta = self.fs.call(
            "POST",
            "b/{}/o/{}/compose",
            bucket,
            key,
            ifGenerationMatch=stat.version,
            headers={"Content-Type": "application/json"},
            json={
                "kind": "storage#composeRequest",
                "sourceObjects": sources,
                "destination": {"name": key, "bucket": bucket, "contentType": "application/octet-stream"},
            },
            json_out=True,
        )
        new = self._resource(path, meta)
        if "componentCount" not in meta:  # the emulator does not count; we do
            new.components = snap.components + len(sources) - 1

    def _stream(
        self, dest: str, path: str, stat: ObjectStat, start: int, size: int, then: bytes, **preconditions: Any
    ) -> None:
        """Create ``dest`` from bytes ``[start, size)`` of generation ``stat.version`` of
        ``path`` followed by ``then``: one resumable upload, :data:`GCS_CUT_CHUNK` bytes
        a request (ranged reads of the same size), under ``preconditions``."""
        bucket, key = self._split(dest)
        total = size - start + len(then)
        headers, _ = self.fs.call(
            "POST",
            f"{self.fs._location}/upload/storage/v1/b/{{}}/o",
            bucket,
            uploadType="resumable",
            name=key,
            json={"name": key, "contentType": "application/octet-stream"},
            headers={"X-Upload-Content-Type": "application/octet-stream"},
            **preconditions,
        )
        location = headers["Location"]
        location = location[0] if isinstance(location, list) else location
        body = size - start  # bytes taken from the object; then ``then``
        sent = 0
        while sent < total:
            end = min(total, sent + GCS_CUT_CHUNK)
            chunk = self._read_gen(path, stat, start + sent, start + min(end, body)) if sent < body else b""
            if end > body:
                chunk += then[max(0, sent - body) : end - body]
            last = end == total
            out, text = self.fs.call(
                "PUT",
                location,
                headers={
                    "Content-Range": f"bytes {sent}-{end - 1}/{total if last else '*'}",
                    "Content-Length": str(len(chunk)),
                },
                data=chunk,
            )
            kept = out.get("Range")  # what the server holds so far: "bytes=0-N"
            if last and text:
                import json

                self._resource(dest, json.loads(text))
                return
            sent = int(kept.rsplit("-", 1)[1]) + 1 if kept else 0
        raise StorageError(f"the upload that writes {dest} ended without the object")

    def _read_gen(self, path: str, stat: ObjectStat, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` (default: all) of generation ``stat.version`` of the object."""
        bucket, key = self._split(path)
        end = stat.size if end is None else end
        if end <= start:
            return b""
        headers = {} if (start, end) == (0, stat.size) else {"Range": f"bytes={start}-{end - 1}"}
        _headers, data = self.fs.call(
            "GET", "b/{}/o/{}", bucket, key, alt="media", generation=stat.version, headers=headers
        )
        if len(data) != end - start:
            raise Conflict(f"{path}: read {len(data)} bytes of [{start}, {end}), the object changed")
        return data

    def _compose(self, path: str, stat: ObjectStat, data: bytes, before_send: Callable[[int], None]) -> None:
        bucket, key = self._split(path)
        part = self._part_path(path)
        self._upload(part, data)
        sources = [
            {"name": key, "objectPreconditions": {"ifGenerationMatch": stat.version}},
            {"name": self._split(part)[1]},
        ]
        assert len(sources) <= GCS_MAX_COMPOSE_SOURCES
        before_send(stat.size)
        meta = self.fs.call(
            "POST",
            "b/{}/o/{}/compose",
            bucket,
            key,
            ifGenerationMatch=stat.version,
            headers={"Content-Type": "application/json"},
            json={
                "kind": "storage#composeRequest",
                "sourceObjects": sources,
                "destination": {"name": key, "bucket": bucket, "contentType": "application/octet-stream"},
            },
            json_out=True,
        )
        new = self._resource(path, meta)
        if "componentCount" not in meta:  # the emulator does not count; we do
            new.components = stat.components + 1

    def probe(self) -> None:
        bucket, _, prefix = self.root.partition("/")
        self.fs.call("GET", "b/{}/o", bucket, prefix=prefix + "/", maxResults="1", json_out=True)

    def cleanup(self, own_only: bool) -> None:
        import time

        parts = f"{self.root}/{PARTS_DIR}"
        try:
            found = self.fs.find(parts, detail=True)
        except FileNotFoundError:
            return
        own = f"{parts}/{self.writer_id}/"
        kept = f"{parts}/{SNAPSHOTS_DIR}/"  # a resume's starting point, whoever wrote it
        for path, info in found.items():
            mtime = info.get("mtime")
            old = mtime is not None and time.time() - mtime.timestamp() > 3600
            if path.startswith(own) or (not own_only and old and not path.startswith(kept)):
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass


@dataclass
class _Piece:
    """One object holding bytes ``[start, end)`` of a file, from byte ``skip`` of the object."""

    kind: str  # "base" (the file's own object), "chunk" or "data" (segment objects)
    key: str  # bucket-relative key
    start: int
    end: int
    skip: int = 0

    @property
    def size(self) -> int:  # bytes in the object
        return self.skip + self.end - self.start


@dataclass
class _Layout:
    """What one file is made of on S3, as listed: its object and its segments."""

    base: _Piece | None
    base_etag: str
    pieces: list[_Piece]  # segment objects, every one listed (stale ones too)
    cover: list[tuple[_Piece, int, int]]  # (piece, logical start, logical end), in order

    @property
    def size(self) -> int:
        return self.cover[-1][2] if self.cover else 0


def _cover(pieces: list[_Piece]) -> list[tuple[_Piece, int, int]]:
    """From byte 0, repeatedly take the piece that holds the next byte and reaches the
    farthest (ties: the object, then a chunk); stop at the first byte no piece holds.

    A data segment is a claim on exactly the offset it starts at, and counts only there
    and only if no chunk or object holds that byte: those were built from the claim
    that stood, so a segment they overlap is either that claim's leftover or void (a
    writer with an old view claimed an offset whose segment had been folded away and
    deleted; it sees this and writes its bytes again at the end). No reader sees it.
    """
    rank = {"base": 1, "chunk": 0}
    ordered = sorted(pieces, key=lambda p: p.start)
    out: list[tuple[_Piece, int, int]] = []
    pos, i = 0, 0
    best: _Piece | None = None  # the object or chunk reaching farthest among those started
    while True:
        claim = None  # the data segment that starts at pos
        while i < len(ordered) and ordered[i].start <= pos:
            p = ordered[i]
            i += 1
            if p.kind == "data":
                claim = p if p.start == pos else claim
            elif best is None or (p.end, rank[p.kind]) > (best.end, rank[best.kind]):
                best = p
        piece = best if best is not None and best.end > pos else claim
        if piece is None or piece.end <= pos:
            return out
        out.append((piece, pos, piece.end))
        pos = piece.end


class S3Ops(ObjectOps):
    """S3 through s3fs ``call_s3``: a file is its object plus immutable segment objects.

    Layout of ``<run>/<name>`` while writers append (keys under
    ``<run>/.rllog-parts/segments/<quoted name>/``, hidden from :func:`list_names`):

    - ``d<start>``: a *data* segment, the bytes one flush appended at byte ``start`` of
      the file, created with ``If-None-Match: *``: the key is the claim on that offset,
      so of two writers appending at the same end one wins and the other gets 412
      (:class:`Conflict`), re-lists, and appends after it.
    - ``c<start>-<end>-<skip>``: a *chunk*, bytes ``[start, end)`` of the file from byte
      ``skip`` of the object, built server-side (``UploadPartCopy``, nothing uploaded)
      from the previous chunk (the whole of it, or its last ``min_part`` bytes once it
      passes ``chunk_max``: readers skip those ``skip`` bytes) and the new data segment,
      which is then deleted. A chunk's name says what it holds, so two writers building
      the same chunk build the same bytes. Chunks exist so that close can compose the
      file from parts of at least ``min_part`` (S3's smallest multipart part, but the
      last). The first one, when the file passes ``min_part`` and no object of that
      size holds its start, is a multipart upload of the file's first ``min_part``
      bytes, uploaded a second time, and a copy of the rest of the new segment.

    The file is read as the *cover* (:func:`_cover`): from byte 0, the piece (the object,
    a chunk, or a data segment exactly where it starts) that holds the next byte and
    reaches farthest. A reader therefore sees every flushed row at any moment, and
    leftovers of a crash (segments already in the object, a chunk not yet deleted) or a
    void claim (an old view's segment at an offset a chunk already holds) change nothing.

    Close (:meth:`cleanup`) composes every file that has segments into one plain object
    (multipart ``UploadPartCopy`` of the object and chunks, ``parts_in_flight`` at a
    time; a file under ``min_part`` is uploaded whole in one PUT), completed with
    ``If-Match`` on the object, then deletes the segments it holds. A writer that dies
    before its close leaves segments that every reader sees and the next writer's close
    composes.

    Cost per flush, flat in the file's size: the new bytes uploaded once; 3 requests
    below ``min_part`` (the PUT, then a list and a HEAD that check the claim: a writer
    whose view is old may claim an offset whose segment was folded or composed away),
    then 4 more (multipart create, 2 part copies, complete) and one batch delete,
    copying at most ``chunk_max`` bytes server-side. The list starts at this writer's
    last chunk (:meth:`_layout`), so sealed chunks (one per ~10 MiB) are not listed again.

    Uploaded in total (object bytes, without request headers and XML): the file's bytes,
    plus its first ``min_part`` bytes once more when it passes ``min_part``, or the
    whole file once more at close when it stays under ``min_part``: ``size +
    min(size, min_part)``, the least S3 allows when each flush is durable and smaller
    than ``min_part`` (docs/FORMATS.md, "S3 appends"). Only a fold that failed (the
    segments after the last chunk at close) adds at most those segments and ``min_part``.
    """

    min_part = S3_MIN_PART
    #: A chunk longer than this (bytes) is sealed; the next starts with its last ``min_part``.
    chunk_max = 3 * S3_MIN_PART
    #: Bytes per part when an object is copied whole (S3 allows at most 5 GiB).
    max_copy_part = 2**30
    #: Parts of one multipart upload (a close's compose) copied at once.
    parts_in_flight = 8

    def __init__(self, fs: Any, writer_id: str, root: str) -> None:
        super().__init__(fs, writer_id, root)
        fs.retries = 1  # s3fs's own retry loop; our caller retries (our own instance)
        self._known: dict[str, _Layout] = {}  # path -> its layout after our last append
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ layout

    def _split(self, path: str) -> dict[str, str]:
        bucket, key = path.split("/", 1)
        return {"Bucket": bucket, "Key": key}

    def _segments(self, path: str) -> str:
        """Bucket-relative prefix of the segments of ``path``."""
        from urllib.parse import quote

        name = path[len(self.root) + 1 :]
        return f"{self.root.split('/', 1)[1]}/{PARTS_DIR}/{SEGMENTS_DIR}/{quote(name, safe='')}/"

    def forget(self, path: str) -> None:
        with self._lock:
            self._known.pop(path, None)

    def _list(self, bucket: str, prefix: str, after: str = "") -> list[dict[str, Any]]:
        """Every object under ``prefix`` (with ``after``: whose key sorts after it)."""
        out: list[dict[str, Any]] = []
        token: dict[str, str] = {"StartAfter": after} if after else {}
        while True:
            page = self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix, **token)
            out.extend(page.get("Contents", []))
            if not page.get("IsTruncated"):
                return out
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def _layout(self, path: str, known: _Layout | None = None) -> _Layout:
        """List the segments and stat the object of ``path``: 2 requests.

        Without ``known`` every segment is listed, sealed chunks included (one per
        ~10 MiB of file until close: one more list request per 1,000). With ``known``
        (this writer's earlier listing) only the keys from its last chunk on are
        listed, so a flush costs the same at any file size; the chunks before that one
        are taken from ``known``: they are sealed, and no writer changes or deletes
        them until a close composes the file, which changes the object's ETag (then
        everything is listed again).
        """
        where = self._split(path)
        prefix = self._segments(path)
        last = next((p for p, _, _ in reversed(known.cover) if p.kind == "chunk"), None) if known else None
        after = ""
        pieces = []
        if known is not None and last is not None:
            after = f"{prefix}c{last.start:016d}"  # chunk keys sort by start, data keys after them
            pieces = [p for p in known.pieces if p.kind == "chunk" and p.start < last.start]
        for item in self._list(where["Bucket"], prefix, after):
            leaf = item["Key"][len(prefix) :]
            try:
                if leaf.startswith("d"):
                    start = int(leaf[1:])
                    pieces.append(_Piece("data", item["Key"], start, start + int(item["Size"])))
                elif leaf.startswith("c"):
                    start, end, skip = (int(v) for v in leaf[1:].split("-"))
                    pieces.append(_Piece("chunk", item["Key"], start, end, skip))
            except ValueError:
                continue  # not ours
        try:
            head = self.fs.call_s3("head_object", **where)
            base: _Piece | None = _Piece("base", where["Key"], 0, int(head["ContentLength"]))
            etag = head["ETag"]
        except FileNotFoundError:
            base, etag = None, ""
        if known is not None and after and etag != known.base_etag:
            return self._layout(path)  # the object changed (a close composed the file): list it all
        return _Layout(base, etag, pieces, _cover(pieces + ([base] if base else [])))

    def stat(self, path: str) -> ObjectStat | None:
        layout = self._layout(path)
        if layout.base is None and not layout.pieces:
            return None
        return ObjectStat(layout.size, layout.base_etag if not layout.pieces else "")

    def _fetch(self, bucket: str, spans: list[tuple[_Piece, int, int]]) -> bytes:
        """The bytes of ``spans`` (piece, logical start, logical end), fetched concurrently."""
        if not spans:
            return b""
        paths = [f"{bucket}/{p.key}" for p, _, _ in spans]
        starts = [p.skip + a - p.start for p, a, _ in spans]
        ends = [p.skip + b - p.start for p, _, b in spans]
        blobs = self.fs.cat_ranges(paths, starts, ends, on_error="raise")
        return b"".join(blobs)

    def read_range(self, path: str, start: int, end: int | None) -> bytes:
        for attempt in range(3):
            layout = self._layout(path)
            if layout.base is None and not layout.pieces:
                raise FileNotFoundError(path)
            stop = layout.size if end is None else min(end, layout.size)
            spans = [(p, max(a, start), min(b, stop)) for p, a, b in layout.cover if a < stop and b > start]
            try:
                return self._fetch(self._split(path)["Bucket"], spans)
            except FileNotFoundError:
                if attempt == 2:
                    raise
                # a writer's close composed the file and deleted a segment we listed: list again
        raise AssertionError("unreachable")

    def read(self, path: str) -> bytes:
        return self.read_range(path, 0, None)

    # ------------------------------------------------------------------ writing

    def _delete(self, bucket: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[i : i + 1000]]
            self.fs.call_s3("delete_objects", Bucket=bucket, Delete={"Objects": batch, "Quiet": True})

    def put(self, path: str, data: bytes) -> None:
        """Replace the file: its segments are deleted first (a reader meanwhile sees the
        old object without them), then one PUT."""
        self.forget(path)
        where = self._split(path)
        stale = [item["Key"] for item in self._list(where["Bucket"], self._segments(path))]
        self._delete(where["Bucket"], stale)
        self.fs.call_s3("put_object", Body=data, **where)

    def remove(self, path: str) -> None:
        self.forget(path)
        where = self._split(path)
        stale = [item["Key"] for item in self._list(where["Bucket"], self._segments(path))]
        self._delete(where["Bucket"], stale)
        try:
            self.fs.call_s3("delete_object", **where)
        except FileNotFoundError:
            if not stale:
                raise

    def cut(self, path: str, size: int, then: bytes = b"") -> None:
        """Server-side: the object becomes bytes ``[0, size)`` of itself, copied by one
        multipart upload of ``UploadPartCopy`` ranges (nothing downloaded or uploaded but
        ``then``), followed by ``then``; completed with ``If-Match`` on the object, so it is
        atomic and a concurrent writer's compose makes it fail. A file that still has
        segments is first composed into its object (:meth:`compose`, also server-side) and
        its segments deleted, so no stale segment can later extend the cut file. Below
        ``min_part`` (S3's smallest part) the prefix is read and sent in one PUT.
        Requests: 4 + one part copy per GiB kept (plus the compose)."""
        self.forget(path)
        where = self._split(path)
        layout = self._layout(path)
        if layout.base is None and not layout.pieces:
            raise FileNotFoundError(path)
        if not 0 <= size <= layout.size:
            raise ValueError(f"cannot cut {path} ({layout.size} bytes) to {size} bytes")
        if layout.pieces:
            if [p.kind for p, _, _ in layout.cover] != ["base"]:
                self.compose(path)  # the whole file in its object; the segments it held are deleted
                layout = self._layout(path)
            self._delete(where["Bucket"], [p.key for p in layout.pieces])  # copies of the object's bytes
            layout = self._layout(path)
            if layout.pieces or layout.base is None:
                raise Conflict(f"{path}: segments appeared while it was cut")
        if size == layout.size and not then:
            return
        condition = {"IfMatch": layout.base_etag}
        if size < self.min_part:
            body = self.fs.cat_file(path, start=0, end=size) if size else b""
            self.fs.call_s3("put_object", Body=body + then, **condition, **where)
        else:
            parts: list[tuple[str, int, int] | bytes] = []
            first = 0
            while first < size:
                step = size - first
                if step > self.max_copy_part:
                    step = min(self.max_copy_part, size - first - self.min_part)
                parts.append((where["Key"], first, first + step))
                first += step
            if then:
                parts.append(then)
            self._multipart(where, parts, **condition)
        self.forget(path)

    def append(self, path: str, data: bytes, before_send: Callable[[int], None]) -> None:
        with self._lock:
            layout = self._known.pop(path, None)
        if layout is None:
            layout = self._layout(path)
        where = self._split(path)
        end = layout.size
        piece = _Piece("data", f"{self._segments(path)}d{end:016d}", end, end + len(data))
        before_send(end)
        try:
            self.fs.call_s3("put_object", Body=data, IfNoneMatch="*", Bucket=where["Bucket"], Key=piece.key)
        except Exception as exc:
            if isinstance(exc, FileExistsError) or classify(exc) == "conflict":
                raise Conflict(f"{path}: another writer appended at byte {end} first") from exc
            raise
        # a writer holding an old view may have claimed an offset whose segment was
        # folded or composed away (and so free again): the file as listed now must read
        # our bytes from our segment, else the claim is void
        layout = self._layout(path, layout)
        if not any(p.key == piece.key for p, _, _ in layout.cover):
            self._delete(where["Bucket"], [piece.key])
            raise Conflict(f"{path}: byte {end} was already part of the file")
        try:  # the rows are safe in the data segment: chaining it into a chunk may fail
            self._chain(path, layout)
        except Exception:
            return  # the next append lists again; close composes whatever is there
        with self._lock:
            self._known[path] = layout

    def _part(
        self, upload: str, where: dict[str, str], number: int, part: tuple[str, int, int] | bytes
    ) -> str:
        """Part ``number`` of ``upload``: ``part`` uploaded (bytes) or copied server-side
        (``(key, first, end)``, a byte range of an object); its ETag."""
        if isinstance(part, bytes):
            out = self.fs.call_s3("upload_part", UploadId=upload, PartNumber=number, Body=part, **where)
            return str(out["ETag"])
        key, first, end = part
        out = self.fs.call_s3(
            "upload_part_copy",
            UploadId=upload,
            PartNumber=number,
            CopySource={"Bucket": where["Bucket"], "Key": key},
            CopySourceRange=f"bytes={first}-{end - 1}",
            **where,
        )
        return str(out["CopyPartResult"]["ETag"])

    def _multipart(
        self, where: dict[str, str], parts: list[tuple[str, int, int] | bytes], **condition: str
    ) -> str:
        """Create ``where`` from ``parts`` (``(key, first, end)`` copied server-side, or
        bytes uploaded) in one multipart upload, ``parts_in_flight`` parts at a time;
        its ETag."""
        from concurrent.futures import ThreadPoolExecutor

        upload = self.fs.call_s3("create_multipart_upload", **where)["UploadId"]
        try:
            numbered = list(enumerate(parts, 1))
            if len(parts) <= 2:  # a flush's fold: no threads
                etags = [self._part(upload, where, n, part) for n, part in numbered]
            else:  # a close: copies take ~0.1 s each on S3, a 10 GB file has ~1,000
                with ThreadPoolExecutor(min(self.parts_in_flight, len(parts))) as pool:
                    etags = list(pool.map(lambda item: self._part(upload, where, *item), numbered))
            out = self.fs.call_s3(
                "complete_multipart_upload",
                UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, 1)]},
                **condition,
                **where,
            )
            return str(out.get("ETag", ""))
        except BaseException:
            try:
                self.fs.call_s3("abort_multipart_upload", UploadId=upload, **where)
            except Exception:
                pass  # an unfinished upload is removed by the bucket's lifecycle rules
            raise

    def _chain(self, path: str, layout: _Layout) -> None:
        """Fold the data segments at the end of ``layout.cover`` into a chunk, one at a
        time (see the class docstring); updates ``layout``."""
        bucket = self._split(path)["Bucket"]
        prefix = self._segments(path)
        while True:
            cover = layout.cover
            i = len(cover)
            while i > 0 and cover[i - 1][0].kind == "data":
                i -= 1
            if i == len(cover):
                return  # nothing left to fold
            anchor = cover[i - 1][0] if i > 0 else None
            if anchor is None or anchor.size < self.min_part:
                if layout.size < self.min_part:
                    return  # a small file: segments only; close uploads it whole
                # the first chunk: the file's first min_part bytes are uploaded again (no
                # object S3 could copy a min_part part from holds them); the rest is copied
                end = layout.size
                where = {"Bucket": bucket, "Key": f"{prefix}c{0:016d}-{end:016d}-{0:016d}"}
                parts = self._parts(bucket, cover)
                if len(parts) == 1 and isinstance(parts[0], bytes):
                    self.fs.call_s3("put_object", Body=parts[0], **where)
                else:
                    self._multipart(where, parts)
                chunk = _Piece("chunk", where["Key"], 0, end)
                self._settle(bucket, layout, chunk, [p for p, _, _ in cover if p.kind != "base"])
                continue
            seg, a_end = cover[i][0], cover[i - 1][2]
            first: tuple[str, int, int]
            if anchor.kind == "chunk" and anchor.size + seg.size <= self.chunk_max:  # grow it
                chunk = _Piece("chunk", "", anchor.start, seg.end, anchor.skip)
                first, gone = (anchor.key, 0, anchor.size), [anchor, seg]
            else:  # seal the anchor (or the object): the new chunk starts with its last min_part bytes
                tail = anchor.skip + a_end - anchor.start
                chunk = _Piece("chunk", "", a_end, seg.end, self.min_part)
                first, gone = (anchor.key, tail - self.min_part, tail), [seg]
            chunk.key = f"{prefix}c{chunk.start:016d}-{chunk.end:016d}-{chunk.skip:016d}"
            self._multipart({"Bucket": bucket, "Key": chunk.key}, [first, (seg.key, 0, seg.size)])
            self._settle(bucket, layout, chunk, gone)

    def _settle(self, bucket: str, layout: _Layout, chunk: _Piece, gone: list[_Piece]) -> None:
        """``chunk`` now holds what ``gone`` held: delete those, update ``layout``."""
        self._delete(bucket, [p.key for p in gone])
        keep = [p for p in layout.pieces if p not in gone] + [chunk]
        layout.pieces[:] = keep
        layout.cover[:] = _cover(keep + ([layout.base] if layout.base else []))

    # ------------------------------------------------------------------ close

    def cleanup(self, own_only: bool) -> None:
        """At close: compose every file of the run that has segments into its object
        (see the class docstring). A file that fails is left as it is (readers still
        see every row) and reported with a ``RuntimeWarning``."""
        import warnings
        from urllib.parse import unquote

        bucket, _, run = self.root.partition("/")
        top = f"{run}/{PARTS_DIR}/{SEGMENTS_DIR}/"
        try:
            names = {item["Key"][len(top) :].split("/", 1)[0] for item in self._list(bucket, top)}
        except Exception as exc:
            warnings.warn(f"rllog: could not list s3://{top} at close: {exc}", RuntimeWarning, stacklevel=2)
            return
        for name in sorted(names):
            path = f"{self.root}/{unquote(name)}"
            try:
                call_with_retry(f"compose s3://{path}", self.compose, path)
            except Exception as exc:
                warnings.warn(
                    f"rllog: could not compose s3://{path} into one object at close ({exc}); every row is "
                    "still readable through rllog, and the next writer's close composes it",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def compose(self, path: str) -> None:
        """Make the object of ``path`` hold the whole file, then delete its segments.

        Raises :class:`Conflict` when another writer replaced the object meanwhile.
        """
        self.forget(path)
        layout = self._layout(path)
        where = self._split(path)
        size = layout.size
        if layout.cover and [p.kind for p, _, _ in layout.cover] != ["base"]:
            condition = {"IfMatch": layout.base_etag} if layout.base else {"IfNoneMatch": "*"}
            if size < self.min_part:
                body = self._fetch(where["Bucket"], layout.cover)
                etag = self.fs.call_s3("put_object", Body=body, **condition, **where)["ETag"]
            else:
                etag = self._multipart(where, self._parts(where["Bucket"], layout.cover), **condition)
            head = self.fs.call_s3("head_object", **where)
            if int(head["ContentLength"]) != size or (etag and head["ETag"] != etag):
                raise Conflict(f"{path} changed while it was composed")
        self._delete(where["Bucket"], [p.key for p in layout.pieces if p.end <= size])

    def _parts(self, bucket: str, cover: list[tuple[_Piece, int, int]]) -> list[tuple[str, int, int] | bytes]:
        """Parts of at least ``min_part`` bytes (but the last) for ``cover``: ranges of
        objects copied server-side, and small pieces joined and uploaded."""
        parts: list[tuple[str, int, int] | bytes] = []
        pending = bytearray()
        for i, (piece, a, b) in enumerate(cover):
            first, end = piece.skip + a - piece.start, piece.skip + b - piece.start
            if pending:
                take = min(end - first, self.min_part - len(pending))
                pending += self._fetch(bucket, [(piece, a, a + take)])
                first, a = first + take, a + take
                if len(pending) >= self.min_part:
                    parts.append(bytes(pending))
                    pending.clear()
            if first == end:
                continue
            if end - first >= self.min_part or (i == len(cover) - 1 and not pending):
                while first < end:
                    step = end - first
                    if step > self.max_copy_part:
                        step = min(self.max_copy_part, end - first - self.min_part)
                    parts.append((piece.key, first, first + step))
                    first += step
            else:
                pending += self._fetch(bucket, [(piece, a, b)])
        if pending:
            parts.append(bytes(pending))
        return parts

    def probe(self) -> None:
        bucket, _, prefix = self.root.partition("/")
        self.fs.call_s3("list_objects_v2", Bucket=bucket, Prefix=prefix + "/", MaxKeys=1)


def make_ops(fs: Any, writer_id: str, root: str) -> ObjectOps:
    """The :class:`ObjectOps` for ``fs`` (by protocol)."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if "gs" in protocols or "gcs" in protocols:
        return GcsOps(fs, writer_id, root)
    if "s3" in protocols or "s3a" in protocols:
        return S3Ops(fs, writer_id, root)
    return ObjectOps(fs, writer_id, root)


def backend_options(protocol: str, options: dict[str, Any], request_timeout: float) -> dict[str, Any]:
    """fsspec options with the backend's own retries off and per-request timeouts on
    (the caller retries, keeping the rows); the user's explicit options win."""
    out = dict(options)
    out.setdefault("skip_instance_cache", True)
    out.setdefault("use_listings_cache", False)
    if protocol in ("gs", "gcs"):
        out.setdefault("requests_timeout", request_timeout)
    elif protocol in ("s3", "s3a"):
        config = dict(out.get("config_kwargs") or {})
        config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        config.setdefault("connect_timeout", request_timeout)
        config.setdefault("read_timeout", request_timeout)
        out["config_kwargs"] = config
    return out


def list_names(fs: Any, root: str, url: str) -> set[str]:
    """Names (relative to ``root``) of the files under ``root``: objects, and S3 files
    whose bytes are so far only segments (:class:`S3Ops`); part and segment objects
    (``.rllog-parts/``) are not listed. Empty if nothing is there. Retried as
    :func:`call_with_retry`."""

    def find() -> list[str]:
        try:
            return list(fs.find(root))
        except FileNotFoundError:
            return []

    from urllib.parse import unquote

    prefix = root + "/"
    segments = f"{PARTS_DIR}/{SEGMENTS_DIR}/"
    names = set()
    for path in call_with_retry(f"list {url}", find):
        name = path[len(prefix) :] if path.startswith(prefix) else ""
        if name.startswith(segments):  # an S3 file that so far is only segments
            names.add(unquote(name[len(segments) :].split("/", 1)[0]))
        elif name and not name.startswith(PARTS_DIR + "/"):
            names.add(name)
    return names
