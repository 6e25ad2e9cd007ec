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
    config: Any = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def reports_in(names: list[str]) -> list[Report]:
    """The HTML reports among file ``names``, by iteration then train before eval."""
    out = []
    for name in names:
        parsed = parse_artifact_name(name)
        if parsed is not None and parsed[3] == "html":
            out.append(Report(parsed[2], parsed[0], parsed[1], name))
        elif m := _FLAT_HTML.match(name):
            out.append(Report(int(m[1]), "train", None, name))
    return sorted(out, key=lambda r: (r.iteration, r.split != "train", r.eval_name or "", r.name))


def open_run(log_path: Any) -> RunView:
    """Read the run at ``log_path`` (path, URL or Storage).

    Raises:
        FileNotFoundError: no metrics.jsonl in the run.
    """
    import pandas as pd

    from rllog.doctor import _nonfinite_in_jsonl
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
        nonfinite=_nonfinite_in_jsonl(data),
        config=config,
        checkpoints=checkpoints,
        reports=reports_in(storage.list()),
        warnings=warnings,
    )
