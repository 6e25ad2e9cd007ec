"""Shared fixtures: object-store servers on 127.0.0.1 and ready-to-use run URLs.

gcsfs reads ``STORAGE_EMULATOR_HOST`` when it is imported, so the GCS emulator's port is
chosen and the environment set here, at import time, before any test imports gcsfs.
Spill files of cloud storages go to a temporary folder (``RLLOG_SPILL_DIR``), not to
``~/.cache``.

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
os.environ.setdefault("RLLOG_SPILL_DIR", tempfile.mkdtemp(prefix="rllog-test-spill-"))


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
