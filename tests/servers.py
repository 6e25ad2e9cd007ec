"""Object-store servers on 127.0.0.1 for tests and benchmarks, started in-process.

- :class:`GcsServer`: gcp-storage-emulator (in-memory). gcsfs reads
  ``STORAGE_EMULATOR_HOST`` when it is imported and stalls ~60 s per call unless
  ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: call :func:`configure_gcs_env` with a
  port from :func:`free_port` *before* anything imports gcsfs (tests/conftest.py does
  it at import time), then start the server on that port.
- :class:`S3Server`: moto's ``ThreadedMotoServer`` used through s3fs
  (``key``/``secret`` ``"testing"``, ``client_kwargs={"endpoint_url": ...}``, no region).
- :class:`FaultProxy`: an HTTP proxy between a client and one of the servers that counts
  requests and uploaded bytes and injects faults on a schedule (status codes such as
  429/503, delays, connections dropped before or after the server saw the request).

Nothing here talks to anything but loopback.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def configure_gcs_env(port: int) -> None:
    """Point gcsfs at a GCS emulator on ``port``; must run before gcsfs is imported."""
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://{HOST}:{port}"
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"


def unique(prefix: str) -> str:
    """A short unique name usable as a bucket name or path part (lowercase, [a-z0-9-])."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class GcsServer:
    """gcp-storage-emulator on 127.0.0.1 (in memory). Ignores preconditions and the
    32-source compose limit, serves one request at a time."""

    scheme = "gs"

    def __init__(self, port: int | None = None) -> None:
        from gcp_storage_emulator.server import create_server

        self.port = port or free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        self._server = create_server(HOST, self.port, in_memory=True)
        self._server.start()

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """Options for ``gcsfs``/``open_storage``; ``endpoint`` overrides (e.g. a proxy)."""
        return {"token": "anon", "endpoint_url": endpoint or self.endpoint}

    def new_bucket(self, prefix: str = "rllog-test") -> str:
        from gcp_storage_emulator.handlers import buckets

        name = unique(prefix)
        buckets.create_bucket(name, self._server._storage)
        return name

    def stop(self) -> None:
        self._server.stop()


class S3Server:
    """moto's ThreadedMotoServer on 127.0.0.1; enforces If-Match/If-None-Match on PUT."""

    scheme = "s3"

    def __init__(self, port: int | None = None) -> None:
        from moto.server import ThreadedMotoServer

        self.port = port or free_port()
        self.endpoint = f"http://{HOST}:{self.port}"
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address=HOST, port=self.port, verbose=False)
        self._server.start()
        self._fs = None

    def storage_options(self, endpoint: str | None = None) -> dict[str, Any]:
        """Options for ``s3fs``/``open_storage``; ``endpoint`` overrides (e.g. a proxy)."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint or self.endpoint},
        }

    def new_bucket(self, prefix: str = "rllog-test") -> str:
        import s3fs

        name = unique(prefix)
        if self._fs is None:
            self._fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options())
        self._fs.mkdir(name)
        return name

    def stop(self) -> None:
        self._server.stop()


# ---------------------------------------------------------------------------- proxy

#: What :class:`FaultProxy` does with one request: ``None`` forwards it; ``("status", 503)``
#: answers 503 without forwarding; ``("delay", 0.5)`` waits then forwards; ``("drop",)``
#: closes the connection without forwarding; ``("drop_after",)`` forwards, then closes
#: the connection without answering (the server did the work, the client cannot know).
Fault = tuple[Any, ...] | None


@dataclass
class ProxyStats:
    """Requests and bytes that went through a :class:`FaultProxy`."""

    requests: int = 0
    upload_bytes: int = 0  # request bodies (PUT/POST payloads), bytes
    download_bytes: int = 0  # response bodies, bytes
    faults: int = 0
    by_method: Counter = field(default_factory=Counter)
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, body bytes)
    responses: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, response body bytes)


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of ``upstream`` (``http://host:port``).

    ``schedule(n, method, path)`` is called for the n-th request (0-based) and returns a
    :data:`Fault`. With ``enforce_generation`` the proxy answers 412 to an upload or
    compose whose ``ifGenerationMatch`` does not hold, as GCS does (the emulator ignores
    preconditions), checking and forwarding under one lock. S3 requests with
    ``If-None-Match`` or ``If-Match`` are forwarded one at a time (moto checks the
    condition, then writes: two at once may both pass; S3 lets one). Counts every
    request in :attr:`stats` (thread-safe); :meth:`reset` zeroes them.
    """

    def __init__(
        self,
        upstream: str,
        schedule: Callable[[int, str, str], Fault] | None = None,
        enforce_generation: bool = False,
    ) -> None:
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.enforce_generation = enforce_generation
        self._cas_lock = threading.Lock()
        self.schedule = schedule or (lambda n, method, path: None)
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes: with Nagle's algorithm on, the body
            # waits for the client's delayed ACK (~40 ms) on a kept-alive connection
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                        if size == 0:
                            return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                with proxy._lock:
                    n = proxy.stats.requests
                    proxy.stats.requests += 1
                    proxy.stats.upload_bytes += len(body)
                    proxy.stats.by_method[self.command] += 1
                    proxy.stats.log.append((self.command, self.path, len(body)))
                fault = proxy.schedule(n, self.command, self.path)
                if fault is not None:
                    with proxy._lock:
                        proxy.stats.faults += 1
                    kind = fault[0]
                    if kind == "status":
                        payload = b'{"error": {"code": %d, "message": "injected fault"}}' % fault[1]
                        self.send_response(fault[1])
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                    if kind == "drop":
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    if kind == "delay":
                        time.sleep(fault[1])
                if proxy.enforce_generation and "ifGenerationMatch=" in self.path:
                    with proxy._cas_lock:  # check and write as one step, as GCS does
                        refused = proxy._generation_mismatch(self.command, self.path)
                        status, headers, payload = (
                            (412, [], b'{"error": {"code": 412}}') if refused else self._forward(body)
                        )
                elif "If-None-Match" in self.headers or "If-Match" in self.headers:
                    with proxy._cas_lock:  # moto checks then writes: two at once may both pass
                        status, headers, payload = self._forward(body)
                else:
                    status, headers, payload = self._forward(body)
                if fault is not None and fault[0] == "drop_after":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                with proxy._lock:
                    proxy.stats.download_bytes += len(payload)
                    proxy.stats.responses.append((self.command, self.path, len(payload)))
                self.send_response(status)
                head = self.command == "HEAD"  # keep the server's Content-Length: it is the size
                for key, value in headers:
                    skip = ("transfer-encoding", "connection", "date", "server")
                    if key.lower() not in skip and (head or key.lower() != "content-length"):
                        self.send_header(key, value)
                if not head:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if not head:
                    self.wfile.write(payload)

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                    headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    return resp.status, resp.getheaders(), resp.read()
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://{HOST}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _generation_mismatch(self, method: str, path: str) -> bool:
        """GCS's ``ifGenerationMatch`` on an upload or compose, which the emulator ignores:
        True when the destination's generation is not the one asked for ("0": absent)."""
        from urllib.parse import parse_qs, quote, unquote, urlsplit

        parts = urlsplit(path)
        query = parse_qs(parts.query)
        want = query["ifGenerationMatch"][0]
        segments = parts.path.split("/")
        bucket = unquote(segments[segments.index("b") + 1])
        if "name" in query:  # media upload: .../b/BUCKET/o?name=KEY
            key = query["name"][0]
        else:  # compose: .../b/BUCKET/o/KEY/compose
            key = unquote(segments[segments.index("o") + 1])
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            conn.request("GET", f"/storage/v1/b/{quote(bucket, safe='')}/o/{quote(key, safe='')}")
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status == 404:
            return want != "0"
        import json

        return want == "0" or str(json.loads(body)["generation"]) != want

    def reset(self) -> None:
        with self._lock:
            self.stats = ProxyStats()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
