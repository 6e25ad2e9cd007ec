"""``python -m rllog._indexjob``: write a run's ``index.html`` in a process of its own.

:meth:`rllog.RunLogger.close` starts it (detached, at low priority) for a run whose
metrics file is larger than ``rllog._run.INLINE_INDEX_BYTES``, so closing a long run
never re-reads it inside the training process. The job reads one pickled mapping from
the file named by its argument (``{"url": run URL or folder, "options": fsspec storage
options, "after": pid of the previous job to wait for, or None}``; a 0600 temp file it deletes at once, so credentials never appear on a
command line), writes the page through a writer storage
without a spill journal, and exits. A failure is printed to stderr as one line (the run's
data is untouched; ``rllog index RUN`` writes the page later).
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

__all__ = ["main"]


def main() -> int:
    """Run the job; the exit status is 0 when the page was written, else 1."""
    with open(sys.argv[1], "rb") as f:
        job: dict[str, Any] = pickle.load(f)  # written by RunLogger.close, readable only by its user
    os.unlink(sys.argv[1])
    url = job["url"]
    _wait_for(job.get("after"))
    try:
        os.nice(10)
    except OSError:  # a platform or sandbox without nice: run at normal priority
        pass
    from rllog.index import write_index
    from rllog.storage import open_storage

    options = dict(job["options"])
    if "://" in url:
        options["spill"] = False
    storage = open_storage(url, **options)
    try:
        write_index(storage)
    except Exception as exc:  # one line for the user's terminal, never a traceback into their job's log
        print(f"rllog: could not write index.html for {url}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        try:
            storage.close()
        except OSError as exc:
            print(f"rllog: closing {url} after writing index.html failed: {exc}", file=sys.stderr)
    return 0


def _wait_for(pid: int | None, limit: float = 3600.0) -> None:
    """Wait (at most ``limit`` seconds) until the previous index job of the run, ``pid``, has exited:
    two jobs never write one run's index.html at once."""
    import time

    deadline = time.monotonic() + limit
    while pid is not None and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:  # gone (or no longer ours)
            return
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
