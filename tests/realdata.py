"""Where the real-data tests find their inputs.

The full collection is ``../shared/realdata`` beside the repository (50 files, 4.4 MB;
SOURCES.md there). Without it the tests read the small byte-for-byte copy in
``tests/data/realdata`` (a few runs, ~190 KB, same layout, attribution in its SOURCES.md),
and each test whose inputs are not in the copy is skipped with a reason starting
``REALDATA:``; the test summary says how many (``pytest_terminal_summary`` in conftest).
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "realdata"
BUNDLED = Path(__file__).resolve().parent / "data" / "realdata"
FULL = SHARED.is_dir()
REALDATA = SHARED if FULL else BUNDLED
SKIP_PREFIX = "REALDATA:"


def needs(*paths: Path) -> pytest.MarkDecorator:
    """Skip (loudly) when one of ``paths`` is not in the real data found."""
    missing = [p for p in paths if not p.exists()]
    reason = (
        f"{SKIP_PREFIX} {SHARED} is missing and the small copy in tests/data/realdata lacks "
        f"{', '.join(str(p.relative_to(REALDATA)) for p in missing[:2])}"
    )
    return pytest.mark.skipif(bool(missing), reason=reason)


#: for tests that count or cover the whole collection
needs_full = pytest.mark.skipif(
    not FULL, reason=f"{SKIP_PREFIX} {SHARED} is missing; this test covers the whole collection"
)
