"""The console sink: one line per metrics row, checkpoint and doctor finding, on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, TextIO

from rllog._format.terminal import escape_controls
from rllog._format.vocab import CONSOLE_KEYS

__all__ = ["Console"]


@dataclass
class Console:
    """Print ``step 3 | env/all/reward/total=0.5 | ...`` per row (the keys of
    :data:`rllog._format.vocab.CONSOLE_KEYS`, else the first 6), checkpoints and findings;
    control characters in them are shown escaped (:func:`rllog._format.terminal.escape_controls`).

    Args:
        stream: where to print (default ``sys.stderr`` at the time of each line).
        keys: the keys to show, in order (default: the console vocabulary).
    """

    stream: TextIO | None = None
    keys: tuple[str, ...] = CONSOLE_KEYS
    name: str = "console"

    def __post_init__(self) -> None:
        keys = self.keys
        if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
            raise TypeError(
                f"Console(keys=...) takes a sequence of metric names, e.g. ('loss',); got {keys!r:.80}"
            )
        self.keys = tuple(keys)

    def open(self, run: Any) -> None:
        return None

    def _print(self, line: str) -> None:
        # keys, strings and names come from the job or the model: shown, never obeyed by the terminal
        print(escape_controls(line), file=self.stream or sys.stderr, flush=True)

    def log_metrics(self, step: int, row: dict[str, Any]) -> None:
        parts = [f"step {step}"]
        items = [(k, row[k]) for k in self.keys if row.get(k) is not None] or list(row.items())[:6]
        parts.extend(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items)
        self._print(" | ".join(parts))

    def log_config(self, config: dict[str, Any]) -> None:
        pass

    def log_checkpoint(self, record: dict[str, Any]) -> None:
        self._print(f"checkpoint {record.get('name')} (batch {record.get('batch')})")

    def log_report(self, report: dict[str, Any]) -> None:
        pass

    def log_rollouts(self, rollouts: dict[str, Any]) -> None:
        pass

    def log_finding(self, finding: dict[str, Any]) -> None:
        self._print(f"doctor {finding['severity']}: {finding['message']}")

    def close(self) -> None:
        pass
