"""What the doctor, the index page and plot need from a run, in one small view.

:func:`open_run` reads a run with :func:`rllog.read_run` and keeps what these three
need: metrics as a DataFrame (one row per step, the reader's rule for repeated steps),
the logged NaN/Inf cells (a DataFrame cannot tell them from missing keys), config,
checkpoint records, the HTML report of every iteration, and where the page goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rllog._format.layout import CODE_DIFF_FILE
from rllog._format.rows import nonfinite_cells
from rllog._read.run import read_run
from rllog._read.status import run_status
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
    # iteration -> the train rollout summaries file (rollout_summaries.jsonl) of that iteration
    summaries: dict[int, str] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)  # rllog._read.status.run_status
    code: dict[str, str] = field(default_factory=dict)  # code.diff's header: code_header()


#: the ``# key: value`` lines of code.diff's header that :func:`code_header` keeps
CODE_HEADER_KEYS = ("commit", "host", "command", "working directory", "python", "started", "repository")


def code_header(data: bytes) -> dict[str, str]:
    """The header of a code.diff (the format in :mod:`rllog._write.codediff`) as
    ``{"commit": "3f2c... (branch main)", "host": ..., "command": ..., ...}`` (keys of
    :data:`CODE_HEADER_KEYS` present); ``"note"``: the first line's reason when no code
    state was recorded. Reads the leading ``#`` lines only; never raises."""
    out: dict[str, str] = {}
    for raw in data[:65536].split(b"\n"):
        if not raw.startswith(b"#"):
            break
        line = raw.decode("utf-8", "replace")[1:].strip()
        if line.startswith("rllog code.diff:"):
            out["note"] = line.removeprefix("rllog code.diff:").strip()
            continue
        key, sep, value = line.partition(": ")
        if sep and key in CODE_HEADER_KEYS and key not in out:
            out[key] = value.strip()
    return out


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
        summaries={
            a.iteration: a.name
            for it in run.iterations
            for a in it.artifacts
            if a.kind == "rollout_summaries" and a.split == "train"
        },
        **_run_meta(run),
    )


def _run_meta(run: Any) -> dict[str, Any]:
    """``status`` (run_status.json with the lock probe) and ``code`` (code.diff's header) of
    an rllog run; empty for a foreign log (no such files)."""
    if run.metrics_name != "metrics.jsonl":
        return {}
    try:
        code = code_header(run.storage.read(CODE_DIFF_FILE))
    except (OSError, FileNotFoundError):
        code = {}
    return {"status": run_status(run.storage), "code": code}


def write_bytes(out: str, data: bytes) -> None:
    """Write ``data`` to the file ``out``: a local path (``~`` expanded) or a URL (fsspec)."""
    if "://" in out:
        import fsspec

        with fsspec.open(out, "wb") as f:
            f.write(data)
    else:
        from pathlib import Path

        Path(out).expanduser().write_bytes(data)
