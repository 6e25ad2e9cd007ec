"""The ``rllog`` command line (click). Every subcommand accepts local paths and URIs.

``rllog demo LOG_PATH`` runs the demo RL training loop (see :mod:`rllog._demo`).
"""

from __future__ import annotations

import click

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rllog")
def main() -> None:
    """rllog: look at RL training runs written by rllog (or imported into its format)."""


@main.command()
@click.argument("log_path")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in LOG_PATH.")
@click.option("--iterations", type=click.IntRange(min=1), default=40, show_default=True, help="Training iterations (batches).")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed of the policy and the prompts.")
@click.option("--save-every", type=click.IntRange(min=1), default=5, show_default=True, help="Checkpoint every N iterations.")
@click.option("--iteration-delay", type=click.FloatRange(min=0), default=0.0, help="Seconds to sleep per iteration, to watch the run live (e.g. with `rllog tail -f`).")
@click.option("--quiet", is_flag=True, help="Print no progress lines.")
def demo(log_path: str, resume: bool, iterations: int, seed: int, save_every: int, iteration_delay: float, quiet: bool) -> None:
    """Run a small real RL training loop (arithmetic, GRPO-style) that logs to LOG_PATH.

    LOG_PATH is a folder or a URL (gs://, s3://, memory://). No GPU, no downloads.
    """
    from rllog._demo import DemoConfig, run_demo

    cfg = DemoConfig(log_path=log_path, n_batches=iterations, seed=seed, save_every=save_every, iteration_delay=iteration_delay)
    run_demo(cfg, resume=resume, quiet=quiet)


# --- Reading runs: summary, tail, diff, import (issue #6 part A) -------------------------------

_STEP_KEY = click.option("--step-key", default=None, help="Step column (default: the first of step, global_step, _step, iteration, grad_step).")


@main.command()
@click.argument("run")
@click.option("-k", "--key", "keys", multiple=True, help="Show the last value of KEY (repeatable; default: the key metrics found).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@_STEP_KEY
def summary(run: str, keys: tuple[str, ...], as_json: bool, step_key: str | None) -> None:
    """Summarize RUN: rows and steps, last values of the key metrics, time per iteration,
    iterations with reports, checkpoints, config, files and warnings.

    RUN is a run folder or URI, a metrics .jsonl file, or a TRL trainer_state.json.
    """
    from rllog._summary import format_summary, summarize
    from rllog.encoding import encode_json
    from rllog.reader import read_run

    info = summarize(read_run(run, step_key=step_key), list(keys) or None)
    click.echo(encode_json(info, indent=2).decode() if as_json else format_summary(info))


@main.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing rows as they are appended (Ctrl-C stops).")
@click.option("-n", "--lines", "n_rows", type=click.IntRange(min=0), default=10, show_default=True, help="Rows to print first.")
@click.option("-k", "--key", "keys", multiple=True, help="Print only the step and KEY (repeatable).")
@click.option("--interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True, help="Seconds between checks with -f.")
def tail(run: str, follow: bool, n_rows: int, keys: tuple[str, ...], interval: float) -> None:
    """Print the last metric rows of RUN as they were logged; with -f, follow new rows.

    RUN is a run folder or URI, or a metrics .jsonl file. Only new bytes are read on each
    check; with -f a row appears within INTERVAL seconds of being written (a run on an
    object store shows rows once the writer has flushed them).
    """
    import json
    import os
    import time

    from rllog.reader import MetricsTail
    from rllog.storage import open_storage

    folder, name = _metrics_location(run)
    if ("://" not in folder or folder.startswith("file://")) and not os.path.isdir(folder.removeprefix("file://")):
        raise click.ClickException(f"no run folder at {folder} (tail reads a run folder, URI or metrics .jsonl file)")
    reader = MetricsTail(open_storage(folder), name)

    def show(rows: list[tuple[int, dict]]) -> None:
        for _, row in rows:
            if keys:
                step = next((f"{k}={row[k]}" for k in ("step", "global_step", "_step") if k in row), "")
                cells = [f"{k}={row[k]:.6g}" if isinstance(row.get(k), float) else f"{k}={row.get(k, '-')}" for k in keys]
                click.echo("  ".join([step, *cells]))
            else:
                click.echo(json.dumps(row, ensure_ascii=False))
        for problem in reader.problems:
            click.echo(f"warning: {problem}", err=True)
        reader.problems.clear()

    def last(rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
        return rows[-n_rows:] if n_rows else []

    show(last(reader.poll()))
    if not follow:
        return
    try:
        while True:
            time.sleep(interval)
            rows = reader.poll()
            show(last(rows) if reader.rewritten else rows)  # rewritten on resume: start over
    except KeyboardInterrupt:
        pass


def _metrics_location(run: str) -> tuple[str, str]:
    """``(folder, file name)`` of the metrics file of RUN (a folder, URI or .jsonl file)."""
    import os

    local = "://" not in run or run.startswith("file://")
    path = run.removeprefix("file://") if local else run
    if path.endswith(".jsonl") and (not local or not os.path.isdir(path)):
        folder, _, name = path.rstrip("/").rpartition("/")
        return folder or ".", name
    return path, "metrics.jsonl"


@main.command()
@click.argument("run_a")
@click.argument("run_b")
@click.option("-k", "--key", "keys", multiple=True, help="Compare KEY (repeatable; default: the key metrics found).")
@click.option("--all", "show_all", is_flag=True, help="List every config difference (default: 20 of each kind).")
@_STEP_KEY
def diff(run_a: str, run_b: str, keys: tuple[str, ...], show_all: bool, step_key: str | None) -> None:
    """Compare two runs: config differences, then the last values of key metrics side by side."""
    from rllog._summary import format_diff
    from rllog.reader import read_run

    a, b = read_run(run_a, step_key=step_key), read_run(run_b, step_key=step_key)
    click.echo(format_diff(a, b, list(keys) or None, max_lines=None if show_all else 20))


@main.group(name="import")
def import_() -> None:
    """Convert other trainers' logs into rllog run folders that every command reads."""


def _report_import(report) -> None:
    span = f", steps {report.first_step}..{report.last_step}" if report.first_step is not None else ""
    aside = f", {report.superseded} superseded rows in metrics.superseded.jsonl" if report.superseded else ""
    click.echo(f"wrote {report.out}: {report.rows} rows{span}{aside}; config.json {'written' if report.config else 'none'}")
    for note in report.notes:
        click.echo(f"  {note}")


@import_.command(name="trl")
@click.argument("trainer_state")
@click.argument("out")
@click.option("--force", is_flag=True, help="Replace metrics.jsonl and config.json if OUT already has them.")
def import_trl_cmd(trainer_state: str, out: str, force: bool) -> None:
    """Import a TRL/transformers trainer_state.json (log_history: train, eval_* and summary rows)
    into the run folder OUT (a path or URI)."""
    from rllog.importers import import_trl

    try:
        _report_import(import_trl(trainer_state, out, overwrite=force))
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


@import_.command(name="tensorboard")
@click.argument("events_dir")
@click.argument("out")
@click.option("--force", is_flag=True, help="Replace metrics.jsonl and config.json if OUT already has them.")
def import_tensorboard_cmd(events_dir: str, out: str, force: bool) -> None:
    """Import the scalars of a TensorBoard log folder (events.out.tfevents.* files; several
    files are restarts, the later one wins) into the run folder OUT (a path or URI)."""
    from rllog.importers import import_tensorboard

    try:
        _report_import(import_tensorboard(events_dir, out, overwrite=force))
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None


# --- end of reading runs ------------------------------------------------------------------------
