"""What a writer tells its user: problems warned about once per kind, facts logged at INFO."""

from __future__ import annotations

import logging
import warnings

__all__ = ["Notes"]


class Notes:
    """The writer's messages for the user, also kept in :attr:`messages` (``RunLogger.warnings``).

    Backend failures repeat (every row of an outage fails the same way); each kind is
    warned about once (``RuntimeWarning``) and later ones of that kind are dropped, so a
    long outage gives one line that says what happens to the data.
    """

    __slots__ = ("messages", "_warned")

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._warned: set[str] = set()

    def warn_once(self, kind: str, message: str) -> None:
        """Warn once per ``kind`` (later messages of that kind are not repeated)."""
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.messages.append(message)
        warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=3)

    def note(self, message: str, problem: bool = True) -> None:
        """Record ``message``; warn when it is a problem, else log it at INFO on the ``rllog`` logger."""
        self.messages.append(message)
        if problem:
            warnings.warn(f"rllog: {message}", RuntimeWarning, stacklevel=4)
        else:
            logging.getLogger("rllog").info(message)
