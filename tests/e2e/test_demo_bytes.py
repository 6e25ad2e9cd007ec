"""File formats do not drift: the demo with its fixed seed writes the same bytes as the
release before the layered package (0.1.0), except timestamps, paths and wall-clock times.

``data/demo_golden.json`` holds one SHA-256 per file, made with 0.1.0's ``rllog demo``
through :func:`_demo_norm.normalise`. A deliberate format change regenerates it and says
so in the README and docs/FORMATS.md. Changes since 0.1.0: every iteration report page
carries a Content-Security-Policy meta element (issue 13), and its text elements carry the
anchor ids search hits link to (issue 12, docs/FORMATS.md "Anchors in the HTML report");
every checkpoint record rllog writes ends with ``metrics_at`` (where metrics.jsonl stood,
issue 15), which :func:`_demo_norm.normalise` takes out (its byte count moves with the
wall-clock values in the rows); no other byte of any file moved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _demo_norm import normalise

GOLDEN = Path(__file__).parent / "data" / "demo_golden.json"


def test_demo_writes_the_same_bytes_as_before(tmp_path):
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "rllog", "demo", str(run), "--quiet"], check=True, timeout=300)
    want = json.loads(GOLDEN.read_text())
    got = normalise(run)
    assert sorted(got) == sorted(want)
    assert [name for name in want if got[name] != want[name]] == []
    assert (run / "index.html").stat().st_size > 10_000
