"""`RunLogger("gs://...")` with no network is bounded by the documented timeouts (issue 13):
open waits for one probe (``request_timeout``), close for ``5 s`` without progress plus
what FsspecStorage.close documents for an upload in flight (``request_timeout + 5``)."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

from rllog import RunLogger
from rllog._storage.staged import _OPEN_STORAGES
from rllog.errors import StorageError

REQUEST_TIMEOUT = 2.0


@pytest.fixture(params=["drops", "never_answers"])
def dead_endpoint(request) -> Iterator[str]:
    """An endpoint on 127.0.0.1 that accepts connections, then drops them or never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if request.param == "drops":
                conn.close()
            else:
                held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in held:
        conn.close()


def test_open_and_close_are_bounded(dead_endpoint: str) -> None:
    options = {"endpoint_url": dead_endpoint, "token": "anon", "request_timeout": REQUEST_TIMEOUT}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.monotonic()
        logger = RunLogger("gs://no-network/run", code_diff=False, **options)
        opened = time.monotonic() - t0
        logger.log_metrics(0, {"x": 1.0})
        t0 = time.monotonic()
        logger.close()
        closed = time.monotonic() - t0
    assert opened <= REQUEST_TIMEOUT + 2.0, opened  # one probe, no start-up reads after it
    assert closed <= 5.0 + 5.0 + REQUEST_TIMEOUT + 5.0 + 2.0, closed
    assert any("unreachable at open" in w for w in logger.warnings), logger.warnings
    assert any("metrics.jsonl" in w and "not yet uploaded" in w for w in logger.warnings), logger.warnings


def test_resume_with_no_network_fails_at_once(dead_endpoint: str) -> None:
    options = {"endpoint_url": dead_endpoint, "token": "anon", "request_timeout": REQUEST_TIMEOUT}
    t0 = time.monotonic()
    with warnings.catch_warnings(), pytest.raises(StorageError, match="cannot resume .* unreachable"):
        warnings.simplefilter("ignore")
        RunLogger("gs://no-network/run", resume=True, code_diff=False, **options)
    assert time.monotonic() - t0 <= REQUEST_TIMEOUT + 2.0
    # the handle the failed open made is closed, not left to wait out its close timeout at exit
    assert not [s for s in _OPEN_STORAGES if s.url == "gs://no-network/run"]
