"""Timers: ``with logger.timer("sample"):`` adds ``time/sample`` (seconds) to the next row.

Nested timers (in the same thread) give ``time/<outer>/<inner>``; a name timed twice
before the row is logged adds up. With ``RunLogger(timing_spans=True)`` each timer also
gives a span ``{"name", "start", "end", "step"}`` (Unix seconds; ``step`` is the step of
the row it went into) in ``timing_spans.jsonl``, the records tinker-cookbook's
``trace`` module writes.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["Timings", "Timer"]

F = TypeVar("F", bound=Callable[..., Any])


class Timings:
    """The durations timed since the last row, and the open timers' names per thread."""

    __slots__ = ("totals", "spans", "keep_spans", "_local")

    def __init__(self, keep_spans: bool) -> None:
        self.totals: dict[str, float] = {}
        self.spans: list[tuple[str, float, float]] = []
        self.keep_spans = keep_spans
        self._local = threading.local()

    def stack(self) -> list[str]:
        try:
            return self._local.stack  # type: ignore[no-any-return]  # a list set below
        except AttributeError:
            self._local.stack = []
            return self._local.stack  # type: ignore[no-any-return]  # a list

    def take(self) -> dict[str, float]:
        """The ``time/...`` keys for the row being logged; starts a new row."""
        totals, self.totals = self.totals, {}
        return totals


class Timer:
    """A context manager and decorator timing one block under ``name`` (see the module docstring).

    Raises:
        ValueError: ``name`` is empty or holds ``/`` at its ends.
    """

    __slots__ = ("_timings", "name", "_key", "_t0", "_w0")

    def __init__(self, timings: Timings, name: str) -> None:
        if not isinstance(name, str) or not name.strip("/") or name != name.strip("/"):
            raise ValueError(
                f"timer name must be a non-empty str without leading or trailing '/', got {name!r}"
            )
        self._timings = timings
        self.name = name

    def __enter__(self) -> Timer:
        stack = self._timings.stack()
        stack.append(self.name)
        self._key = "time/" + "/".join(stack)
        self._w0 = time.time() if self._timings.keep_spans else 0.0
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        dt = time.perf_counter() - self._t0
        timings = self._timings
        timings.stack().pop()
        totals = timings.totals
        totals[self._key] = totals.get(self._key, 0.0) + dt
        if timings.keep_spans:
            timings.spans.append((self._key[5:], self._w0, self._w0 + dt))

    def __call__(self, fn: F) -> F:
        timings, name = self._timings, self.name

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with Timer(timings, name):
                return fn(*args, **kwargs)

        return timed  # type: ignore[return-value]  # same signature
