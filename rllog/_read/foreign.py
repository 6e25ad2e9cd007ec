"""Pure parsers of other tools' logs: a TRL ``trainer_state.json`` and TensorBoard event files.

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
go through the reader's rule (:mod:`rllog._format.rows`): a file that starts at an earlier
step than the previous file reached is a restart, so the later file wins from its first
step on, and the replaced rows go to ``metrics.superseded.jsonl``.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

from rllog._format.codec import decode_json, encode_json
from rllog.errors import RunFormatError

__all__ = ["Rows", "TFEVENTS", "trl_rows", "tensorboard_rows"]

Rows = list[tuple[int, dict[str, Any]]]


_CONFIG_TAGS = {"args/text_summary": None, "model_config/text_summary": "model_config"}


#: TensorBoard event file names; group 1 is the start time (seconds), which orders restarts
TFEVENTS = re.compile(r"events\.out\.tfevents\.(\d+)")


def _same(a: Any, b: Any) -> bool:
    return a == b or (a != a and b != b)


def _scalar(value: Any, where: str, notes: list[str]) -> Any:
    if isinstance(value, (dict, list)):
        notes.append(f"{where} is a {type(value).__name__}, not a scalar; written as its JSON text")
        return encode_json(value).decode()
    return value


def trl_rows(
    state: dict[str, Any], where: str = "trainer_state.json"
) -> tuple[Rows, dict[str, Any], list[str]]:
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
        metrics = {
            k: _scalar(v, f"{where}: log_history[{i}][{k!r}]", notes) for k, v in entry.items() if k != "step"
        }
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
        raise FileNotFoundError(
            f"no TensorBoard log at {events_dir}: expected a folder of events.out.tfevents.* files"
        )
    files = [p for p in events_dir.iterdir() if p.is_file() and TFEVENTS.match(p.name)]
    if not files:
        raise FileNotFoundError(
            f"{events_dir} has no events.out.tfevents.* files (give the folder that holds them)"
        )
    return sorted(files, key=lambda p: (int(TFEVENTS.match(p.name)[1]), p.name))  # type: ignore[index]  # every file matched above


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
        raise ImportError(
            f"importing TensorBoard logs needs the tensorboard package: pip install 'rllog[tensorboard]' ({exc})"
        ) from exc

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
            notes.append(
                f"{path.name}: {repeated} (tag, step) values written twice ({differing} different); the later one kept"
            )
    if skipped:
        notes.append(
            "skipped non-scalar summaries: " + ", ".join(f"{t} ({n})" for t, n in sorted(skipped.items()))
        )
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
