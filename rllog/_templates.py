"""The jinja2 templates rllog renders (logtree reports, the run index page).

Templates live in the top-level ``templates/`` folder of the source tree; the wheel
ships them as ``rllog/templates`` (pyproject's ``force-include``). :func:`environment`
builds one autoescaping jinja2 Environment per process, on first use, so
``import rllog`` never imports jinja2.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

__all__ = ["templates_dir", "environment"]


def templates_dir() -> Path:
    """``rllog/templates`` inside an installed wheel, else ``templates/`` beside the ``rllog`` package.

    Raises:
        FileNotFoundError: neither folder exists (a broken install).
    """
    package = Path(__file__).resolve().parent
    for candidate in (package / "templates", package.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"rllog templates not found in {package / 'templates'} or {package.parent / 'templates'}")


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The process-wide jinja2 Environment: autoescape on for every template, undefined names raise."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
