"""Normalise a demo run folder for byte comparison: one SHA-256 per file, with the run's
path, ISO timestamps and the values of ``time/*`` metrics (wall-clock durations) masked,
and the ``metrics_at`` key of checkpoint records taken out (where metrics.jsonl stood,
in bytes: it moves with the wall-clock values in the rows; added after 0.1.0, see
tests/e2e/test_demo_bytes.py).

``code.diff`` (the repository's state), ``.rllog.lock`` and ``run_status.json`` (a pid, a host) and ``index.html`` (it
charts ``time/*``) are left out."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ISO = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?")
SKIP = {".rllog.lock", "code.diff", "index.html", "run_status.json"}  # run_status.json: pid, host
METRICS_AT = re.compile(rb',"metrics_at":\{"bytes":\d+,"last_line_crc32":\d+\}')


def normalise(folder: Path) -> dict[str, str]:
    out = {}
    root = str(folder).encode()
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name in SKIP:
            continue
        data = ISO.sub(b"<T>", p.read_bytes().replace(root, b"<RUN>"))
        if p.name == "checkpoints.jsonl":
            data = METRICS_AT.sub(b"", data)
        if p.name == "metrics.jsonl":
            rows = [json.loads(line) for line in data.splitlines()]
            data = b"".join(
                json.dumps({k: (0 if k.startswith("time/") else v) for k, v in r.items()}).encode() + b"\n"
                for r in rows
            )
        out[str(p.relative_to(folder))] = hashlib.sha256(data).hexdigest()
    return out
