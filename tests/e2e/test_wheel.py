"""A wheel built from the repo, installed into a fresh virtualenv, imports, finds its
templates and runs ``rllog demo``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: build with the hatchling the test extra installed (no download per run)
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (whl,) = out.glob("rllog-*.whl")
    return whl


def test_wheel_ships_the_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "templates").rglob("*") if p.is_file())
    assert templates, "the repo has no templates"
    for t in templates:
        assert f"rllog/{t}" in names


def test_wheel_in_fresh_venv_imports_and_runs_the_demo(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    # the venv sees the already-installed dependencies, but rllog itself only from the wheel
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    py = venv / "bin" / "python"
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [
            str(py),
            "-c",
            "import json, rllog, pathlib; from rllog import _templates; "
            "print(json.dumps({'file': rllog.__file__, 'templates': str(_templates.template_dir()), "
            "'names': sorted(p.name for p in _templates.template_dir().iterdir())}))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    info = json.loads(probe.stdout)
    assert info["file"].startswith(str(venv)), info  # not the source checkout
    assert info["templates"].startswith(str(venv)) and info["names"], info
    run = tmp_path / "run"
    demo = subprocess.run(
        [str(venv / "bin" / "rllog"), "demo", str(run), "--iterations", "6"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert demo.returncode == 0, demo.stderr
    assert "Done. The run's files are in" in demo.stdout and "index.html" in demo.stdout
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 6
    assert any(run.glob("train_iteration_000000*.html")), sorted(p.name for p in run.iterdir())
