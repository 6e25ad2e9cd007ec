"""Is a run running, finished, failed or crashed? Read from its own files.

Sources: ``run_status.json`` (written by :class:`rllog.RunLogger` at start and close, see
:data:`rllog._format.layout.STATUS_FILE`) and, for local runs, the writer's ``flock`` on
``.rllog.lock``: a reader probes it with a non-blocking shared lock, which it releases at
once (it never writes the file).

States:
    ``running``: the marker says running and the lock is held (local), or the marker says
        running and the run is in a bucket (no lock there; ``live`` is then None).
    ``finished`` / ``failed``: the writer closed the run (``failed``: the ``with`` block raised).
    ``crashed``: the marker says running but no process holds the lock (the writer was
        killed, or lost power, before close).
    ``unknown``: no marker (a run written by an older rllog or another tool); ``live``
        still says whether a writer holds the lock.
"""

from __future__ import annotations

import os
from typing import Any

from rllog._format.codec import decode_json
from rllog._format.layout import LOCK_FILE, STATUS_FILE
from rllog.storage import LocalStorage, Storage

__all__ = ["run_status", "lock_held"]


def lock_held(storage: Storage) -> bool | None:
    """True when a live writer holds the run's lock, False when nobody does, None where
    there is no lock to probe (object stores)."""
    if not isinstance(storage, LocalStorage):
        return None
    import fcntl

    try:
        fd = os.open(storage.root / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file: no rllog writer ever held it
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def run_status(storage: Storage) -> dict[str, Any]:
    """``{"state", "resumes", "live", "started_at", "first_started_at", "ended_at", "host", "pid"}``.

    ``resumes`` is ``starts - 1`` from the marker (0 without one). Never raises on a
    damaged or missing marker (``state`` is then ``unknown``).
    """
    try:
        marker = decode_json(storage.read(STATUS_FILE))
    except (OSError, ValueError):
        marker = None
    if not isinstance(marker, dict):
        marker = {}
    live = lock_held(storage)
    state = marker.get("state")
    if state == "running" and live is False:
        state = "crashed"
    elif state not in ("running", "finished", "failed"):
        state = "running" if live else "unknown"
    starts = marker.get("starts")
    return {
        "state": state,
        "resumes": max(0, starts - 1) if isinstance(starts, int) and not isinstance(starts, bool) else 0,
        "live": live,
        **{k: marker.get(k) for k in ("started_at", "first_started_at", "ended_at", "host", "pid")},
    }
