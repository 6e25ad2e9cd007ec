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
