"""code.diff: the state of the training code at the start of a run.

Format (text, UTF-8)::

    # rllog code.diff
    # repository: /home/me/proj
    # commit: 3f2c...e1 (branch main)
    # untracked files (2):
    #   scratch.py
    #   notes/todo.txt
    <output of `git diff HEAD`, staged and unstaged changes together>

When the script is not in a git repository, or git is missing or fails, the file holds
one ``# rllog code.diff: ...`` line that says why. The diff is cut at ``max_bytes``
(default 4 MiB) with a line saying how many bytes were left out.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["code_diff", "script_dir"]

_TIMEOUT = 20.0  # seconds for each git call
_MAX_UNTRACKED = 1000


def script_dir() -> Path:
    """The folder of the running training script (``__main__``), else the working directory."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c") else None)
    if path:
        p = Path(path).resolve()
        if p.exists():
            return p.parent
    return Path.cwd()


def _git(cwd: Path, *args: str) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, timeout=_TIMEOUT, check=True,
        env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
    )
    return out.stdout.decode("utf-8", "replace")


def code_diff(start: Path | None = None, max_bytes: int = 4 << 20) -> bytes:
    """The bytes of code.diff for the repository holding ``start`` (default: :func:`script_dir`).

    Never raises: any failure becomes a note line in the returned text.
    """
    start = start or script_dir()
    if shutil.which("git") is None:
        return b"# rllog code.diff: git is not installed; no code state recorded\n"
    try:
        top = Path(_git(start, "rev-parse", "--show-toplevel").strip())
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        return f"# rllog code.diff: {start} is not in a git repository; no code state recorded\n".encode()
    lines = ["# rllog code.diff", f"# repository: {top}"]
    try:
        commit = _git(top, "rev-parse", "HEAD").strip()
        branch = _git(top, "rev-parse", "--abbrev-ref", "HEAD").strip()
        lines.append(f"# commit: {commit} (branch {branch})")
        diff = _git(top, "diff", "HEAD", "--no-color", "--no-ext-diff")
    except subprocess.CalledProcessError:
        lines.append("# commit: none (the repository has no commits yet)")
        diff = ""
    except (OSError, subprocess.TimeoutExpired) as exc:
        lines.append(f"# git failed: {exc}")
        diff = ""
    try:
        untracked = _git(top, "ls-files", "--others", "--exclude-standard").splitlines()
    except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired):
        untracked = []
    lines.append(f"# untracked files ({len(untracked)}):")
    lines.extend(f"#   {u}" for u in untracked[:_MAX_UNTRACKED])
    if len(untracked) > _MAX_UNTRACKED:
        lines.append(f"#   ... and {len(untracked) - _MAX_UNTRACKED} more")
    if not diff:
        lines.append("# no uncommitted changes to tracked files")
    head = ("\n".join(lines) + "\n").encode()
    body = diff.encode()
    if len(head) + len(body) > max_bytes:
        keep = max(0, max_bytes - len(head))
        cut = len(body) - keep
        body = body[:keep] + f"\n# rllog: diff cut at {max_bytes} bytes; {cut} bytes left out\n".encode()
    return head + body
