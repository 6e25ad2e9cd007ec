"""Shared fixtures: object-store servers on 127.0.0.1 and ready-to-use run URLs.

gcsfs reads ``STORAGE_EMULATOR_HOST`` when it is imported, so the GCS emulator's port is
chosen and the environment set here, at import time, before any test imports gcsfs.
Spill files of cloud storages (``RLLOG_SPILL_DIR``) and everything rllog puts in the
system temp folder (rescued rows, unwritten rollout summaries, index-job files) go to
one folder under pytest's own temp root, for this process and its subprocesses
(``TMPDIR``): the suite leaves no ``rllog-*`` debris in /tmp or ``~/.cache``.

Fixtures:

- ``gcs_server`` / ``s3_server`` (session): :class:`servers.GcsServer` /
  :class:`servers.S3Server`; ``.new_bucket()`` makes a fresh bucket,
  ``.storage_options()`` gives the fsspec options.
- ``cloud_url`` (parametrized ``memory``, ``gcs``, ``s3``): ``(url, storage_options)`` of
  a fresh, empty run; pass both to ``open_storage``/``RunLogger``.
- ``storage_url`` (parametrized ``local``, ``memory``, ``gcs``, ``s3``): the same, local
  runs included (``storage_options`` is ``{}`` for them).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from servers import GcsServer, S3Server, configure_gcs_env, free_port, unique

_GCS_PORT = int(os.environ.get("RLLOG_TEST_GCS_PORT") or free_port())
os.environ["RLLOG_TEST_GCS_PORT"] = str(_GCS_PORT)  # subprocesses of tests see the same server
configure_gcs_env(_GCS_PORT)
os.environ.setdefault("S3_UPLOAD_PART_MIN_SIZE", "256")  # moto: small multipart parts, to test them


@pytest.fixture(scope="session", autouse=True)
def _private_temp(tmp_path_factory: pytest.TempPathFactory):
    """The system temp folder and the spill folder, inside pytest's temp root for the session."""
    root = tmp_path_factory.mktemp("system-temp")
    saved = tempfile.tempdir, os.environ.get("TMPDIR"), os.environ.get("RLLOG_SPILL_DIR")
    tempfile.tempdir = os.environ["TMPDIR"] = str(root)
    if not saved[2]:
        os.environ["RLLOG_SPILL_DIR"] = str(root / "spill")
    yield root
    tempfile.tempdir = saved[0]
    for key, value in (("TMPDIR", saved[1]), ("RLLOG_SPILL_DIR", saved[2])):
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def gcs_server():
    server = GcsServer(_GCS_PORT)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def s3_server():
    server = S3Server()
    yield server
    server.stop()


def _cloud(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if kind == "local":
        return str(tmp_path / "run"), {}
    if kind == "memory":
        return f"memory://{unique('rllog-test')}/run", {}
    server = request.getfixturevalue(f"{kind}_server")
    return f"{server.scheme}://{server.new_bucket()}/runs/{unique('run')}", server.storage_options()


@pytest.fixture(params=["memory", "gcs", "s3"])
def cloud_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``(url, storage_options)`` of a fresh run on memory://, the GCS emulator or moto S3."""
    return _cloud(request.param, request, tmp_path)


@pytest.fixture(params=["local", "memory", "gcs", "s3"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """``(url, storage_options)`` of a fresh run on local disk or any cloud backend."""
    return _cloud(request.param, request, tmp_path)


_CLOUD_FIXTURES = {"gcs_server", "s3_server"}
_CLOUD_PARAMS = {"gcs", "s3"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers by kind, so a fast loop can leave the slow kinds out:

    - ``cloud``: under ``tests/cloud/``, or using the GCS emulator or moto S3 (directly or
      through the ``gcs``/``s3`` cases of ``cloud_url``/``storage_url``);
    - ``e2e``: under ``tests/e2e/``, ``tests/integrations/`` (real TRL trainers, Ray, torchrun,
      trackers) or ``tests/browser/`` (pages in a real chromium);
    - ``slow``: every ``cloud`` and ``e2e`` test (``pytest -m "not slow"`` is the fast loop).
    """
    root = Path(__file__).parent
    for item in items:
        kind = Path(str(item.fspath)).resolve().relative_to(root).parts[0]
        params = getattr(getattr(item, "callspec", None), "params", {})
        fixtures = set(getattr(item, "fixturenames", ()))
        cloud = (
            kind == "cloud"
            or bool(fixtures & _CLOUD_FIXTURES)
            or any(params.get(f) in _CLOUD_PARAMS for f in ("cloud_url", "storage_url"))
        )
        if cloud:
            item.add_marker(pytest.mark.cloud)
        e2e = kind in ("e2e", "integrations", "browser")
        if e2e:
            item.add_marker(pytest.mark.e2e)
        if cloud or e2e:
            item.add_marker(pytest.mark.slow)


# --- real data: say loudly when ../shared/realdata is missing (tests/realdata.py) -------------


def pytest_terminal_summary(terminalreporter: Any) -> None:
    from realdata import BUNDLED, FULL, SHARED, SKIP_PREFIX

    if FULL:
        return
    skipped = [
        r for r in terminalreporter.stats.get("skipped", []) if SKIP_PREFIX in str(getattr(r, "longrepr", ""))
    ]
    terminalreporter.write_sep("=", "REAL DATA MISSING", yellow=True, bold=True)
    terminalreporter.write_line(
        f"{SHARED} is not there: the real-data tests read the small copy in {BUNDLED}; "
        f"{len(skipped)} test(s) that need other files were SKIPPED (reason starts with {SKIP_PREFIX!r}). "
        "Put the folder beside the repository to run them all."
    )
