"""Reading runs: :func:`read_run` gives a :class:`Run` with metrics, config, checkpoints and iterations.

Works on run folders written by rllog or tinker-cookbook, on single metrics JSONL files
(``arithmetic_metrics.jsonl`` finds ``arithmetic_checkpoints.jsonl`` beside it), on a
TRL ``trainer_state.json``, and on URIs (``gs://``, ``s3://``, ``memory://``) through
:func:`rllog.storage.open_storage`.

Repeated steps (eval rows, trailing summary rows, restarts appended to one file) follow
the rule in :mod:`rllog._format.rows`: one row per step, the latest segment wins, and the
rows it replaced stay available as :attr:`Run.superseded`, together with the rows the
writer moved aside into ``metrics.superseded.jsonl`` when a run was resumed.

Nothing here imports pandas until a DataFrame is asked for: :attr:`Run.rows` gives the
same data as plain dicts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rllog._format.codec import decode_json
from rllog._format.jsonl import JsonlTail, iter_lines
from rllog._format.layout import (
    ARTIFACT_KINDS,
    CHECKPOINTS_FILE,
    CONFIG_FILE,
    METRICS_FILE,
    SUPERSEDED_FILE,
    TORN_SUFFIX,
    Artifact,
    artifact_rank,
    parse_iteration_file,
    parse_rank_file_name,
    parse_superseded_file,
    rank_file_name,
    safe_eval_name,
)
from rllog._format.rows import StepResolver
from rllog._format.vocab import STEP_KEYS, is_eval
from rllog._read.columnar import read_frame
from rllog._read.foreign import trl_rows
from rllog._read.stream import StreamedRows
from rllog._read.table import MetricTable
from rllog.errors import RunFormatError
from rllog.storage import LocalStorage, Storage, open_storage

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_run", "Run", "Iteration", "MetricsTail"]

MetricsTail = JsonlTail
"""Incremental reader of a growing JSONL file; see :class:`rllog._format.jsonl.JsonlTail`."""


@dataclass
class Iteration:
    """The artifacts of one iteration, sorted by (split, evaluator, kind)."""

    iteration: int
    artifacts: list[Artifact]

    def find(self, kind: str, eval_name: str | None = None) -> Artifact | None:
        """The train artifact of ``kind`` (``eval_name=None``) or evaluator ``eval_name``'s, else None."""
        for a in self.artifacts:
            if a.kind == kind and a.eval_name == eval_name:
                return a
        return None

    @property
    def eval_names(self) -> list[str]:
        """Evaluators with an artifact in this iteration, sorted."""
        return sorted({a.eval_name for a in self.artifacts if a.eval_name is not None})


class Run:
    """A run read from storage. Build it with :func:`read_run`.

    Attributes:
        storage: the :class:`~rllog.storage.Storage` of the run folder.
        url: the folder's URL (or local path).
        metrics_name: the metrics file inside it (``"metrics.jsonl"``, or e.g.
            ``"arithmetic_metrics.jsonl"``, ``"trainer_state.json"``).
        step_key: the step column (see :data:`STEP_KEYS`), None if the rows have none.
    """

    def __init__(
        self,
        storage: Storage,
        metrics_name: str,
        *,
        prefix: str | None = "",
        step_key: str | None = None,
        trl_state: dict[str, Any] | None = None,
        owns_storage: bool = True,
        columns: list[str] | None = None,
        rank: int = 0,
    ) -> None:
        self.rank = rank
        self.storage = storage
        self._owns_storage = owns_storage
        self.url = storage.url
        self.metrics_name = metrics_name
        self._prefix = prefix
        self._requested_step_key = step_key
        self._trl_state = trl_state
        self._columns = None if columns is None else list(columns)
        self._frames: dict[str, tuple[int, Any]] = {}
        self.config: dict[str, Any] | None = None
        self._iterations: list[Iteration] | None = None
        self._superseded_iterations: list[Iteration] | None = None
        self._display_names: dict[str, str] = {}
        self._load()

    # -- loading -------------------------------------------------------------------------
    def _sibling(self, name: str) -> str | None:
        return None if self._prefix is None else rank_file_name(f"{self._prefix}{name}", self.rank)

    @property
    def ranks(self) -> list[int]:
        """The ranks with metrics in this run folder: 0 for ``metrics.jsonl``, ``r`` for each
        ``metrics.rank<r>.jsonl`` (``RunLogger(all_ranks=True)``); read one with
        ``read_run(path, rank=r)``. ``[]`` for a run that is not a folder of rllog files."""
        if self._prefix is None:
            return []
        out = set()
        for name in self.storage.list(self._prefix):
            if name == f"{self._prefix}{METRICS_FILE}":
                out.add(0)
            parsed = parse_rank_file_name(name)
            if parsed is not None and parsed[0] == f"{self._prefix}{METRICS_FILE}":
                out.add(parsed[1])
        return sorted(out)

    def _load(self) -> None:
        self._notes: list[str] = []
        self._iterations = None
        self._superseded_iterations = None
        self._frames.clear()
        self._rows_resolver: StepResolver | None = None
        self._streamed: StreamedRows | None = None
        self._table: MetricTable | None = None
        self._size_at_load = 0  # bytes of the metrics file when read: what lazy parsing reads
        self._one_clean_segment = False  # the columnar read found every row standing, no damage
        raw: list[tuple[int, dict]] | None = None
        if self._trl_state is not None:
            rows, self.config, self._notes = trl_rows(self._trl_state)
            self._tail = self._ckpt_tail = None
            raw = [(i, {"step": s, **m}) for i, (s, m) in enumerate(rows, 1)]
            self.checkpoints: list[dict[str, Any]] = []
        else:
            # metric rows are parsed on first use (:attr:`_resolver`); the columnar
            # :attr:`metrics` may never need them
            self._tail = MetricsTail(self.storage, self.metrics_name)
            try:
                self._size_at_load = self.storage.size(self.metrics_name)
            except FileNotFoundError:
                self._size_at_load = 0
                self._notes.append(f"no {self.metrics_name} in {self.url}: the run has logged no metrics yet")
            torn = self.metrics_name + TORN_SUFFIX
            if self.storage.exists(torn):
                self._notes.append(
                    f"{torn}: torn rows (cut mid-write by a killed process) the writer moved aside"
                )
            self.config = self._read_config()
            self._ckpt_tail = None
            self.checkpoints = []
            name = self._sibling(CHECKPOINTS_FILE)
            if name is not None:
                self._ckpt_tail = MetricsTail(self.storage, name)
                self.checkpoints = [row for _, row in self._ckpt_tail.poll(final=True)]
        first = self._first_row() if raw is None else (raw[0][1] if raw else None)
        if first is False:  # the first line is damaged: the first row is the first that parses
            raw = self._tail.poll(final=True, end=self._size_at_load) if self._tail is not None else []
            first = raw[0][1] if raw else None
        self.step_key = self._choose_step_key(first)
        if raw is not None:
            self._resolve(raw)
        self._moved_aside = self._read_moved_aside()

    def _first_row(self) -> dict[str, Any] | None | Literal[False]:
        """The first metric row (read from the file's head), None for no row, False when
        the first non-blank line is not a JSON object (or is longer than the head)."""
        try:
            head = self.storage.read_range(self.metrics_name, 0, 1 << 20)
        except FileNotFoundError:
            return None
        for _, line in iter_lines(head):
            if b"\n" not in head:
                return False if line.strip() else None  # one line, maybe torn or cut by the head
            try:
                row = decode_json(line)
            except ValueError:
                return False
            return row if type(row) is dict else False
        return None

    def _resolve(self, raw: list[tuple[int, dict]]) -> None:
        self._rows_resolver = StepResolver(self.step_key)
        for line, row in raw:
            self._rows_resolver.add(line, row)

    @property
    def _resolver(self) -> StepResolver:
        """The step rule applied to every metric row, parsed on first use."""
        if self._rows_resolver is None:
            self._resolve(
                self._tail.poll(final=True, end=self._size_at_load) if self._tail is not None else []
            )
        assert self._rows_resolver is not None
        return self._rows_resolver

    def _choose_step_key(self, first: dict[str, Any] | None) -> str | None:
        if self._requested_step_key is not None:
            return self._requested_step_key
        if first is None:
            return "step"
        return next((k for k in STEP_KEYS if k in first), None)

    def _read_config(self) -> dict[str, Any] | None:
        name = self._sibling(CONFIG_FILE)
        if name is None:
            return None
        try:
            data = self.storage.read(name)
        except FileNotFoundError:
            return None
        try:
            config = decode_json(data)
        except ValueError as exc:
            self._notes.append(f"{name}: not JSON ({exc}); config not read")
            return None
        if not isinstance(config, dict):
            self._notes.append(
                f"{name}: expected a JSON object, got {type(config).__name__}; config not read"
            )
            return None
        return config

    def _read_moved_aside(self) -> list[tuple[int, dict]]:
        name = self._sibling(SUPERSEDED_FILE)
        self._aside_tail = None if name is None else MetricsTail(self.storage, name)
        return self._poll_moved_aside()

    def _poll_moved_aside(self) -> list[tuple[int, dict]]:
        """Rows moved aside since the last look (all of them if metrics.superseded.jsonl was rewritten)."""
        tail = self._aside_tail
        if tail is None:
            return []
        seen = len(tail.problems)
        rows = tail.poll(final=True)
        self._notes += tail.problems[seen:]
        if tail.torn and tail.torn not in self._notes:
            self._notes.append(tail.torn)
        return rows

    def refresh(self) -> list[dict[str, Any]]:
        """Read what was appended since the last read; returns the new metric rows as logged.

        Only new bytes of metrics.jsonl and checkpoints.jsonl are read; config.json is read
        again and the iterations listed again. If metrics.jsonl was rewritten (it shrank, or
        its first bytes changed: rows moved aside on resume, the folder replaced) the run is
        read again from the start, every standing row is returned, and :attr:`warnings` says so.
        """
        if self._tail is None:  # a trainer_state.json is read whole
            return []
        self._one_clean_segment = False
        self._streamed = None
        resolver = self._resolver  # parse what was there before, so only new rows are returned
        rows = self._tail.poll()
        if self._tail.rewritten:
            note = self._tail.problems[-1]
            self._load()
            self._notes.append(note)
            return list(self.rows)
        for line, row in rows:
            resolver.add(line, row)
        if self._table is not None:
            self._table.poll()
            if self._table.rewritten:  # rewritten between the two reads: read it again when asked
                self._table = None
        self._refresh_siblings()
        return [row for _, row in rows]

    def refresh_table(self) -> bool:
        """:meth:`refresh` for a reader of :meth:`table`: the bytes appended to the metrics
        file since the last read go into the table's columns; no row dict is kept and the
        rows are not parsed (if :attr:`rows` was read before, they are kept current too).
        Checkpoints, config, iterations and moved-aside rows are read again as by :meth:`refresh`.

        Returns True when the metric rows changed (rows added or merged, a restart, rows
        moved aside, the file rewritten and read again).

        Raises:
            OSError: the storage failed.
        """
        if self._tail is None:  # a trainer_state.json is read whole
            return False
        if self._rows_resolver is not None:
            before = (self.rows_read, self.superseded_count)
            self.refresh()
            return (self.rows_read, self.superseded_count) != before
        table = self.table()
        version, aside = table.version, len(self._moved_aside)
        table.poll()
        if table.rewritten:
            note = table.problems[-1]
            self._load()
            self._notes.append(note)
            self.table()
            return True
        self._streamed = None
        self._refresh_siblings()
        return table.version != version or len(self._moved_aside) != aside

    def _refresh_siblings(self) -> None:
        """Read again what lies beside the metrics file: iterations, moved-aside rows, checkpoints, config."""
        self._iterations = None
        self._superseded_iterations = None
        # a resume moves rows aside before it cuts metrics.jsonl: read them as they come
        aside = self._poll_moved_aside()
        if self._aside_tail is not None and self._aside_tail.rewritten:
            self._moved_aside = aside
        else:
            self._moved_aside += aside
        if aside:
            self._frames.pop("superseded", None)
        if self._ckpt_tail is not None:
            self.checkpoints += [row for _, row in self._ckpt_tail.poll()]
        self.config = self._read_config()

    # -- metrics -------------------------------------------------------------------------
    @property
    def rows(self) -> list[dict[str, Any]]:
        """The standing metric rows as dicts: one per step, steps increasing (see :mod:`rllog._format.rows`),
        then rows without a step. Values as logged; NaN/Infinity tokens are floats, null is None."""
        r = self._resolver
        return r.kept + [row for _, row in r.unstepped]

    def iter_rows(self) -> Iterator[dict[str, Any]]:
        """The standing metric rows one at a time, equal to :attr:`rows` row for row, in
        bounded memory (:class:`rllog._read.stream.StreamedRows`: ~24 bytes per row plus a
        1 MiB window, whatever the file size). Rows already read (after :attr:`rows`) come
        from memory. What ``rllog summary`` and ``rllog doctor`` read a long run with.

        Raises:
            OSError: the storage failed.
        """
        if self._rows_resolver is not None:
            return iter(self.rows)
        return self._stream().rows()

    def table(self) -> MetricTable:
        """The standing metric rows as float64 columns (:class:`rllog._read.table.MetricTable`:
        one array per metric, rows as :attr:`rows` orders them), read in one chunked pass on
        first use without keeping a dict per row, kept current by :meth:`refresh_table` (or
        :meth:`refresh`). Treat its arrays as read-only.

        Raises:
            OSError: the storage failed.
        """
        if self._table is None:
            if self._tail is None:  # a trainer_state.json: its rows are read already
                r = self._resolver
                self._table = MetricTable.of_rows(self.step_key, r.kept, [row for _, row in r.unstepped])
            else:
                self._table = MetricTable(self.storage, self.metrics_name, self.step_key, self._size_at_load)
        return self._table

    @property
    def moved_aside_rows(self) -> list[dict[str, Any]]:
        """The rows the writer moved into ``metrics.superseded.jsonl`` on resume, as dicts
        (``_source``, ``_line``, then the row as logged): the part of :attr:`superseded_rows`
        that is not in the metrics file."""
        aside = self._sibling(SUPERSEDED_FILE)
        return [{"_source": aside, "_line": line, **row} for line, row in self._moved_aside]

    def _scanned(self) -> StreamedRows | None:
        """What read the metrics file when its rows were never parsed: the table, else the stream."""
        if self._rows_resolver is not None:
            return None
        return self._table if self._table is not None else self._streamed

    def _stream(self) -> StreamedRows:
        """The rule's pass over the metrics file without keeping rows (on first use)."""
        if self._streamed is None:
            assert self._tail is not None  # a trainer_state.json has its rows resolved at load
            self._streamed = StreamedRows(self.storage, self.metrics_name, self.step_key, self._size_at_load)
        return self._streamed

    @property
    def rows_read(self) -> int:
        """Metric rows parsed from the file (standing, merged and superseded)."""
        scan = self._scanned()
        return scan.added if scan is not None else self._resolver.added

    @property
    def superseded_count(self) -> int:
        """``len(superseded_rows)`` without building the rows (streamed when rows were not read)."""
        aside = len(self._moved_aside)
        if self._rows_resolver is None and self._tail is not None:
            return (self._scanned() or self._stream()).superseded + aside
        return len(self._resolver.superseded) + aside

    @property
    def restarts(self) -> list[tuple[int, Any]]:
        """``(line, step)`` where each restart found in the metrics file begins (empty for one segment)."""
        scan = self._scanned()
        return list(scan.restarts if scan is not None else self._resolver.restarts)

    @property
    def merged_rows(self) -> int:
        """Rows merged into an earlier row of the same step (eval-only rows, summary rows, late eval results)."""
        scan = self._scanned()
        return scan.merged if scan is not None else self._resolver.merged

    def _frame(self, what: str, build) -> pd.DataFrame:
        version = -1 if self._rows_resolver is None else self._rows_resolver.version
        cached = self._frames.get(what)
        if cached is None or cached[0] != version:
            cached = self._frames[what] = (version, build())
        return cached[1]

    @property
    def metrics(self) -> pd.DataFrame:
        """The standing rows (:attr:`rows`) as a DataFrame, the step column first.

        Columns are in first-logged order (only the step and the ``columns`` given to
        :func:`read_run`, when given); numbers and nulls give float64 columns (null and
        NaN both NaN); string-valued metrics keep their strings (pandas' string dtype,
        ``object`` before pandas 3). Built on first use and after :meth:`refresh`, then
        cached: treat it as read-only.

        A run whose rows are one clean segment (steps strictly increasing, no damaged
        line) is read column by column (:func:`rllog._read.columnar.read_frame`, with
        pyarrow when installed) without building a dict per row; otherwise from
        :attr:`rows`.

        Raises:
            KeyError: a column asked for in ``columns`` is not in the run.
        """
        return self._frame("metrics", self._build_metrics)

    def _build_metrics(self) -> pd.DataFrame:
        if self._rows_resolver is None and self._tail is not None:
            df = read_frame(self.storage, self.metrics_name, self._size_at_load, self.step_key, self._columns)
            if df is not None:
                self._one_clean_segment = True
                return df
        df = _to_frame(self.rows, self.step_key)
        if self._columns is None:
            return df
        missing = [c for c in self._columns if c not in df.columns]
        if missing:
            raise KeyError(
                f"{self.url}/{self.metrics_name}: no column {', '.join(map(repr, missing))}; "
                f"it has {', '.join(map(str, df.columns))}"
            )
        keep = [self.step_key] if self.step_key in df.columns else []
        return df[keep + [c for c in self._columns if c not in keep]]

    @property
    def eval_columns(self) -> list[str]:
        """Metric columns that hold evaluation results (names starting with :data:`EVAL_PREFIXES`)."""
        return [c for c in self.metrics.columns if is_eval(c)]

    @property
    def train_metrics(self) -> pd.DataFrame:
        """The step column and the non-eval columns, on rows that have a non-eval value."""
        return self._frame("train", lambda: self._split(train=True))

    @property
    def eval_metrics(self) -> pd.DataFrame:
        """The step column and the eval columns, on rows that have an eval value (e.g. every 20th step)."""
        return self._frame("eval", lambda: self._split(train=False))

    def _split(self, train: bool) -> pd.DataFrame:
        df = self.metrics
        cols = [c for c in df.columns if c != self.step_key and is_eval(c) != train]
        keep = [self.step_key] if self.step_key in df.columns else []
        part = df[keep + cols]
        return part[part[cols].notna().any(axis=1)].reset_index(drop=True) if cols else part.iloc[:0]

    @property
    def superseded(self) -> pd.DataFrame:
        """Rows that no longer stand, as logged: columns ``_source`` (file name) and ``_line``
        (1-based line in it), then the metrics. Holds the rows a later segment of the
        metrics file replaced, and the rows in ``metrics.superseded.jsonl`` (moved aside
        by the writer on resume)."""
        return self._frame("superseded", lambda: _to_frame(self.superseded_rows, None))

    @property
    def superseded_rows(self) -> list[dict[str, Any]]:
        """:attr:`superseded` as dicts (``_source``, ``_line``, then the row as logged)."""
        out = [
            {"_source": self.metrics_name, "_line": line, **row}
            for line, row in sorted(self._resolver.superseded, key=_line)
        ]
        return out + self.moved_aside_rows

    # -- iterations and their artifacts --------------------------------------------------------
    def files(self) -> list[tuple[str, int]]:
        """``(name, size in bytes)`` of every file of the run (for a single-file run: that file and its siblings)."""
        if self._prefix is None:
            names = [self.metrics_name]
        else:
            names = self.storage.list(self._prefix)
            if self._prefix:  # a prefixed file's siblings, not other runs' folders
                names = [n for n in names if "/" not in n]
        out = []
        for n in names:
            try:
                out.append((n, self.storage.size(n)))
            except FileNotFoundError:  # removed while listing
                pass
        return out

    @property
    def iterations(self) -> list[Iteration]:
        """Iterations with at least one artifact, sorted; listed on first use and after :meth:`refresh`."""
        if self._iterations is None:
            self._iterations = self._list_iterations(parse_iteration_file)
        return self._iterations

    @property
    def superseded_iterations(self) -> list[Iteration]:
        """The crashed run's reports and rollout summaries that a resume moved into
        ``superseded/`` (:data:`rllog._format.layout.SUPERSEDED_DIR`), by iteration; an
        artifact's ``name`` is its path in the run (``superseded/train_iteration_000012.html``,
        a later crash's copy ``....html.2``). Read them with ``superseded=True`` in
        :meth:`artifact`, :meth:`html`, :meth:`logtree` and :meth:`rollout_summaries`."""
        if self._superseded_iterations is None:
            self._superseded_iterations = self._list_iterations(parse_superseded_file)
        return self._superseded_iterations

    def _list_iterations(self, parse: Any) -> list[Iteration]:
        found: dict[int, list[Artifact]] = {}
        if self._prefix == "" and self._trl_state is None:
            for name in self.storage.list():
                a = parse(name)
                if a is not None:
                    found.setdefault(a.iteration, []).append(a)
        order = list(ARTIFACT_KINDS)
        return [
            Iteration(
                i,
                sorted(
                    arts,
                    key=lambda a: (
                        a.split != "train",
                        a.eval_name or "",
                        artifact_rank(a.name),  # rank 0's first: what artifact() finds
                        order.index(a.kind),
                        a.name,
                    ),
                ),
            )
            for i, arts in sorted(found.items())
        ]

    def eval_display_name(self, eval_name: str) -> str:
        """The evaluator's name as logged (``"my eval set 1"``) for the file-safe name that
        :attr:`iterations` shows (``"my_eval_set_1-h7276ba2863"``).

        Read from the first record of one of its rollout summaries (``"split":
        "eval/<name>"``), else from a logtree JSON title (``"Evaluation <name>, iteration
        N"``); ``eval_name`` itself when neither says. Reads at most one file, once.
        """
        if eval_name not in self._display_names:
            self._display_names[eval_name] = self._find_display_name(eval_name) or eval_name
        return self._display_names[eval_name]

    def _find_display_name(self, eval_name: str) -> str | None:
        arts = [a for it in self.iterations for a in it.artifacts if a.eval_name == eval_name]
        for a in arts:
            if a.kind == "rollout_summaries":
                head = self.storage.read_range(a.name, 0, 65_536).split(b"\n", 1)[0]
                try:
                    split = decode_json(head).get("split")
                except (ValueError, AttributeError):
                    continue
                if isinstance(split, str) and split.startswith("eval/"):
                    return split[len("eval/") :]
        for a in arts:
            if a.kind == "logtree":
                try:
                    title = self.logtree(a.iteration, eval_name).get("title")
                except (OSError, ValueError):
                    continue
                m = re.fullmatch(r"Evaluation (.+), iteration \d+", title or "")
                if m:
                    return m.group(1)
        return None

    def artifact(
        self, iteration: int, kind: str, eval_name: str | None = None, *, superseded: bool = False
    ) -> Artifact:
        """The artifact of ``kind`` for ``iteration`` (train, or evaluator ``eval_name``: the
        file-safe name of :attr:`iterations` or the name as logged); with ``superseded=True``
        the crashed run's copy in :attr:`superseded_iterations` (the first, if several).

        Raises:
            FileNotFoundError: the run has no such artifact; the message lists what that
                iteration has.
        """
        for it in self.superseded_iterations if superseded else self.iterations:
            if it.iteration == iteration:
                found = it.find(kind, eval_name)
                if found is None and eval_name is not None:
                    found = it.find(kind, safe_eval_name(eval_name))
                if found is not None:
                    return found
                have = ", ".join(a.name for a in it.artifacts)
                break
        else:
            have = "nothing (no such iteration)"
        who = "train" if eval_name is None else f"evaluator {eval_name!r}"
        where = " in superseded/" if superseded else ""
        raise FileNotFoundError(
            f"{self.url}: no {kind} for {who} at iteration {iteration}{where}; it has {have}"
        )

    def html(self, iteration: int, eval_name: str | None = None, *, superseded: bool = False) -> str:
        """The logtree HTML report of an iteration, as text. Raises FileNotFoundError like :meth:`artifact`."""
        name = self.artifact(iteration, "html", eval_name, superseded=superseded).name
        return self.storage.read(name).decode("utf-8", "replace")

    def logtree(
        self, iteration: int, eval_name: str | None = None, *, superseded: bool = False
    ) -> dict[str, Any]:
        """The logtree JSON of an iteration (``{title, started_at, path, root}``), read on each call.

        Raises:
            FileNotFoundError: like :meth:`artifact`.
            RunFormatError: the file is not a JSON object.
        """
        name = self.artifact(iteration, "logtree", eval_name, superseded=superseded).name
        try:
            tree = decode_json(self.storage.read(name))
        except ValueError as exc:
            raise RunFormatError(f"{self.url}/{name}: not JSON ({exc})") from None
        if not isinstance(tree, dict):
            raise RunFormatError(f"{self.url}/{name}: expected a JSON object, got {type(tree).__name__}")
        return tree

    def rollout_summaries(
        self, iteration: int, eval_name: str | None = None, *, superseded: bool = False
    ) -> list[dict[str, Any]]:
        """The per-trajectory rollout summaries of an iteration (one dict per trajectory, README.md "Rollout summaries"),
        read on each call. Damaged lines are skipped and reported in :attr:`warnings`. For typed
        records (:class:`rllog.TrajectorySummary`) or a DataFrame use :func:`rllog.read_rollouts`
        and :func:`rllog.rollouts_dataframe`.

        Raises:
            FileNotFoundError: like :meth:`artifact`.
        """
        name = self.artifact(iteration, "rollout_summaries", eval_name, superseded=superseded).name
        tail = MetricsTail(self.storage, name)
        rows = tail.poll(final=True)
        for note in tail.problems + ([tail.torn] if tail.torn else []):
            if note not in self._notes:
                self._notes.append(note)
        return [row for _, row in rows]

    # -- reporting -------------------------------------------------------------------------
    @property
    def damaged_lines(self) -> list[str]:
        """One message per damaged line of metrics.jsonl and checkpoints.jsonl (not a JSON
        object, or a torn last line), with its line number; the reader skipped them.
        Part of :attr:`warnings`; ``rllog doctor`` reports them as a finding."""
        out: list[str] = []
        scanned = self._scanned()
        metrics = scanned if scanned is not None else self._tail  # streamed (rllog doctor), table (serve)
        for tail in (metrics, self._ckpt_tail):
            if tail is not None:
                out += [p for p in tail.problems if " line " in p] + ([tail.torn] if tail.torn else [])
        return out

    @property
    def warnings(self) -> list[str]:
        """What a reader of this run should know: damaged or torn lines (with line numbers),
        restarts found in the metrics file, missing files, rows without a step."""
        out = list(self._notes)
        if self._rows_resolver is None and self._one_clean_segment:
            tail = self._ckpt_tail  # the metrics file parsed whole, one segment: nothing to say of it
            return out + (tail.problems + ([tail.torn] if tail.torn else []) if tail is not None else [])
        streamed = self._scanned()
        if streamed is not None:  # the file was streamed (rllog summary) or tabled (serve): same words
            out += streamed.problems + ([streamed.torn] if streamed.torn else [])
            restarts, superseded, unstepped = streamed.restarts, streamed.superseded, streamed.unstepped
        else:
            r = self._resolver
            if self._tail is not None:
                out += self._tail.problems + ([self._tail.torn] if self._tail.torn else [])
            restarts, superseded, unstepped = r.restarts, len(r.superseded), len(r.unstepped)
        if self._ckpt_tail is not None:
            out += self._ckpt_tail.problems + ([self._ckpt_tail.torn] if self._ckpt_tail.torn else [])
        if restarts:
            where = ", ".join(f"line {line} ({self.step_key} {step})" for line, step in restarts[:5])
            more = f" and {len(restarts) - 5} more" if len(restarts) > 5 else ""
            out.append(
                f"{self.metrics_name}: {len(restarts)} restart(s) appended in one file, at {where}{more}; "
                f"the latest segment wins, {superseded} superseded rows are in Run.superseded"
            )
        if unstepped:
            what = (
                f"no {self.step_key!r}" if self.step_key else f"none of the step keys {', '.join(STEP_KEYS)}"
            )
            out.append(f"{self.metrics_name}: {unstepped} rows have {what}; kept at the end in file order")
        return out

    def close(self) -> None:
        """Release the run's storage handle (idempotent). A Run opened from a path or URL
        owns its storage; one opened from a Storage leaves it to its owner."""
        if self._owns_storage:
            self.storage.close()

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Run {self.url!r} {self.metrics_name}: {len(self.rows)} rows, {len(self.iterations)} iterations>"


def _line(item: tuple[int, dict]) -> int:
    return item[0]


def _to_frame(rows: list[dict[str, Any]], first: str | None) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame.from_records(rows) if rows else pd.DataFrame()
    if first is not None and first in df.columns and df.columns[0] != first:
        df = df[[first] + [c for c in df.columns if c != first]]
    for c in df.columns:  # a column of nulls only is a float column of NaN
        if df[c].dtype == object and df[c].isna().all():
            df[c] = df[c].astype("float64")
    return df


def _split_url(url: str) -> tuple[str, str]:
    head, _, tail = url.rstrip("/").rpartition("/")
    return head, tail


def read_run(
    log_path: str | os.PathLike[str] | Storage,
    *,
    step_key: str | None = None,
    columns: list[str] | None = None,
    rank: int | None = None,
    **storage_options: Any,
) -> Run:
    """Read a run.

    Args:
        log_path: a run folder (local path or URI such as ``gs://bucket/run``,
            ``s3://...``, ``memory://...``) holding ``metrics.jsonl``; or one metrics
            JSONL file (siblings ``<prefix>config.json``, ``<prefix>checkpoints.jsonl``
            are read when its name is ``<prefix>metrics.jsonl``); or a TRL
            ``trainer_state.json`` (its ``log_history`` as metrics, its other fields as
            config; see :mod:`rllog._read.foreign`); or an open Storage.
        step_key: the step column; default the first of :data:`STEP_KEYS` in the first row.
        columns: metric names: :attr:`Run.metrics` then holds the step column and these
            only, in this order (a run of one clean segment is parsed column by column and
            only these are converted; :attr:`Run.rows` still has every key).
        rank: read rank ``rank``'s files of a run that every rank wrote
            (``RunLogger(all_ranks=True)``): ``metrics.rank<r>.jsonl`` with its
            ``checkpoints.rank<r>.jsonl`` and ``config.rank<r>.json``; 0 or None is the
            run's own ``metrics.jsonl``. :attr:`Run.ranks` lists the ranks there are.
            A path to ``metrics.rank<r>.jsonl`` reads that rank too.
        storage_options: passed to fsspec for URIs (e.g. ``token="anon"``).

    Damage does not raise: damaged lines, a torn final line and restarts are reported in
    :attr:`Run.warnings`.

    Raises:
        TypeError: ``columns`` is not a list of strings.
        FileNotFoundError: nothing exists at ``log_path``.
        RunFormatError: a ``.json`` file that is not a TRL trainer state.
        OSError: the storage failed.
    """
    if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
        raise TypeError(f"read_run(columns=...): expected a list of metric names, got {columns!r}")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
        raise TypeError(f"read_run(rank=...): expected an int >= 0, got {rank!r}")
    rank = rank or 0
    folder_metrics = rank_file_name(METRICS_FILE, rank)
    if not isinstance(log_path, (str, os.PathLike)):
        return Run(
            open_storage(log_path, mode="r"),
            folder_metrics,
            step_key=step_key,
            columns=columns,
            owns_storage=False,
            rank=rank,
        )
    url = os.fspath(log_path).removeprefix("file://")
    if "://" not in url:
        path = Path(url).expanduser()
        if path.is_dir():
            return Run(LocalStorage(path), folder_metrics, step_key=step_key, columns=columns, rank=rank)
        if not path.is_file():
            raise FileNotFoundError(
                f"no run at {path}: expected a folder with metrics.jsonl, a .jsonl file or trainer_state.json"
            )
        storage: Storage = LocalStorage(path.parent)
        name = path.name
    else:
        parent, name = _split_url(url)
        storage = open_storage(url, mode="r", **storage_options)
        if "." not in name or storage.exists(METRICS_FILE) or not parent:
            if not storage.list():
                raise FileNotFoundError(
                    f"no run at {url}: no files there (expected a folder with metrics.jsonl, a .jsonl file or trainer_state.json)"
                )
            return Run(storage, folder_metrics, step_key=step_key, columns=columns, rank=rank)
        storage = open_storage(parent, mode="r", **storage_options)
        if not storage.exists(name):
            raise FileNotFoundError(
                f"no run at {url}: no such file or folder (expected a folder with metrics.jsonl, a .jsonl file or trainer_state.json)"
            )
    if name.endswith(".json"):
        try:
            state = decode_json(storage.read(name))
        except ValueError as exc:
            raise RunFormatError(f"{storage.url}/{name}: not JSON ({exc})") from None
        if not isinstance(state, dict) or not isinstance(state.get("log_history"), list):
            raise RunFormatError(
                f"{storage.url}/{name}: expected a TRL trainer_state.json (an object with a 'log_history' list); "
                "for a run folder pass the folder"
            )
        return Run(storage, name, prefix=None, step_key=step_key, columns=columns, trl_state=state)
    tagged = parse_rank_file_name(name)
    if tagged is not None and tagged[0].endswith(METRICS_FILE):  # metrics.rank<r>.jsonl
        plain, rank = tagged
        return Run(
            storage, name, prefix=plain[: -len(METRICS_FILE)], step_key=step_key, columns=columns, rank=rank
        )
    prefix = name[: -len(METRICS_FILE)] if name.endswith(METRICS_FILE) else None
    return Run(storage, name, prefix=prefix, step_key=step_key, columns=columns)
