"""What the doctor, the index page and plot need from a run, in one small view.

:func:`open_run` reads a run folder or URL: metrics as a DataFrame, the logged NaN/Inf
cells (a DataFrame cannot tell them from missing keys), config, checkpoint records and
the HTML reports of every iteration.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rllog._names import parse_artifact_name
from rllog.storage import Storage, open_storage

if TYPE_CHECKING:
    import pandas as pd

_FLAT_HTML = re.compile(r"^iteration_(\d{6,})\.html$")  # older tinker-cookbook runs


@dataclass
class Report:
    """One iteration's HTML report: ``split`` is ``"train"`` or ``"eval"``, ``name`` the file name."""

    iteration: int
    split: str
    eval_name: str | None
    name: str


@dataclass
class RunView:
    url: str
    storage: Storage
    metrics: pd.DataFrame
    nonfinite: dict[str, list[int]]
    step_key: str | None = "step"
    config: Any = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    index_name: str = "index.html"  # where ``rllog index`` writes the page, inside ``storage``
    name: str = ""  # a short title


def _index_name(metrics_name: str) -> str:
    """``index.html`` beside metrics.jsonl; ``arithmetic_index.html`` beside arithmetic_metrics.jsonl;
    ``trainer_state_index.html`` beside trainer_state.json (several runs may share a folder)."""
    if metrics_name == "metrics.jsonl":
        return "index.html"
    if metrics_name.endswith("metrics.jsonl"):
        return metrics_name[: -len("metrics.jsonl")] + "index.html"
    return metrics_name.rsplit(".", 1)[0] + "_index.html"


def open_run(log_path: Any) -> RunView:
    """Read the run at ``log_path`` with :func:`rllog.read_run` (a folder, URL, metrics file,
    trainer_state.json or Storage).

    Raises:
        FileNotFoundError: nothing at ``log_path``. RunFormatError: not a run.
    """
    from rllog.doctor import nonfinite_cells

    try:
        from rllog.reader import read_run
    except ImportError:  # TEMPORARY until the reader (issue #6 part A) is on main
        return _open_run_fallback(log_path)
    run = read_run(log_path)
    folder = run.url.rstrip("/").rsplit("/", 1)[-1]
    return RunView(
        url=run.url,
        storage=run.storage,
        metrics=run.metrics,
        nonfinite=nonfinite_cells(run.rows, step_key=run.step_key),
        step_key=run.step_key,
        config=run.config,
        checkpoints=list(run.checkpoints),
        reports=[
            Report(a.iteration, a.split, a.eval_name, a.name)
            for it in run.iterations
            for a in it.artifacts
            if a.kind == "html"
        ],
        warnings=list(run.warnings),
        index_name=_index_name(run.metrics_name),
        name=folder if run.metrics_name == "metrics.jsonl" else f"{folder}/{run.metrics_name}",
    )


def _reports_in(names: list[str]) -> list[Report]:
    out = []
    for name in names:
        parsed = parse_artifact_name(name)
        if parsed is not None and parsed[3] == "html":
            out.append(Report(parsed[2], parsed[0], parsed[1], name))
        elif m := _FLAT_HTML.match(name):
            out.append(Report(int(m[1]), "train", None, name))
    return sorted(out, key=lambda r: (r.iteration, r.split != "train", r.eval_name or "", r.name))


def _open_run_fallback(log_path: Any) -> RunView:
    """Read the run at ``log_path`` (path, URL or Storage).

    Raises:
        FileNotFoundError: no metrics.jsonl in the run.
    """
    import pandas as pd

    from rllog.doctor import nonfinite_cells
    from rllog.encoding import decode_json

    if isinstance(log_path, (str, os.PathLike)) and "://" not in os.fspath(log_path) and not os.path.isdir(log_path):
        raise FileNotFoundError(f"no run folder at {os.fspath(log_path)!r}")  # open_storage would create it
    storage = open_storage(log_path)
    data = storage.read("metrics.jsonl")
    rows, warnings = [], []
    for number, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            row = decode_json(line)
        except ValueError:
            warnings.append(f"metrics.jsonl line {number}: not JSON, skipped")
            continue
        if isinstance(row, dict):
            rows.append(row)
    metrics = pd.DataFrame(rows)
    config = decode_json(storage.read("config.json")) if storage.exists("config.json") else None
    checkpoints = []
    if storage.exists("checkpoints.jsonl"):
        checkpoints = [decode_json(x) for x in storage.read("checkpoints.jsonl").split(b"\n") if x.strip()]
    return RunView(
        url=storage.url,
        storage=storage,
        metrics=metrics,
        nonfinite=nonfinite_cells(rows),
        config=config,
        checkpoints=checkpoints,
        reports=_reports_in(storage.list()),
        warnings=warnings,
        name=storage.url.rstrip("/").rsplit("/", 1)[-1],
    )
