"""`rllog spill list|upload|clear` on journals orphaned by a writer that died before its
rows were uploaded (issue 13, "First impression"), against the GCS emulator on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner
from servers import unique

from rllog import read_run
from rllog.cli import main

REPO = Path(__file__).resolve().parents[2]
ROW_BYTES = len(b'{"step": 0, "x": 0.5}\n')

DIE_WITH_ROWS_STAGED = """
import json, os, sys
sys.path.insert(0, {repo!r})
from rllog.storage import FsspecStorage
storage = FsspecStorage({url!r}, flush_interval=3600, **json.loads({options!r}))
for i in range({rows}):
    storage.append("metrics.jsonl", b'{{"step": %d, "x": 0.5}}\\n' % i)
print(json.dumps(storage.pending()), flush=True)
os._exit(0)  # killed before any upload: the rows are only in the spill journal
"""


def _orphan(gcs_server, rows: int) -> str:
    url = f"gs://{gcs_server.new_bucket()}/runs/{unique('run')}"
    script = DIE_WITH_ROWS_STAGED.format(
        repo=str(REPO), url=url, options=json.dumps(gcs_server.storage_options()), rows=rows
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.splitlines()[-1])["metrics.jsonl"] > 0
    return url


def test_list_upload_and_clear_orphaned_journals(gcs_server) -> None:
    runner = CliRunner()
    first, second = _orphan(gcs_server, 7), _orphan(gcs_server, 3)
    listed = runner.invoke(main, ["spill", "list"])
    assert listed.exit_code == 0, listed.output
    for url, rows in ((first, 7), (second, 3)):
        line = next(x for x in listed.output.splitlines() if x.startswith(url))
        assert "orphaned" in line and f"metrics.jsonl ({rows * ROW_BYTES} B)" in line

    uploaded = runner.invoke(main, ["spill", "upload", first])
    assert uploaded.exit_code == 0 and f"{first}: uploaded" in uploaded.output, uploaded.output
    run = read_run(first, **gcs_server.storage_options())
    assert [r["step"] for r in run.rows] == list(range(7))  # adopted as the next writer would

    assert runner.invoke(main, ["spill", "clear", second], input="n\n").exit_code == 1  # asked, refused
    cleared = runner.invoke(main, ["spill", "clear", "--yes", second])
    assert cleared.exit_code == 0 and f"{second}: deleted" in cleared.output, cleared.output
    after = runner.invoke(main, ["spill", "list"]).output
    assert first not in after and second not in after
    missing = runner.invoke(main, ["spill", "upload", second])
    assert missing.exit_code == 2 and "no orphaned spill journal" in missing.output
    assert os.environ["RLLOG_SPILL_DIR"]  # the tests' own folder (conftest), not ~/.cache
