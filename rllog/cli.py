"""The ``rllog`` command line (click). Every subcommand accepts local paths and URIs.

``rllog demo LOG_PATH`` runs the demo RL training loop (see :mod:`rllog._demo`).
"""

from __future__ import annotations

import click

# a logged name or config value holding control characters could move the cursor, retitle or
# clear the user's terminal, or write its clipboard: one rule for every line printed
from rllog._format.terminal import escape_controls as _escape

__all__ = ["main"]


def _echo(text: str, err: bool = False) -> None:
    """Every line the CLI prints goes through here: control characters escaped."""
    click.echo(_escape(text), err=err)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rllog")
def main() -> None:
    """rllog: look at RL training runs written by rllog (or imported into its format)."""


@main.command()
@click.argument("log_path")
@click.option("--resume", is_flag=True, help="Continue from the last checkpoint in LOG_PATH.")
@click.option(
    "--iterations",
    type=click.IntRange(min=1),
    default=40,
    show_default=True,
    help="Training iterations (batches).",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Random seed of the policy and the prompts."
)
@click.option(
    "--save-every",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Checkpoint every N iterations.",
)
@click.option(
    "--iteration-delay",
    type=click.FloatRange(min=0),
    default=0.0,
    help="Seconds to sleep per iteration, to watch the run live (e.g. with `rllog tail -f`).",
)
@click.option("--quiet", is_flag=True, help="Print no progress lines.")
def demo(
    log_path: str,
    resume: bool,
    iterations: int,
    seed: int,
    save_every: int,
    iteration_delay: float,
    quiet: bool,
) -> None:
    """Run a small real RL training loop (arithmetic, GRPO-style) that logs to LOG_PATH.

    LOG_PATH is a folder or a URL (gs://, s3://, memory://). No GPU, no downloads.
    """
    from rllog._demo import DemoConfig, run_demo

    cfg = DemoConfig(
        log_path=log_path,
        n_batches=iterations,
        seed=seed,
        save_every=save_every,
        iteration_delay=iteration_delay,
    )
    run_demo(cfg, resume=resume, quiet=quiet)


# --- Reading runs: summary, tail, diff, import (issue #6 part A) -------------------------------

RUN_HELP = "a run folder or URI, a metrics .jsonl file, or a TRL trainer_state.json"


class _CliError(click.ClickException):
    """A clean ``Error: ...`` line and exit code 2 (bad input: a missing run, a bad value)."""

    exit_code = 2

    def format_message(self) -> str:
        return _escape(self.message)


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:  # "[Errno 2] ..." -> what and where
        return f"{exc.strerror.lower()}: {exc.filename}"
    return str(exc) or type(exc).__name__


def _clean_errors(fn):
    """Turn the errors of reading or writing a run (OSError, ValueError, TypeError, KeyError)
    into ``Error: <message>`` and exit code 2, instead of a traceback."""
    import functools

    from rllog.errors import RllogError

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except (OSError, ValueError, TypeError, KeyError, ImportError, RllogError) as exc:
            raise _CliError(_error_text(exc)) from None

    return wrapper


_STEP_KEY = click.option(
    "--step-key",
    default=None,
    help="Step column (default: the first of step, global_step, _step, iteration, grad_step).",
)


@main.command()
@click.argument("run")
@click.option(
    "-k",
    "--key",
    "keys",
    multiple=True,
    help="Show the last value of KEY (repeatable; default: the key metrics found).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the summary as one JSON object (strict JSON: NaN/Infinity as strings).",
)
@_STEP_KEY
@_clean_errors
def summary(run: str, keys: tuple[str, ...], as_json: bool, step_key: str | None) -> None:
    """Summarize RUN: rows and steps, last values of the key metrics, time per iteration,
    iterations with reports, checkpoints, config, files and warnings.

    RUN is a run folder or URI, a metrics .jsonl file, or a TRL trainer_state.json.
    Exit code 2 when RUN cannot be read.
    """
    from rllog._format.codec import encode_json
    from rllog._read.run import read_run
    from rllog._read.summary import format_summary, summarize

    data = read_run(run, step_key=step_key)
    _check_keys(keys, [data])
    info = summarize(data, list(keys) or None)
    _echo(encode_json(_nonfinite_as_text(info), indent=2).decode() if as_json else format_summary(info))


def _nonfinite_as_text(value):
    """``value`` with each NaN/±Infinity float as the string ``"NaN"``/``"Infinity"``/``"-Infinity"``
    (strict JSON for scripts, as ``rllog doctor --json`` writes a finding's value)."""
    if isinstance(value, float) and value - value != 0:
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _nonfinite_as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nonfinite_as_text(v) for v in value]
    return value


@main.command()
@click.argument("run")
@click.option("-f", "--follow", is_flag=True, help="Keep printing rows as they are appended (Ctrl-C stops).")
@click.option(
    "-n",
    "--lines",
    "n_rows",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Rows to print first.",
)
@click.option("-k", "--key", "keys", multiple=True, help="Print only the step and KEY (repeatable).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=0.2,
    show_default=True,
    help="Seconds between checks with -f.",
)
@_clean_errors
def tail(run: str, follow: bool, n_rows: int, keys: tuple[str, ...], interval: float) -> None:
    """Print the last metric rows of RUN as they were logged; with -f, follow new rows.

    RUN is a run folder or URI, or a metrics .jsonl file. Only new bytes are read on each
    check; with -f a row appears within INTERVAL seconds of being written (a run on an
    object store shows rows once the writer has flushed them), and a failed read (a
    bucket that does not answer) is warned about while following goes on.
    """
    import json
    import os
    import time

    from rllog._format.vocab import STEP_KEYS, check_keys
    from rllog._read.run import MetricsTail
    from rllog.storage import open_storage

    folder, name = _metrics_location(run)
    if ("://" not in folder or folder.startswith("file://")) and not os.path.isdir(
        folder.removeprefix("file://")
    ):
        raise _CliError(
            f"no run folder at {folder}: expected a run folder or URI with metrics.jsonl, or a metrics .jsonl file"
        )
    storage = open_storage(folder, mode="r")
    if not follow and not storage.exists(name):
        raise _CliError(
            f"no {name} in {storage.url}: expected a run folder or URI with metrics.jsonl, or a metrics .jsonl file"
        )
    reader = MetricsTail(storage, name)
    seen: dict[str, None] = {}  # every key of the rows read so far, in order
    waiting: set[str] = set()  # -k keys no row has yet (with -f: warned about, shown as -)

    def show(rows: list[tuple[int, dict]]) -> None:
        if keys and rows and not all(k in seen or k in waiting for k in keys):
            for _, row in rows:
                seen.update(dict.fromkeys(row))
            missing = [k for k in keys if k not in seen and k not in waiting]
            if missing:  # not in these rows: an evaluation key may be in earlier ones
                seen.update(dict.fromkeys(_keys_in(storage, name, reader.offset, missing)))
            absent = [k for k in missing if k not in seen]
            try:
                check_keys(absent, [k for k in seen if k not in STEP_KEYS], f"{storage.url}/{name}")
            except ValueError as exc:
                if not follow:
                    raise _CliError(str(exc)) from None
                waiting.update(absent)  # a key the run has not logged yet (an evaluation)
                _echo(f"warning: {exc}; shown as - until a row has it", err=True)
        for _, row in rows:
            if keys:
                step = next((f"{k}={row[k]}" for k in ("step", "global_step", "_step") if k in row), "")
                cells = [
                    f"{k}={row[k]:.6g}" if isinstance(row.get(k), float) else f"{k}={row.get(k, '-')}"
                    for k in keys
                ]
                _echo("  ".join([step, *cells]))
            else:
                _echo(json.dumps(row, ensure_ascii=False))
        for problem in reader.problems:
            _echo(f"warning: {problem}", err=True)
        reader.problems.clear()

    def last(rows: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
        return rows[-n_rows:] if n_rows else []

    show(_last_rows(reader, n_rows))
    if not follow:
        return
    failing = False  # the last read failed (said once per outage)
    try:
        while True:
            time.sleep(interval)
            try:
                rows = reader.poll()
            except OSError as exc:  # a bucket that does not answer for a while: keep following
                if not failing:
                    _echo(
                        f"warning: could not read {storage.url}/{name} ({_error_text(exc)}); still following",
                        err=True,
                    )
                failing = True
                continue
            if failing:
                _echo(f"warning: reading {storage.url}/{name} again", err=True)
                failing = False
            show(last(rows) if reader.rewritten else rows)  # rewritten on resume: start over
    except KeyboardInterrupt:
        pass


_TAIL_BLOCK = 1 << 20


def _last_rows(reader, n: int) -> list[tuple[int, dict]]:
    """The last ``n`` rows of the reader's file, read from its end (memory: those rows and
    one block, whatever the file size); the reader is left after them, for ``-f``.

    Lines are counted back from the end; damaged lines among them are skipped (warned
    about with their line numbers, counted over the file only then), and the window
    widens until it holds ``n`` rows or the file's start."""
    storage, name = reader.storage, reader.name
    try:
        size = storage.size(name)
    except FileNotFoundError:
        return []
    want = max(n, 1)
    while True:
        start = _start_of_last_lines(storage, name, size, want)
        reader.seek(start)
        rows = reader.poll(end=size)
        if reader.problems and start > 0:  # name the damaged lines by their real numbers
            before = _count_newlines(storage, name, start)
            reader.seek(start, before)
            rows = reader.poll(end=size)
        if len(rows) >= n or start == 0:
            return rows[-n:] if n else []
        want *= 2


def _start_of_last_lines(storage, name: str, size: int, n: int) -> int:
    """Byte offset where the last ``n`` non-blank complete lines of the first ``size`` bytes begin."""
    pos, buf = size, b""
    while pos > 0:
        lo = max(0, pos - _TAIL_BLOCK)
        buf = storage.read_range(name, lo, pos) + buf
        pos = lo
        end = buf.rfind(b"\n") + 1  # complete lines only: a partial last line is the writer's
        lines = buf[:end].split(b"\n")[:-1]
        seen, cut = 0, end
        for line in reversed(lines[1:] if pos > 0 else lines):  # the first may be cut by the block
            cut -= len(line) + 1
            if line.strip():
                seen += 1
                if seen == n:
                    return pos + cut
        if pos == 0:
            return 0
    return 0


def _keys_in(storage, name: str, end: int, wanted: list[str]) -> list[str]:
    """The keys of the rows in the first ``end`` bytes of ``name``, read block by block (memory:
    one block and the keys), stopping once every key of ``wanted`` was seen."""
    from rllog._format.jsonl import parse_lines

    keys: dict[str, None] = {}
    pos, rest = 0, b""
    while pos < end and not all(k in keys for k in wanted):
        block = rest + storage.read_range(name, pos, min(end, pos + _TAIL_BLOCK))
        pos = min(end, pos + _TAIL_BLOCK)
        cut = block.rfind(b"\n") + 1
        rows, _ = parse_lines(block[:cut], name, 1)
        rest = block[cut:]
        for _, row in rows:
            keys.update(dict.fromkeys(row))
    return list(keys)


def _count_newlines(storage, name: str, end: int) -> int:
    count = 0
    for lo in range(0, end, 8 * _TAIL_BLOCK):
        count += storage.read_range(name, lo, min(end, lo + 8 * _TAIL_BLOCK)).count(b"\n")
    return count


def _check_keys(keys: tuple[str, ...], runs: list) -> None:
    """An unknown ``-k`` key is an error naming the closest keys of the runs (any run has it: fine)."""
    from rllog._format.vocab import check_keys

    if keys:
        known = list(dict.fromkeys(c for r in runs for c in r.metrics.columns if c != r.step_key))
        check_keys(keys, known, " or ".join(r.url for r in runs))


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
@click.option(
    "-k", "--key", "keys", multiple=True, help="Compare KEY (repeatable; default: the key metrics found)."
)
@click.option(
    "--all", "show_all", is_flag=True, help="List every config difference (default: 20 of each kind)."
)
@_STEP_KEY
@_clean_errors
def diff(run_a: str, run_b: str, keys: tuple[str, ...], show_all: bool, step_key: str | None) -> None:
    """Compare two runs: config differences, then the last values of key metrics side by side.

    RUN_A and RUN_B are each a run folder or URI, a metrics .jsonl file, or a TRL
    trainer_state.json. Exit code 2 when one cannot be read.
    """
    from rllog._read.run import read_run
    from rllog._read.summary import format_diff

    a, b = read_run(run_a, step_key=step_key), read_run(run_b, step_key=step_key)
    _check_keys(keys, [a, b])
    _echo(format_diff(a, b, list(keys) or None, max_lines=None if show_all else 20))


@main.group(name="import")
def import_() -> None:
    """Convert other trainers' logs into rllog run folders that every command reads."""


def _report_import(report) -> None:
    span = f", steps {report.first_step}..{report.last_step}" if report.first_step is not None else ""
    aside = f", {report.superseded} superseded rows in metrics.superseded.jsonl" if report.superseded else ""
    _echo(
        f"wrote {report.out}: {report.rows} rows{span}{aside}; config.json {'written' if report.config else 'none'}"
    )
    for note in report.notes:
        _echo(f"  {note}")


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
    except FileNotFoundError as exc:
        raise _CliError(
            f"no trainer_state.json at {trainer_state}: expected a TRL/transformers trainer_state.json file ({_error_text(exc)})"
        ) from None
    except (OSError, ValueError) as exc:
        raise _CliError(_error_text(exc)) from None


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
    except (OSError, ValueError) as exc:
        raise _CliError(_error_text(exc)) from None


# --- end of reading runs ------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# doctor, index, plot: stability checks and pictures of a run (rllog.doctor,
# rllog.index, rllog.plot). Exit codes of `rllog doctor`:
#   0  no finding at or above --fail-on (default: warning)
#   1  at least one finding at or above --fail-on
#   2  bad usage, or the run could not be read (no metrics.jsonl, bad thresholds)
# ---------------------------------------------------------------------------


_THRESHOLD_HELP = (
    "Change a threshold, e.g. --set ratio_high=3 (repeatable). Names: see `rllog doctor --list-thresholds`."
)


def _thresholds(config: str | None, overrides: tuple[str, ...]):
    from rllog.doctor import Thresholds, thresholds_from_file

    try:
        base = thresholds_from_file(config) if config else Thresholds()
        return base.with_overrides(overrides) if overrides else base
    except (OSError, ValueError) as exc:
        raise click.UsageError(_error_text(exc)) from None


def _list_thresholds(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    import msgspec

    from rllog.doctor import THRESHOLD_HELP, Thresholds

    defaults = [(f"{name} = {value}", name) for name, value in msgspec.structs.asdict(Thresholds()).items()]
    width = max(len(text) for text, _ in defaults)
    for text, name in defaults:
        _echo(f"{text:<{width}}  {THRESHOLD_HELP.get(name, '')}".rstrip())
    ctx.exit(0)


@main.command()
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as one JSON object (for scripts).")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE", help=_THRESHOLD_HELP)
@click.option(
    "--config", type=click.Path(exists=True, dir_okay=False), help="JSON or TOML file with thresholds."
)
@click.option(
    "--fail-on",
    type=click.Choice(["warning", "error", "never"]),
    default="warning",
    show_default=True,
    help="Lowest severity that makes the exit code 1.",
)
@click.option(
    "--list-thresholds",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_thresholds,
    help="Print every threshold and its default, then exit.",
)
def doctor(run: str, as_json: bool, overrides: tuple[str, ...], config: str | None, fail_on: str) -> None:
    """Check RUN's metrics for the instability signals of PPO/GRPO training.

    The signals of TRL's PPO/GRPO logging docs (huggingface.co/docs/trl/logging), under
    TRL, tinker-cookbook, verl and OpenRLHF metric names: ratio far from 1, high clip
    fractions and approx KL, negative or large KL, value loss spikes, entropy collapsing
    or rising, truncated completions, reward flat while KL grows, NaN/Inf. Each finding
    names the metric, the steps, the value, the threshold and what to try.

    Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 bad
    usage or an unreadable run.
    """
    import json

    from rllog.doctor import check_run

    t = _thresholds(config, overrides)
    try:
        findings = check_run(run, t)
    except (OSError, ValueError) as exc:
        raise _CliError(f"cannot read run {run}: {_error_text(exc)}") from None
    levels = {"warning": ("warning", "error"), "error": ("error",), "never": ()}[fail_on]
    failed = any(f.severity in levels for f in findings)
    if as_json:
        _echo(
            json.dumps({"run": run, "ok": not failed, "findings": [f.to_dict() for f in findings]}, indent=2)
        )
    elif not findings:
        _echo(f"{run}: no problems found")
    else:
        styles = {"error": "red", "warning": "yellow", "info": "blue"}
        for f in findings:
            label = click.style(f"{f.severity.upper():8}", fg=styles[f.severity], bold=True)
            click.echo(f"{label} {_escape(f.message)}")  # our colour codes kept, the message's escaped
            _echo(f"         try: {f.advice}")
    if failed:
        raise SystemExit(1)


@main.command()
@click.argument("run")
@click.option(
    "-k",
    "--key",
    "keys",
    multiple=True,
    help="Also chart KEY (repeatable), besides the main and flagged metrics.",
)
@click.option(
    "-o",
    "--out",
    default=None,
    help="Write the page to OUT (a path or URL) instead of RUN/index.html, e.g. for a run you cannot write to.",
)
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE", help=_THRESHOLD_HELP)
@click.option(
    "--config", type=click.Path(exists=True, dir_okay=False), help="JSON or TOML file with doctor thresholds."
)
@click.option(
    "--smooth",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.6,
    show_default=True,
    help="Weight of the smoothed line (TensorBoard's debiased EMA) drawn beside each raw one; 0: none.",
)
def index(
    run: str,
    keys: tuple[str, ...],
    out: str | None,
    overrides: tuple[str, ...],
    config: str | None,
    smooth: float,
) -> None:
    """Write RUN/index.html: charts, doctor findings, config, checkpoints, iteration reports.

    RUN is a run folder or URI, a metrics .jsonl file, or a TRL trainer_state.json. The
    page is self-contained (no scripts, no network requests); open it in a browser.
    Exit code 2 when RUN cannot be read or the page cannot be written.
    """
    from rllog.index import write_index

    t = _thresholds(config, overrides)
    try:
        url, findings = write_index(run, t, keys=keys, out=out, smooth=smooth)
    except (OSError, ValueError) as exc:
        raise _CliError(f"cannot write the index of {run}: {_error_text(exc)}") from None
    problems = sum(f.severity != "info" for f in findings)
    _echo(f"wrote {url}" + (f" ({problems} doctor findings)" if problems else ""))


@main.command()
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "-k", "--key", "keys", multiple=True, required=True, help="Metric to plot (repeatable; one panel each)."
)
@click.option("-o", "--out", required=True, help="Output file: .png, .svg or .pdf (a path or URL).")
@click.option(
    "--x",
    "x",
    default=None,
    help="x axis: progress/batch or step [default: progress/batch if every run has it].",
)
@click.option(
    "--smooth",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Trailing rolling mean over N logged values; raw values drawn faintly behind.",
)
def plot(runs: tuple[str, ...], keys: tuple[str, ...], out: str, x: str | None, smooth: int) -> None:
    """Line charts of metrics KEYs from one or more RUNS, overlaid (needs the `plot` extra).

    Each RUN is a run folder or URI, a metrics .jsonl file, or a TRL trainer_state.json.
    A KEY without numeric values (a string-valued metric) is warned about on stderr;
    exit code 2 when no KEY has numbers or a RUN cannot be read.
    """
    import warnings

    from rllog.plot import plot_runs

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lines = plot_runs(list(runs), list(keys), out, x=x, smooth=smooth)
    except (OSError, ValueError, ImportError) as exc:
        raise _CliError(_error_text(exc)) from None
    for w in caught:
        _echo(f"warning: {w.message}", err=True)
    _echo(f"wrote {out} ({len(lines)} lines)")


# --- spill journals: bytes a cloud writer staged locally and never uploaded (issue 13) ---------


@main.group()
def spill() -> None:
    """Spill journals: what writers to gs://, s3://... staged on this machine and never
    uploaded (a killed process, a bucket down at close). Kept in $RLLOG_SPILL_DIR or
    ~/.cache/rllog/spill; the next writer of the same run on this machine uploads them first.
    """


def _orphans(urls: tuple[str, ...]) -> list:
    from rllog._storage.spill import list_journals

    found = [j for j in list_journals() if j.orphan and (not urls or j.url in urls)]
    unknown = [u for u in urls if u not in {j.url for j in found}]
    if unknown:
        raise _CliError(f"no orphaned spill journal for {', '.join(unknown)}; `rllog spill list` shows them")
    return found


def _describe(j) -> str:
    import time

    age = time.time() - j.modified
    when = f"{age / 3600:.1f} h" if age >= 3600 else f"{age / 60:.0f} min"
    files = ", ".join(f"{n} ({b} B)" for n, b in sorted(j.pending.items())) or "nothing left to upload"
    state = "orphaned" if j.orphan else "live writer"
    return f"{j.url}  [{state}, {when} old]  {files}\n    {j.folder}"


@spill.command("list")
@_clean_errors
def spill_list() -> None:
    """List every spill journal: its run URL, whether its writer is gone, the bytes not uploaded."""
    from rllog._storage.spill import list_journals, spill_root

    journals = list_journals()
    if not journals:
        _echo(f"no spill journals in {spill_root()}")
        return
    for j in journals:
        _echo(_describe(j))


@spill.command("upload")
@click.argument("urls", nargs=-1)
@_clean_errors
def spill_upload(urls: tuple[str, ...]) -> None:
    """Upload orphaned journals (all, or those of the run URLS) the way the next writer of
    the run does: open the run, which adopts them, and close it. Credentials and endpoints
    come from the environment, as for every command. Exit code 1 when bytes are left."""
    import warnings

    from rllog.storage import open_storage

    failed = 0
    for url in dict.fromkeys(j.url for j in _orphans(urls)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            storage = open_storage(url)
            storage.close()
            left = sum(storage.pending().values())
        if left:
            failed += 1
            why = "; ".join(str(w.message) for w in caught)[:400]
            _echo(f"{url}: {left} byte(s) still not uploaded, kept in the journal ({why})", err=True)
        else:
            _echo(f"{url}: uploaded")
    if failed:
        raise SystemExit(1)


@spill.command("clear")
@click.argument("urls", nargs=-1)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@_clean_errors
def spill_clear(urls: tuple[str, ...], yes: bool) -> None:
    """Delete orphaned journals (all, or those of the run URLS): their bytes are lost.
    Journals of live writers are never touched."""
    from rllog._storage.spill import clear_journal

    found = _orphans(urls)
    if not found:
        _echo("no orphaned spill journals")
        return
    total = sum(sum(j.pending.values()) for j in found)
    if not yes:
        click.confirm(f"delete {len(found)} orphaned journal(s), {total} byte(s) never uploaded?", abort=True)
    for j in found:
        _echo(f"{j.url}: {'deleted' if clear_journal(j) else 'kept (a writer took it meanwhile)'} {j.folder}")


# --- The live dashboard and rollout search (issue #12) -----------------------------------------


@main.command()
@click.argument("paths", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on."
)
@click.option(
    "--token",
    default=None,
    help="Access token required on every request ('auto' makes one); needed for a non-loopback --host.",
)
@_clean_errors
def serve(paths: tuple[str, ...], host: str, port: int, token: str | None) -> None:
    """A live dashboard of the runs under PATHS (needs the `serve` extra).

    Each PATH is a run folder, a folder holding runs at any depth, a metrics file, or a
    bucket URL (gs://, s3://); default the current folder. Nothing is written into a run.
    """
    from rllog.serve import serve as _serve

    _serve(list(paths) or ["."], host=host, port=port, token=token, echo=_echo)


@main.command()
@click.argument("pattern")
@click.argument("run")
@click.option(
    "-E", "--regex", is_flag=True, help="PATTERN is a Python regular expression (default: a substring)."
)
@click.option("-i", "--ignore-case", is_flag=True, help="Match case-insensitively.")
@click.option("-n", "--max-hits", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per hit.")
@_clean_errors
def grep(pattern: str, run: str, regex: bool, ignore_case: bool, max_hits: int, as_json: bool) -> None:
    """Search the prompts and completions in RUN's rollout summaries and logtree reports
    (every iteration and evaluator).

    Prints ``file:group:traj:field: text`` for a rollout hit and ``report:[group:]field: text``
    for a logtree hit (a conversation message or a text of the iteration's report);
    exit code 1 when nothing matched.
    """
    import warnings

    from rllog._format.codec import encode_json
    from rllog._read.run import read_run
    from rllog._read.search import compile_pattern, search_run

    compiled = compile_pattern(pattern, regex=regex, ignore_case=ignore_case)
    problems: list[str] = []
    with read_run(run) as r:
        if not r.storage.exists(r.metrics_name) and not r.iterations:
            raise FileNotFoundError(
                f"no run at {run}: no {r.metrics_name} and no iteration files "
                "(expected a run folder, a metrics .jsonl file or a bucket URL)"
            )
        with warnings.catch_warnings(record=True) as caught:  # a torn last line, dropped by the decoder
            warnings.simplefilter("always")
            hits, files = search_run(r.storage, compiled, limit=max_hits, problems=problems)
    for problem in [*(str(w.message) for w in caught), *problems]:
        _echo(f"warning: {problem}", err=True)
    for h in hits:
        if as_json:
            _echo(encode_json(h).decode())
        else:
            text = f"{h['before']}{h['match']}{h['after']}".replace("\n", "\\n")
            if h["kind"] == "logtree":  # where to read it: the iteration's report
                group = "" if h["group"] is None else f"group {h['group']}:"
                _echo(f"{h['report'] or h['file']}:{group}{h['field']}: {text}")
            else:
                _echo(f"{h['file']}:group {h['group']}:traj {h['traj']}:{h['field']}: {text}")
    if not hits:
        _echo(f"no match in {files} rollout summaries and logtree files", err=True)
        raise SystemExit(1)
