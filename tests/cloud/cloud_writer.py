"""A writer process for crash and many-writer tests (and benchmarks/bench_cloud.py).

    python tests/cloud_writer.py URL OPTIONS_JSON TAG ROWS FLUSH_EVERY [FLUSH_INTERVAL]

Appends ROWS rows ``{"writer": TAG, "i": i, ...}`` to ``metrics.jsonl``; after every
FLUSH_EVERY rows calls ``flush(durable=True)`` and prints ``ACK i`` (every row up to i
is uploaded). Prints ``READY`` once open and ``DONE`` after close. The GCS emulator
environment comes from the parent (tests/conftest.py sets it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rllog.storage import FsspecStorage


def row(tag: str, i: int) -> bytes:
    return b'{"writer": "%s", "i": %d, "loss": %r, "pad": "%s"}\n' % (
        tag.encode(),
        i,
        1.0 / (i + 1),
        b"x" * 40,
    )


def main() -> None:
    url, options, tag, rows, flush_every = (
        sys.argv[1],
        json.loads(sys.argv[2]),
        sys.argv[3],
        *map(int, sys.argv[4:6]),
    )
    interval = float(sys.argv[6]) if len(sys.argv) > 6 else 5.0
    storage = FsspecStorage(url, flush_interval=interval, **options)
    print("READY", flush=True)
    for i in range(rows):
        storage.append("metrics.jsonl", row(tag, i))
        if (i + 1) % flush_every == 0:
            storage.flush(durable=True)
            print(f"ACK {i}", flush=True)
    storage.close()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
