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
  Compose takes at most 32 sources; we always send 2.
- S3 (:class:`S3Ops`): below 5 MiB (S3's smallest multipart part) the object is
  rewritten whole with ``If-Match: <etag>`` (upload cost: the file size per flush,
  at most 5 MiB; the content is cached so nothing is downloaded); from 5 MiB on, a
  multipart upload copies the object server-side (``UploadPartCopy``) and adds the new
  bytes as the last part, completed with ``If-Match`` (upload cost: the new bytes;
  4 requests per flush).
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
#: S3's smallest part of a multipart upload, except the last one.
S3_MIN_PART = 5 * 2**20
#: Where part objects live, inside the run; never listed as run files.
PARTS_DIR = ".rllog-parts"

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
        stat = ObjectStat(int(meta["size"]), str(meta["generation"]), int(meta.get("componentCount") or 1))
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

    def _read_gen(self, path: str, stat: ObjectStat) -> bytes:
        bucket, key = self._split(path)
        _headers, data = self.fs.call("GET", "b/{}/o/{}", bucket, key, alt="media", generation=stat.version)
        if len(data) != stat.size:
            raise Conflict(f"{path} is {len(data)} bytes, expected {stat.size}")
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
        for path, info in found.items():
            mtime = info.get("mtime")
            old = mtime is not None and time.time() - mtime.timestamp() > 3600
            if path.startswith(own) or (not own_only and old):
                try:
                    self.fs.rm_file(path)
                except FileNotFoundError:
                    pass


class S3Ops(ObjectOps):
    """S3 through s3fs ``call_s3``: If-Match rewrites below 5 MiB, multipart copy above."""

    min_part = S3_MIN_PART

    def __init__(self, fs: Any, writer_id: str, root: str) -> None:
        super().__init__(fs, writer_id, root)
        fs.retries = 1  # s3fs's own retry loop; our caller retries (our own instance)
        self._cache: dict[str, tuple[str, bytes]] = {}  # path -> (etag, content) we wrote last
        self._lock = threading.Lock()

    def _split(self, path: str) -> dict[str, str]:
        bucket, key = path.split("/", 1)
        return {"Bucket": bucket, "Key": key}

    def forget(self, path: str) -> None:
        with self._lock:
            self._cache.pop(path, None)

    def stat(self, path: str) -> ObjectStat | None:
        try:
            head = self.fs.call_s3("head_object", **self._split(path))
        except FileNotFoundError:
            return None
        return ObjectStat(int(head["ContentLength"]), head["ETag"])

    def put(self, path: str, data: bytes) -> None:
        self.forget(path)
        out = self.fs.call_s3("put_object", Body=data, **self._split(path))
        if len(data) < self.min_part:
            with self._lock:
                self._cache[path] = (out["ETag"], data)

    def append(self, path: str, data: bytes, before_send: Callable[[int], None]) -> None:
        with self._lock:
            cached = self._cache.get(path)
        try:
            if cached is not None:
                etag, old = cached
            else:
                stat = self.stat(path)
                if stat is None:
                    etag, old = "", b""
                elif stat.size < self.min_part:
                    out = self.fs.call_s3("get_object", IfMatch=stat.version, **self._split(path))
                    etag, old = stat.version, self._body(out)
                else:
                    return self._multipart(path, stat, data, before_send)
            if len(old) >= self.min_part:
                self.forget(path)
                return self._multipart(path, ObjectStat(len(old), etag), data, before_send)
            before_send(len(old))
            new = old + data
            condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            out = self.fs.call_s3("put_object", Body=new, **condition, **self._split(path))
        except Exception as exc:
            self.forget(path)
            if isinstance(exc, FileExistsError) or classify(exc) == "conflict":
                raise Conflict(f"{path} changed under us") from exc
            raise
        with self._lock:
            if len(new) < self.min_part:
                self._cache[path] = (out["ETag"], new)

    def _body(self, out: dict[str, Any]) -> bytes:
        import asyncio

        from fsspec.asyn import sync

        async def read() -> bytes:
            async with out["Body"] as stream:
                return await stream.read()

        return (
            sync(self.fs.loop, read) if asyncio.iscoroutinefunction(out["Body"].read) else out["Body"].read()
        )

    def _multipart(
        self, path: str, stat: ObjectStat, data: bytes, before_send: Callable[[int], None]
    ) -> None:
        where = self._split(path)
        upload = self.fs.call_s3("create_multipart_upload", **where)["UploadId"]
        try:
            copied = self.fs.call_s3(
                "upload_part_copy",
                UploadId=upload,
                PartNumber=1,
                CopySource=where,
                CopySourceIfMatch=stat.version,
                **where,
            )
            added = self.fs.call_s3("upload_part", UploadId=upload, PartNumber=2, Body=data, **where)
            parts = [
                {"PartNumber": 1, "ETag": copied["CopyPartResult"]["ETag"]},
                {"PartNumber": 2, "ETag": added["ETag"]},
            ]
            before_send(stat.size)
            self.fs.call_s3(
                "complete_multipart_upload",
                UploadId=upload,
                MultipartUpload={"Parts": parts},
                IfMatch=stat.version,
                **where,
            )
        except BaseException:
            try:
                self.fs.call_s3("abort_multipart_upload", UploadId=upload, **where)
            except Exception:
                pass  # an unfinished upload is removed by the bucket's lifecycle rules
            raise

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
    """Names (relative to ``root``) of the objects under ``root``, part objects
    (``.rllog-parts/``) excluded; empty if nothing is there. Retried as
    :func:`call_with_retry`."""

    def find() -> list[str]:
        try:
            return list(fs.find(root))
        except FileNotFoundError:
            return []

    prefix = root + "/"
    found = call_with_retry(f"list {url}", find)
    return {
        p[len(prefix) :]
        for p in found
        if p.startswith(prefix) and not p[len(prefix) :].startswith(PARTS_DIR + "/")
    }
