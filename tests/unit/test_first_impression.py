"""First impression (issue 13): the suite leaves nothing in the system temp folder, and the
real-data tests have a small byte-for-byte copy of their inputs inside tests/."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from realdata import BUNDLED, FULL, SHARED

from rllog._write.metrics import MetricsWriter
from rllog._write.rollouts import RolloutFiles
from rllog.storage import LocalStorage


class _Refusing(LocalStorage):
    def append(self, name: str, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        raise OSError(28, "No space left on device")


def test_rescue_files_land_in_the_tests_temp_folder(tmp_path: Path, tmp_path_factory) -> None:
    """Rows and rollout summaries a failing backend never took are saved to the temp folder:
    in tests that is one folder under pytest's temp root, never the system /tmp."""
    base = tmp_path_factory.getbasetemp()
    storage = _Refusing(tmp_path / "run")
    notes: list[str] = []
    metrics = MetricsWriter(storage, strict_json=False, console=False, warn=lambda k, m: notes.append(m))
    metrics._fd = None  # go through storage.append, which refuses
    metrics.write(0, {"x": 1.0})
    rows = Path(metrics.rescue().rsplit("saved to ", 1)[1])
    rollouts = RolloutFiles(storage, warn=lambda k, m: notes.append(m))
    rollouts.add("train_iteration_000000_rollout_summaries.jsonl", b"{}\n")
    folder = Path(rollouts.save_elsewhere().rsplit("saved to ", 1)[1])
    assert rows.read_bytes() == b'{"step":0,"x":1.0}\n' and os.listdir(folder)
    for path in (rows, folder, Path(tempfile.gettempdir()), Path(os.environ["RLLOG_SPILL_DIR"])):
        assert path.is_relative_to(base), path


@pytest.mark.skipif(not FULL, reason=f"REALDATA: {SHARED} is missing; nothing to compare the copy with")
def test_the_bundled_real_data_is_a_byte_for_byte_subset() -> None:
    files = [p for p in BUNDLED.rglob("*") if p.is_file() and p.name != "SOURCES.md"]
    assert 5 <= len(files) and sum(p.stat().st_size for p in files) < 400_000
    for p in files:
        assert p.read_bytes() == (SHARED / p.relative_to(BUNDLED)).read_bytes(), p
    sources = (BUNDLED / "SOURCES.md").read_text()
    for repo in {p.relative_to(BUNDLED).parts[1] for p in files}:
        assert repo.replace("__", "/") in sources, repo  # attribution kept
