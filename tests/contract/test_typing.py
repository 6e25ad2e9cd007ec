"""The package type-checks and lints clean with the project's own settings (pyproject.toml).

These run the tools the way a developer does, on the whole repository, so a change that
breaks typing or style fails the suite instead of waiting for someone to notice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_mypy_reports_no_errors():
    out = run("mypy", "rllog")
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout


def test_py_typed_ships_with_the_package():
    assert (REPO / "rllog" / "py.typed").is_file()


@pytest.mark.parametrize("command", [("check", "."), ("format", "--check", ".")])
def test_ruff_is_clean(command):
    out = run("ruff", *command)
    assert out.returncode == 0, out.stdout[-5000:] + out.stderr[-2000:]
