"""Importers: turn Hugging Face TRL and TensorBoard logs into rllog run folders.

``rllog import trl trainer_state.json OUT`` and ``rllog import tensorboard EVENTS_DIR OUT``
write ``OUT/metrics.jsonl`` and ``OUT/config.json`` with rllog's own
:class:`~rllog.RunLogger` (so NaN stays a ``NaN`` token, null stays null, secret-looking
config fields are redacted) and, when restarts overlapped, ``OUT/metrics.superseded.jsonl``. Every ``rllog`` command reads the result.

TRL (``transformers.TrainerState`` JSON, e.g. ``checkpoint-160/trainer_state.json``):
each ``log_history`` entry becomes one row at its ``step``. Train rows, ``eval_*`` rows
and the end-of-training summary row (``train_runtime``, ...) stay separate rows; the
reader merges rows of one step because their keys do not clash. A key an entry repeats
from an earlier entry of the same step (TRL repeats ``epoch``) is dropped when the value
is equal and, in an eval row, renamed ``eval_<key>`` when it differs. The other
top-level fields of the state (``global_step``, ``max_steps``, ``best_model_checkpoint``,
...) become config.json.

TensorBoard (``events.out.tfevents.*`` as written by transformers' TensorBoardCallback,
read with the ``tensorboard`` package's event loader): scalar summaries only (``simple_value``
and ``scalars``-plugin tensors, stored as float32 and written with the shortest decimal
that gives the same float32). Tags are mapped back to the trainer's log keys, the
inverse of the callback's renaming: ``train/x`` -> ``x``, ``eval/x`` -> ``eval_x``,
``test/x`` -> ``test_x``, other tags unchanged; so an imported TensorBoard log has the
same keys as the run's trainer_state.json. The ``args/text_summary`` and
``model_config/text_summary`` text summaries become config.json (the training arguments,
plus ``model_config``); other non-scalar summaries are skipped and counted.

Several event files in one folder (restarts writing to the same log dir) are read in
the order they were started (the timestamp in the name, as TensorBoard orders them).
Within a file, a (tag, step) written twice keeps the later value. Across files the rows
go through the reader's rule (:mod:`rllog._segments`): a file that starts at an earlier
step than the previous file reached is a restart, so the later file wins from its first
step on, and the replaced rows go to ``metrics.superseded.jsonl``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllog._segments import StepResolver
from rllog.encoding import MetricsEncoder, decode_json, encode_json
from rllog.errors import RunFormatError
from rllog.run_logger import CONFIG_FILE, METRICS_FILE, SUPERSEDED_FILE, RunLogger
from rllog.storage import open_for_reading, open_storage

__all__ = ["ImportReport", "import_trl", "import_tensorboard", "trl_rows", "tensorboard_rows"]

Rows = list[tuple[int, dict[str, Any]]]

_CONFIG_TAGS = {"args/text_summary": None, "model_config/text_summary": "model_config"}
_TFEVENTS = re.compile(r"events\.out\.tfevents\.(\d+)")


@dataclass
class ImportReport:
    """What an import wrote: ``out`` (the run's URL), ``rows`` in metrics.jsonl,
    ``superseded`` rows in metrics.superseded.jsonl, ``first_step``/``last_step``
    (None when empty), ``config`` written or not, and ``notes`` (what was skipped or merged)."""

    out: str
    rows: int
    superseded: int
    first_step: int | None
    last_step: int | None
    config: bool
    notes: list[str] = field(default_factory=list)


def _same(a: Any, b: Any) -> bool:
    return a == b or (a != a and b != b)


def _scalar(value: Any, where: str, notes: list[str]) -> Any:
    if isinstance(value, (dict, list)):
        notes.append(f"{where} is a {type(value).__name__}, not a scalar; written as its JSON text")
        return encode_json(value).decode()
    return value


def trl_rows(state: dict[str, Any], where: str = "trainer_state.json") -> tuple[Rows, dict[str, Any], list[str]]:
    """``(rows, config, notes)`` from a parsed TRL trainer state (see the module docstring).

    ``rows`` is ``[(step, metrics), ...]`` in log order, without the ``step`` key.

    Raises:
        RunFormatError: ``state`` has no ``log_history`` list.
    """
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise RunFormatError(f"{where}: expected an object with a 'log_history' list (a TRL TrainerState)")
    config = {k: v for k, v in state.items() if k != "log_history"}
    rows: Rows = []
    notes: list[str] = []
    at_step: dict[int, dict[str, Any]] = {}
    for i, entry in enumerate(history):
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            notes.append(f"{where}: log_history[{i}] has no int 'step' (got {step!r:.40}); skipped")
            continue
        metrics = {k: _scalar(v, f"{where}: log_history[{i}][{k!r}]", notes) for k, v in entry.items() if k != "step"}
        is_eval = any(k.startswith("eval_") for k in metrics)
        seen = at_step.setdefault(step, {})
        for k in [k for k in metrics if k in seen]:
            if _same(seen[k], metrics[k]):
                del metrics[k]
            elif is_eval and not k.startswith("eval_"):
                metrics[f"eval_{k}"] = metrics.pop(k)
        seen.update(metrics)
        rows.append((step, metrics))
    return rows, config, notes


def _read_source(src: str | os.PathLike[str], storage_options: dict[str, Any]) -> bytes:
    src = os.fspath(src)
    if "://" not in src or src.startswith("file://"):
        return Path(src.removeprefix("file://")).expanduser().read_bytes()
    parent, _, name = src.rstrip("/").rpartition("/")
    return open_for_reading(parent, **storage_options).read(name)


def import_trl(
    trainer_state: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False, **storage_options: Any
) -> ImportReport:
    """Convert a TRL ``trainer_state.json`` (local path or URI) into an rllog run at ``out``.

    Raises:
        FileNotFoundError: no such trainer_state.json.
        RunFormatError: it is not JSON or has no ``log_history`` list.
        FileExistsError: ``out`` already has metrics.jsonl and ``overwrite`` is False.
    """
    data = _read_source(trainer_state, storage_options)
    try:
        state = decode_json(data)
    except ValueError as exc:
        raise RunFormatError(f"{os.fspath(trainer_state)}: not JSON ({exc})") from None
    rows, config, notes = trl_rows(state, os.fspath(trainer_state))
    return _write_run(out, rows, config, notes, overwrite, storage_options)


def _tag_key(tag: str) -> str:
    head, sep, rest = tag.partition("/")
    if sep and rest:
        if head == "train":
            return rest
        if head in ("eval", "test"):
            return f"{head}_{rest}"
    return tag


def _event_files(events_dir: Path) -> list[Path]:
    if events_dir.is_file():
        return [events_dir]
    if not events_dir.is_dir():
        raise FileNotFoundError(f"no TensorBoard log at {events_dir}: expected a folder of events.out.tfevents.* files")
    files = [p for p in events_dir.iterdir() if p.is_file() and _TFEVENTS.match(p.name)]
    if not files:
        raise FileNotFoundError(f"{events_dir} has no events.out.tfevents.* files (give the folder that holds them)")
    return sorted(files, key=lambda p: (int(_TFEVENTS.match(p.name)[1]), p.name))


def tensorboard_rows(events_dir: str | os.PathLike[str]) -> tuple[Rows, dict[str, Any] | None, list[str]]:
    """``(rows, config, notes)`` from a local folder of event files (or one event file).

    ``rows`` is ``[(step, metrics), ...]``: per file, per step (ascending) a train row and
    an eval row (``eval_*``/``test_*`` keys) when there are such values; files one after
    the other (see the module docstring for the order and the overlap rule).

    Raises:
        FileNotFoundError: no event files there.
        ImportError: the ``tensorboard`` package is not installed (extra ``rllog[tensorboard]``).
    """
    import numpy as np

    try:
        from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
        from tensorboard.util.tensor_util import make_ndarray
    except ImportError as exc:
        raise ImportError(f"importing TensorBoard logs needs the tensorboard package: pip install 'rllog[tensorboard]' ({exc})") from exc

    rows: Rows = []
    config: dict[str, Any] | None = None
    notes: list[str] = []
    skipped: Counter[str] = Counter()
    for path in _event_files(Path(events_dir).expanduser()):
        per_step: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        repeated = differing = 0
        for event in LegacyEventFileLoader(str(path)).Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                plugin = value.metadata.plugin_data.plugin_name
                if kind == "simple_value":
                    x = value.simple_value
                elif kind == "tensor" and plugin == "scalars":
                    x = make_ndarray(value.tensor).item()
                elif kind == "tensor" and value.tag in _CONFIG_TAGS:
                    config = _text_config(config, value.tag, make_ndarray(value.tensor))
                    continue
                else:
                    skipped[value.tag] += 1
                    continue
                x = float(str(np.float32(x)))  # shortest decimal of the stored float32
                key = _tag_key(value.tag)
                train, evals = per_step.setdefault(event.step, ({}, {}))
                row = evals if key.startswith(("eval_", "test_")) else train
                if key in row:
                    repeated += 1
                    differing += not _same(row[key], x)
                row[key] = x
        for step in sorted(per_step):
            rows += [(step, part) for part in per_step[step] if part]
        span = f"steps {min(per_step)}..{max(per_step)}" if per_step else "no scalars"
        notes.append(f"{path.name}: {span}")
        if repeated:
            notes.append(f"{path.name}: {repeated} (tag, step) values written twice ({differing} different); the later one kept")
    if skipped:
        notes.append("skipped non-scalar summaries: " + ", ".join(f"{t} ({n})" for t, n in sorted(skipped.items())))
    return rows, config, notes


def _text_config(config: dict[str, Any] | None, tag: str, array: Any) -> dict[str, Any]:
    raw = array.item() if array.size == 1 else array.ravel()[0]
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    try:
        parsed: Any = decode_json(text)
    except ValueError:
        parsed = text
    config = dict(config or {})
    sub = _CONFIG_TAGS[tag]
    if sub is None and isinstance(parsed, dict):
        config.update(parsed)
    else:
        config[sub or tag] = parsed
    return config


def import_tensorboard(
    events_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, overwrite: bool = False, **storage_options: Any
) -> ImportReport:
    """Convert a folder of TensorBoard event files (local path or URI) into an rllog run at ``out``.

    Files under a URI are copied to a temporary folder first (the ``tensorboard``
    package reads local files).

    Raises:
        FileNotFoundError: no event files there.
        FileExistsError: ``out`` already has metrics.jsonl and ``overwrite`` is False.
        ImportError: the ``tensorboard`` package is not installed (extra ``rllog[tensorboard]``).
    """
    src = os.fspath(events_dir)
    if "://" in src and not src.startswith("file://"):
        storage = open_for_reading(src, **storage_options)
        names = [n for n in storage.list() if "/" not in n and _TFEVENTS.match(n)]
        if not names:
            raise FileNotFoundError(f"{src} has no events.out.tfevents.* files")
        with tempfile.TemporaryDirectory(prefix="rllog-tb-") as tmp:
            for n in names:
                Path(tmp, n).write_bytes(storage.read(n))
            rows, config, notes = tensorboard_rows(tmp)
    else:
        rows, config, notes = tensorboard_rows(src.removeprefix("file://"))
    return _write_run(out, rows, config, notes, overwrite, storage_options)


def _write_run(
    out: str | os.PathLike[str],
    rows: Rows,
    config: dict[str, Any] | None,
    notes: list[str],
    overwrite: bool,
    storage_options: dict[str, Any],
) -> ImportReport:
    resolver = StepResolver("step")
    for line, (step, metrics) in enumerate(rows, 1):
        resolver.add(line, {"step": step, **metrics})
    standing = [rows[line - 1] for line, _ in resolver.standing_rows()]
    superseded = [rows[line - 1] for line, _ in sorted(resolver.superseded, key=lambda lr: lr[0])]
    if superseded:
        notes.append(
            f"{len(resolver.restarts)} restart(s): {len(superseded)} rows replaced by a later file "
            "moved to metrics.superseded.jsonl"
        )
    storage = open_storage(out, **storage_options)
    if storage.exists(METRICS_FILE):
        if not overwrite:
            raise FileExistsError(f"{storage.url}/{METRICS_FILE} already exists; choose an empty OUT or overwrite (--force)")
        for name in (METRICS_FILE, SUPERSEDED_FILE, CONFIG_FILE):
            if storage.exists(name):
                storage.remove(name)
    with RunLogger(storage, config=config, code_diff=False) as logger:  # rllog's own writer and encoder
        for step, metrics in standing:
            logger.log_metrics(step, metrics)
    if superseded:
        encoder = MetricsEncoder()
        storage.write(SUPERSEDED_FILE, b"".join(bytes(encoder.encode_row(step, m)) for step, m in superseded))
    storage.close()
    steps = [step for step, _ in standing]
    return ImportReport(
        out=storage.url,
        rows=len(standing),
        superseded=len(superseded),
        first_step=min(steps) if steps else None,
        last_step=max(steps) if steps else None,
        config=config is not None,
        notes=notes,
    )
