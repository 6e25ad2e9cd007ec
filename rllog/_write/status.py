"""The run status marker (:data:`rllog._format.layout.STATUS_FILE`): written at start and at close.

A reader combines it with the run lock to tell running, finished, failed and crashed
runs apart (see :mod:`rllog._read.status`). Writing it never raises: the marker is a
convenience, the run's data does not depend on it.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
from collections.abc import Callable
from typing import Any

from rllog._format.codec import decode_json, encode_json
from rllog._format.layout import RUN_STATES, STATUS_FILE
from rllog.storage import Storage

__all__ = ["mark_started", "mark_ended"]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _previous(storage: Storage) -> dict[str, Any]:
    try:
        old = decode_json(storage.read(STATUS_FILE))
    except (OSError, ValueError):  # missing, unreadable or damaged: start counting afresh
        return {}
    return old if isinstance(old, dict) else {}


def mark_started(
    storage: Storage, warn: Callable[[str, str], None], read_previous: bool = True
) -> dict[str, Any] | None:
    """Write ``{"state": "running", "starts": previous + 1, ...}``; returns the record (None if not written).

    ``read_previous=False`` (the store did not answer at open: a read would wait out its
    retries) counts afresh, as for an unreadable marker."""
    old = _previous(storage) if read_previous else {}
    starts = old.get("starts")
    now = _now()
    record = {
        "state": "running",
        "starts": (starts if isinstance(starts, int) and not isinstance(starts, bool) else 0) + 1,
        "started_at": now,
        "first_started_at": old.get("first_started_at") or now,
        "ended_at": None,
        "pid": os.getpid(),
        "host": socket.gethostname(),
    }
    return _write(storage, record, warn)


def mark_ended(
    storage: Storage, record: dict[str, Any] | None, state: str, warn: Callable[[str, str], None]
) -> None:
    """Rewrite the marker written by :func:`mark_started` with ``state`` (``finished``/``failed``) and ``ended_at``."""
    if record is None:
        return
    if state not in RUN_STATES:
        raise ValueError(f"run state must be one of {RUN_STATES}, got {state!r}")
    _write(storage, {**record, "state": state, "ended_at": _now()}, warn)


def _write(
    storage: Storage, record: dict[str, Any], warn: Callable[[str, str], None]
) -> dict[str, Any] | None:
    try:
        storage.write(STATUS_FILE, encode_json(record, indent=2) + b"\n")
    except Exception as exc:  # telemetry never kills training
        warn("status", f"could not write {storage.url}/{STATUS_FILE}: {type(exc).__name__}: {exc}")
        return None
    return record
