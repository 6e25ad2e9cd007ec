"""Low-level file writing shared by the local storage and the spill journal."""

from __future__ import annotations

import os

__all__ = ["write_all", "copy_range"]


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte of ``data`` is written to ``fd`` (a short write is
    continued, not lost). Raises ``OSError`` as ``os.write`` does."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def copy_range(src: int, dst: int, start: int, end: int, at: int) -> None:
    """Copy bytes ``[start, end)`` of the file open as ``src`` to offset ``at`` of ``dst``
    inside the kernel (``copy_file_range``: no byte passes through Python; on Linux a
    page-cache copy, or shared extents on filesystems that can), falling back to
    ``pread``/``pwrite`` in 1 MiB pieces where the call is missing or refused (another
    filesystem, an old kernel). Descriptors' own offsets are not used or moved; ``dst``
    must not be ``O_APPEND``.

    Raises:
        OSError: reading or writing failed, or ``src`` ended before ``end`` (EIO).
    """
    import errno

    while start < end:
        try:
            n = os.copy_file_range(src, dst, end - start, start, at)
        except (AttributeError, OSError) as exc:
            if isinstance(exc, OSError) and exc.errno not in (
                errno.EXDEV,
                errno.ENOSYS,
                errno.EINVAL,
                errno.EOPNOTSUPP,
            ):
                raise
            n = 0
            while start + n < end:  # no kernel copy here: through a bounded buffer
                piece = os.pread(src, min(end - start - n, 1 << 20), start + n)
                if not piece:
                    break
                view = memoryview(piece)
                while view:
                    view = view[os.pwrite(dst, view, at + n + len(piece) - len(view)) :]
                n += len(piece)
        if n == 0:
            raise OSError(errno.EIO, f"source ended at byte {start}, before {end}")
        start, at = start + n, at + n
