"""The jinja2 templates shipped with rllog, and one Environment per process.

Templates live in the top-level ``templates/`` folder of the repository; the wheel ships
them as ``rllog/templates``. Autoescaping is on for every template: logged text is always
shown as text.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

__all__ = ["template_dir", "environment"]


@functools.cache
def template_dir() -> Path:
    """The folder holding the templates: inside the installed package, else the source checkout's.

    Raises:
        FileNotFoundError: neither exists (a broken install).
    """
    here = Path(__file__).resolve().parent
    for candidate in (here / "templates", here.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"rllog templates not found in {here / 'templates'} or {here.parent / 'templates'}"
    )


@functools.cache
def environment() -> jinja2.Environment:
    """The process's jinja2 Environment (built on first use; jinja2 is imported here)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
