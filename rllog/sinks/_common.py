"""Helpers the sinks share."""

from __future__ import annotations

import importlib.util
import math
from typing import Any

__all__ = ["require", "numeric"]


def require(package: str, extra: str) -> None:
    """Raise ImportError with the install line when ``package`` cannot be imported
    (checked without importing it, so construction stays cheap)."""
    if importlib.util.find_spec(package) is None:
        raise ImportError(
            f"report_to={extra!r} needs the {package!r} package, which is not installed: "
            f"pip install 'rllog[{extra}]'"
        )


def numeric(value: Any) -> float | None:
    """``value`` as a float for a scalar chart (bools as 0/1, NaN/±Inf kept), None for
    strings and None."""
    if type(value) is float:
        return value
    if type(value) is int or type(value) is bool:
        f = float(value)
        return f if math.isfinite(f) else None
    return None
