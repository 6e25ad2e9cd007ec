"""The index tool writes into a bucket run that readers open read-only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import rllog
from rllog import RunLogger
from rllog.index import write_index
from rllog.storage import open_storage


def _run(url: str, options: dict) -> None:
    with RunLogger(url, code_diff=False, index=False, **options) as logger:
        for i in range(4):
            logger.log_metrics(i, {"env/all/reward/total": i / 4})


def test_write_index_into_a_memory_run():
    url = "memory://rllog-test-index/run"
    _run(url, {})
    page_url, _ = write_index(url)
    assert page_url == f"{url}/index.html"
    page = open_storage(url, mode="r").read("index.html")
    assert b"env/all/reward/total" in page


def test_rllog_index_writes_index_html_into_a_gcs_run(gcs_server):
    url = f"gs://{gcs_server.new_bucket()}/runs/r"
    options = gcs_server.storage_options()
    _run(url, options)
    env = dict(os.environ, FSSPEC_GS=json.dumps(options))
    out = subprocess.run(
        [sys.executable, "-m", "rllog", "index", url], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    with rllog.read_run(url, **options) as run:
        assert "index.html" in [name for name, _ in run.files()]
        assert b"env/all/reward/total" in run.storage.read("index.html")
