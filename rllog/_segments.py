"""Which metric rows stand when a step repeats: segments, merged rows, superseded rows.

Real metrics files repeat steps for two different reasons, and a reader must tell
them apart (examples from ``shared/realdata/SOURCES.md``):

- *one step logged in several rows*: tinker-cookbook writes an eval-only row
  (``test/test/env/all/*``) and the train row with the same step; a trailing
  ``final/*`` row repeats the last step; TRL logs ``eval_*`` rows and an
  end-of-training summary row at the step of a train row. Their keys do not overlap.
- *restarts appended to one file*: a crashed or resumed job starts again at an earlier
  step and appends; the steps after it are logged twice, with different values.

The rule, applied to rows in file order (``step`` is the chosen step column):

1. **Segments.** A row starts a new segment (a restart) when its step is lower than
   the previous row's step, or equal to it and it *contradicts* what the segment
   already holds for that step: a key other than the step with a different value
   (NaN equals NaN). A restart re-logs its first step with new timings, so it
   contradicts; an eval-only or summary row does not.
2. **Merge.** A row with the previous row's step that does not contradict it is merged
   into it (union of keys, nothing lost). The result has one row per step.
3. **Latest segment wins.** A segment starting at step ``s`` supersedes every row of
   earlier segments with step >= ``s``, also steps the new segment has not reached:
   they belong to the abandoned attempt, and splicing them after the new segment's
   last step would join two different training histories.

So the kept rows have strictly increasing steps; superseded rows are kept as they were
logged (unmerged), with their line numbers. Rows without a numeric step take no part
in the rule and are kept at the end, in file order.

Checked on real data: the resumed run ``train_metrics.with_duplicates.jsonl`` (steps
251..279, then 251..400) resolves to exactly its author's deduplicated file, and the
five sessions of ``bash_codeforces/metrics.jsonl`` (steps 0,0,0,0,1,0) to its last row.
"""

from __future__ import annotations

from typing import Any

__all__ = ["StepResolver"]


def _contradicts(old: dict[str, Any], new: dict[str, Any], step_key: str) -> bool:
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
        merged: how many rows were merged into a previous row of the same step.
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
        if type(step) not in (int, float) or step != step:
            self.unstepped.append((line, row))
            return
        kept = self.kept
        if kept:
            last = kept[-1]
            last_step = last[key]
            if step == last_step and not _contradicts(last, row, key):
                sources = self._sources[-1]
                if len(sources) == 1:  # copy before the first merge: the logged row stays as it was
                    last = kept[-1] = dict(last)
                last.update(row)
                sources.append((line, row))
                self.merged += 1
                return
            if step <= last_step:
                self.restarts.append((line, step))
                while kept and kept[-1][key] >= step:
                    kept.pop()
                    self.superseded += self._sources.pop()
        kept.append(row)
        self._sources.append([(line, row)])

    def standing_rows(self) -> list[tuple[int, dict[str, Any]]]:
        """``(line, row)`` of every standing row as logged (not merged), in file order."""
        out = [src for sources in self._sources for src in sources] + self.unstepped
        out.sort(key=lambda lr: lr[0])
        return out

    @property
    def segments(self) -> int:
        """Number of segments (0 for no stepped rows)."""
        return len(self.restarts) + 1 if (self.kept or self.superseded) else 0
