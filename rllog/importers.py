"""Importers: turn Hugging Face TRL and TensorBoard logs into rllog run folders.

``rllog import trl trainer_state.json OUT`` and ``rllog import tensorboard EVENTS_DIR OUT``
write ``OUT/metrics.jsonl`` and ``OUT/config.json`` with rllog's own
:class:`~rllog.RunLogger` (so NaN stays a ``NaN`` token, null stays null, secret-looking
config fields are redacted) and, when restarts overlapped, ``OUT/metrics.superseded.jsonl``. Every ``rllog`` command reads the result.

How each source is parsed: :mod:`rllog._read.foreign`.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllog._format.codec import MetricsEncoder, decode_json
from rllog._format.layout import CONFIG_FILE, METRICS_FILE, SUPERSEDED_FILE
from rllog._format.rows import StepResolver
from rllog._read.foreign import TFEVENTS, Rows, tensorboard_rows, trl_rows
from rllog._run import RunLogger
from rllog.errors import RunFormatError
from rllog.storage import open_storage

__all__ = ["ImportReport", "import_trl", "import_tensorboard", "trl_rows", "tensorboard_rows"]


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


def _read_source(src: str | os.PathLike[str], storage_options: dict[str, Any]) -> bytes:
    src = os.fspath(src)
    if "://" not in src or src.startswith("file://"):
        return Path(src.removeprefix("file://")).expanduser().read_bytes()
    parent, _, name = src.rstrip("/").rpartition("/")
    return open_storage(parent, mode="r", **storage_options).read(name)


def import_trl(
    trainer_state: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    **storage_options: Any,
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


def import_tensorboard(
    events_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    **storage_options: Any,
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
        storage = open_storage(src, mode="r", **storage_options)
        names = [n for n in storage.list() if "/" not in n and TFEVENTS.match(n)]
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
            raise FileExistsError(
                f"{storage.url}/{METRICS_FILE} already exists; choose an empty OUT or overwrite (--force)"
            )
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
