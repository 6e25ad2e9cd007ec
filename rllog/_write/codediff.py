"""code.diff: the state of the training code at the start of a run.

Format (text; git's bytes for the diff itself)::

    # rllog code.diff
    # host: node-17
    # command: /usr/bin/python train.py lr=3e-5
    # working directory: /home/me/proj
    # python: 3.11.7 (Linux-6.1-x86_64), rllog 0.1.0
    # started: 2026-11-30T12:00:00Z
    # repository: /home/me/proj
    # commit: 3f2c...e1 (branch main)
    # untracked files (2):
    #   scratch.py
    #   notes/todo.txt
    <output of `git diff HEAD`, staged and unstaged changes together>

When the script is not in a git repository, or git is missing or fails, the first line
says why (``# rllog code.diff: ... no code state recorded``), followed by the same
host/command lines. Secrets never reach the file (:mod:`rllog._format.redact`): the
command line's values after secret-looking flags (``--api-key V``, ``--wandb-key=V``)
and secret-shaped words are ``<redacted>``; a diff line holding a secret is replaced by
``<redacted by rllog: the line holds a secret>`` and a ``# secrets: N diff line(s)...``
line says how many; untracked files are listed by name only. The diff is cut at ``max_bytes``
(default 4 MiB) with a line saying how many bytes were left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rllog._format.redact import redact_argv, redact_diff_lines

__all__ = ["code_diff", "script_dir"]

_TIMEOUT = 20.0  # seconds for each git call
_MAX_UNTRACKED = 1000


def script_dir() -> Path:
    """The folder of the training code: the running script's (``__main__``), unless that
    script is part of a Python installation (a console-script entry point such as
    ``rllog`` or ``torchrun`` in ``bin/``, a module in site-packages), then the working
    directory."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (
        sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else None
    )
    if path:
        p = Path(path).resolve()
        if p.exists() and not _in_python_install(p):
            return p.parent
    return Path.cwd()


def _in_python_install(path: Path) -> bool:
    import site
    import sysconfig

    roots = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        *site.getsitepackages(),
        site.getusersitepackages(),
    }
    roots.update(p for p in sysconfig.get_paths().values() if p)
    for root in roots:
        try:
            path.relative_to(Path(root).resolve())
        except (ValueError, OSError):
            continue
        return True
    return False


_ENV = {"GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, timeout=_TIMEOUT, check=True, env={**os.environ, **_ENV}
    )
    return out.stdout.decode("utf-8", "surrogateescape")


def _git_bytes(cwd: Path, limit: int, *args: str) -> tuple[bytes, int]:
    """Up to ``limit`` bytes of a git command's output, read as a stream (a huge diff is
    never held whole), and how many bytes there were in all."""
    with subprocess.Popen(
        ["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **_ENV}
    ) as proc:
        assert proc.stdout is not None
        kept = bytearray()
        total = 0
        try:
            while chunk := proc.stdout.read(1 << 16):
                total += len(chunk)
                if len(kept) < limit:
                    kept += chunk[: limit - len(kept)]
        finally:
            proc.stdout.close()
            proc.wait(timeout=_TIMEOUT)
    return bytes(kept), total


def _context(head: bytes) -> bytes:
    """``head`` followed by where and how the run was started (host, command, Python, time)."""
    import platform
    import shlex
    import time
    from importlib.metadata import PackageNotFoundError, version

    try:
        rllog_version = version("rllog")
    except PackageNotFoundError:
        rllog_version = "unknown"
    lines = [
        f"# host: {platform.node()}",
        f"# command: {shlex.join(redact_argv([sys.executable, *sys.argv]))}",
        f"# working directory: {Path.cwd()}",
        f"# python: {platform.python_version()} ({platform.platform()}), rllog {rllog_version}",
        f"# started: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
    ]
    first, _, rest = head.partition(b"\n")
    return first + b"\n" + "\n".join(lines).encode("utf-8", "surrogateescape") + b"\n" + rest


def _redact_body(body: bytes) -> tuple[bytes, int]:
    """The diff with every line holding a secret replaced (:func:`redact_diff_lines`),
    and how many were."""
    if not body:
        return body, 0
    lines, count = redact_diff_lines(body.split(b"\n"))
    return (b"\n".join(lines), count) if count else (body, 0)


def code_diff(start: Path | None = None, max_bytes: int = 4 << 20) -> bytes:
    """The bytes of code.diff for the repository holding ``start`` (default: :func:`script_dir`).

    The diff is kept as git's bytes (non-UTF-8 sources stay a valid patch) and cut, when
    longer than ``max_bytes``, at the end of a line. Never raises: any failure becomes a
    note line in the returned text.
    """
    start = start or script_dir()
    if shutil.which("git") is None:
        return _context(b"# rllog code.diff: git is not installed; no code state recorded\n")
    try:
        top = Path(_git(start, "rev-parse", "--show-toplevel").strip())
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return _context(
            f"# rllog code.diff: {start} is not in a git repository; no code state recorded\n".encode()
        )
    lines = ["# rllog code.diff", f"# repository: {top}"]
    body, total = b"", 0
    try:
        try:
            commit = _git(top, "rev-parse", "--verify", "HEAD").strip()
        except subprocess.CalledProcessError:
            lines.append(
                "# commit: none (no commits yet); the diff shows the staged files against an empty tree"
            )
            body, total = _git_bytes(
                top, max_bytes, "diff", "--cached", "--no-color", "--no-ext-diff", "--binary"
            )
        else:
            branch = _git(top, "rev-parse", "--abbrev-ref", "HEAD").strip()
            lines.append(
                f"# commit: {commit} ({'detached HEAD' if branch == 'HEAD' else 'branch ' + branch})"
            )
            body, total = _git_bytes(
                top, max_bytes, "diff", "HEAD", "--no-color", "--no-ext-diff", "--binary"
            )
    except (OSError, subprocess.SubprocessError) as exc:
        lines.append(f"# git failed: {exc}")
    try:
        untracked = _git(top, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
        untracked = [u for u in untracked if u]
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        untracked = []
    lines.append(f"# untracked files ({len(untracked)}):")
    lines.extend(f"#   {u}" for u in untracked[:_MAX_UNTRACKED])
    if len(untracked) > _MAX_UNTRACKED:
        lines.append(f"#   ... and {len(untracked) - _MAX_UNTRACKED} more")
    if not total:
        lines.append("# no uncommitted changes to tracked files")
    body, redacted = _redact_body(body)
    if redacted:
        lines.append(
            f"# secrets: {redacted} diff line(s) held a secret-shaped value and were replaced by "
            "'<redacted by rllog: ...>' (the diff no longer applies there)"
        )
    head = _context(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    room = max(0, max_bytes - len(head))
    if max(total, len(body)) > room:
        cut = body.rfind(b"\n", 0, room) + 1  # whole lines only
        body = body[:cut] + f"# rllog: diff cut at {max_bytes} bytes; {total - cut} bytes left out\n".encode()
    return head + body
