"""Low-level file writing shared by the local storage and the spill journal."""

from __future__ import annotations

import os

__all__ = ["write_all"]


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte of ``data`` is written to ``fd`` (a short write is
    continued, not lost). Raises ``OSError`` as ``os.write`` does."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
