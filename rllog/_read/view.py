"""What the doctor, the index page and plot need from a run, in one small view.

:func:`open_run` reads a run with :func:`rllog.read_run` and keeps what these three
need: metrics as a DataFrame (one row per step, the reader's rule for repeated steps),
the logged NaN/Inf cells (a DataFrame cannot tell them from missing keys), config,
checkpoint records, the HTML report of every iteration, and where the page goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rllog._format.rows import nonfinite_cells
from rllog._read.run import read_run
from rllog.storage import Storage

if TYPE_CHECKING:
    import pandas as pd

    from rllog._format.layout import Artifact


@dataclass
class RunView:
    url: str
    storage: Storage
    metrics: pd.DataFrame
    nonfinite: dict[str, list[int]]
    step_key: str | None = "step"
    config: Any = None
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    reports: list[Artifact] = field(default_factory=list)  # the HTML reports, by iteration
    #: the crashed run's reports and rollout summaries a resume moved into superseded/
    superseded: list[Artifact] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # Run.damaged_lines: lines every reader skips
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
        reports=[a for it in run.iterations for a in it.artifacts if a.kind == "html"],
        superseded=[a for it in run.superseded_iterations for a in it.artifacts if a.kind != "logtree"],
        warnings=list(run.warnings),
        damaged=run.damaged_lines,
        index_name=_index_name(run.metrics_name),
        name=folder if run.metrics_name == "metrics.jsonl" else f"{folder}/{run.metrics_name}",
    )


def write_bytes(out: str, data: bytes) -> None:
    """Write ``data`` to the file ``out``: a local path (``~`` expanded) or a URL (fsspec)."""
    if "://" in out:
        import fsspec

        with fsspec.open(out, "wb") as f:
            f.write(data)
    else:
        from pathlib import Path

        Path(out).expanduser().write_bytes(data)
