"""``python -m rllog._indexjob``: write a run's ``index.html`` in a process of its own.

:meth:`rllog.RunLogger.close` starts it (detached, at low priority) for a run whose
metrics file is larger than ``rllog._run.INLINE_INDEX_BYTES``, so closing a long run
never re-reads it inside the training process. The job reads one pickled mapping from
the file named by its argument (``{"url": run URL or folder, "options": fsspec storage
options}``; a 0600 temp file it deletes at once, so credentials never appear on a
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


if __name__ == "__main__":
    sys.exit(main())
