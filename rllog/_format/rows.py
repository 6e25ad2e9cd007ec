"""Which metric rows stand when a step repeats: segments, merged rows, superseded rows.

Real metrics files repeat steps for two different reasons, and a reader must tell
them apart (examples from public runs, tested in ``tests/`` on real logs):

- *one step logged in several rows*: tinker-cookbook writes an eval-only row
  (``test/test/env/all/*``) and the train row with the same step; a trailing
  ``final/*`` row repeats the last step; TRL logs ``eval_*`` rows and an
  end-of-training summary row at the step of a train row. Their keys do not overlap.
- *restarts appended to one file*: a crashed or resumed job starts again at an earlier
  step and appends; the steps after it are logged twice, with different values.

- *late rows*: an asynchronous evaluation finishes after training has moved on and
  logs its result for an earlier step (``log_metrics(i - 2, {"test/reward": ...})``
  while step ``i`` trains). Its keys do not overlap the train row's either.

The rule, applied to rows in file order (``step`` is the chosen step column, "the
last step" the highest standing step so far):

1. **Clash.** A row *clashes* with a standing step when that step already holds one
   of the row's keys (other than the step) with a different value (NaN equals NaN).
   It *replays* the step when it has exactly the keys of one of the step's logged
   rows, with the same values.
2. **Segments.** A row whose step is lower than or equal to the last step starts a
   new segment (a restart) only if it clashes with the standing row of its step or
   replays it. A restart re-logs its first step with new timings, so it clashes; a
   deterministic restart re-logs it unchanged, so it replays (both real restarts
   below do); an eval-only row, a summary row or a late evaluation result adds keys
   the step does not have, so it does neither.
3. **Merge.** A row that does not clash is merged into its step (union of keys,
   nothing lost); a late row for a step that has no row yet is inserted in step
   order. The result has one row per step.
4. **Latest segment wins.** A segment starting at step ``s`` supersedes every row of
   earlier segments with step >= ``s``, also steps the new segment has not reached:
   they belong to the abandoned attempt, and splicing them after the new segment's
   last step would join two different training histories.

So the kept rows have strictly increasing steps; superseded rows are kept as they were
logged (unmerged), with their line numbers. Rows without a numeric step take no part
in the rule and are kept at the end, in file order. A resumed job that logs a step
the abandoned attempt skipped (it logged every 10th step, the resume starts at 55)
only clashes at the first step both logged (60); the result is the same, since the
rows 55..59 stand either way and the restart supersedes steps >= 60.

Checked on real data: the resumed run ``train_metrics.with_duplicates.jsonl`` (steps
251..279, then 251..400, replayed unchanged up to 279) resolves to exactly its author's deduplicated file, and the
five sessions of ``bash_codeforces/metrics.jsonl`` (steps 0,0,0,0,1,0) to its last row.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["StepResolver", "nonfinite_cells"]


def _clashes(old: dict[str, Any], new: dict[str, Any], step_key: str) -> bool:
    for k, v in new.items():
        if k != step_key and k in old:
            w = old[k]
            if v != w and not (v != v and w != w):  # NaN equals NaN here
                return True
    return False


class StepResolver:
    """Applies the module's rule to rows fed one at a time (whole files or a growing tail).

    Attributes:
        kept: the standing rows, steps strictly increasing, merged per step.
        superseded: ``(line, row)`` of rows replaced by a later segment, unmerged.
        unstepped: ``(line, row)`` of rows without a numeric step, in file order.
        restarts: ``(line, step)`` where each segment after the first starts.
        merged: how many rows were merged into an earlier row of the same step.
        added: how many rows were added (standing, merged, superseded, unstepped).
        version: bumped on every change, for caches.
    """

    def __init__(self, step_key: str | None) -> None:
        self.step_key = step_key
        self.kept: list[dict[str, Any]] = []
        self._sources: list[list[tuple[int, dict[str, Any]]]] = []
        self.superseded: list[tuple[int, dict[str, Any]]] = []
        self.unstepped: list[tuple[int, dict[str, Any]]] = []
        self.restarts: list[tuple[int, Any]] = []
        self.merged = 0
        self.added = 0
        self.version = 0

    def add(self, line: int, row: dict[str, Any]) -> None:
        """Place one row (``line`` is its 1-based line number, kept for reports)."""
        self.version += 1
        self.added += 1
        key = self.step_key
        step = row.get(key) if key is not None else None
        if key is None or type(step) not in (int, float) or step != step:
            self.unstepped.append((line, row))
            return
        kept, sources = self.kept, self._sources
        if kept and step <= kept[-1][key]:
            i = bisect_left(kept, step, key=lambda r: r[key])
            if kept[i][key] != step:  # a late row for a step with no row yet
                kept.insert(i, row)
                sources.insert(i, [(line, row)])
                return
            replays = any(logged.keys() == row.keys() for _, logged in sources[i])
            if not replays and not _clashes(kept[i], row, key):
                if len(sources[i]) == 1:  # copy before the first merge: the logged row stays as it was
                    kept[i] = dict(kept[i])
                kept[i].update(row)
                sources[i].append((line, row))
                self.merged += 1
                return
            self.restarts.append((line, step))
            for src in sources[i:]:
                self.superseded += src
            del kept[i:], sources[i:]
        kept.append(row)
        sources.append([(line, row)])

    def standing_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """``(line, row)`` of every standing row as logged (not merged), in file order."""
        out = [src for sources in self._sources for src in sources] + self.unstepped
        out.sort(key=lambda lr: lr[0])
        return out

    @property
    def segments(self) -> int:
        """Number of segments (0 for no stepped rows)."""
        return len(self.restarts) + 1 if (self.kept or self.superseded) else 0


def nonfinite_cells(rows: Iterable[Mapping[str, Any]], step_key: str | None = "step") -> dict[str, list[int]]:
    """``{metric: [step, ...]}`` of the NaN/±Inf float values in metric rows (dicts, e.g. ``Run.rows``).

    A missing key or ``null`` is not a NaN: only values the loop logged as NaN/Inf count.
    Rows without an int ``step_key`` value use their position.
    """
    out: dict[str, list[int]] = {}
    for pos, row in enumerate(rows):
        step = row.get(step_key, pos) if step_key else pos
        for key, value in row.items():
            if type(value) is float and not math.isfinite(value):
                out.setdefault(key, []).append(step if isinstance(step, int) else pos)
    return out
