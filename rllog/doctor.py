"""The stability doctor: checks a run's metrics for the PPO/GRPO stability signals.

The signals are the ones TRL's logging guide for PPO and GRPO says to watch when RL
training goes wrong (https://huggingface.co/docs/trl/logging, "PPO/GRPO logging";
cited as "TRL docs" below); this module turns each into a check on a metrics DataFrame
(one row per logged step, a ``step`` column, NaN for a missing key). Keys are matched
exactly, after removing a leading ``train/`` (TensorBoard imports, OpenRLHF's wandb
names); eval keys (``eval_*``, ``eval/*``, ``test/*``) are only checked for NaN/Inf.
Besides TRL's and tinker-cookbook's names, the keys verl and OpenRLHF log are known
(verl: ``actor/*``, ``critic/*``, ``response_length/clip_ratio``, from its
``dp_actor``/``metric_utils``; OpenRLHF: the ``status`` dict of its PPO actor).

======================  ==========================================  =========  =======  ==========================================
check                   metrics                                     default    level    source / why
======================  ==========================================  =========  =======  ==========================================
``ratio``               ``val/ratio``                               > 2.0 or   error    TRL docs: "should float around 1.0; too
                                                                    < 0.5                high (e.g. 2.0 or 1000.0) or too small
                                                                                         (e.g. 0.1) means updates between
                                                                                         consecutive policies are too drastic"
``clip_fraction``       ``policy/clipfrac_avg``, ``clip_ratio``,    > 0.3      warning  TRL docs: high clipfrac follows a high
                        ``clip_ratio/{low,high,region}_mean``,                           ratio; very high clip_ratio/* means the
                        ``actor/pg_clipfrac`` (verl),                                    policy tries too drastic changes
                        ``ppo_clip_ratio`` (OpenRLHF)
``approx_kl``           ``policy/approxkl_avg``,                    > 0.1      warning  TRL docs (rises with the ratio); PPO
                        ``actor/ppo_kl`` (verl), ``ppo_kl``                              target_kl is usually 0.01–0.05
                        (OpenRLHF)
``kl_negative``         ``objective/kl``, ``kl``,                   < -0.01    error    TRL docs: objective/kl "should stay
                        ``actor/kl_loss`` (verl),                                        positive"
                        ``[optim/]kl_sample_train_v1/v2``
``kl_large``            ``kl``, ``actor/kl_loss`` (per token)       > 1.0      warning  TRL docs: "ideally not too large, so the
                        ``objective/kl`` (summed over tokens)       > 30.0               policy does not drift far from the
                        ``[optim/]kl_sample_train_v1/v2``           > 0.03               reference"; sampler/trainer KL is
                                                                                         ~1e-3 on healthy real tinker runs,
                                                                                         ~1e-2 with num_substeps > 1
``value_loss_spike``    ``loss/value_avg``, ``critic/vf_loss``      10x        warning  TRL docs: "spikes or becomes NaN when
                        (verl), ``critic_loss`` (OpenRLHF)          median of            training goes badly"
                                                                    previous 10
``entropy_collapse``    ``objective/entropy``,                      < 0.05 and warning  TRL docs: entropy collapse means the
                        ``policy/entropy_avg``, ``entropy``,        < 20% of             policy became too confident too early,
                        ``optim/entropy``, ``actor/entropy``        its start            hurting exploration
                        (verl), ``policy_entropy`` (OpenRLHF)
``entropy_rise``        same                                        > 3x its   warning  TRL docs: watch for divergence; rising
                                                                    start                entropy means the policy gets random
``clipped_completions`` ``completions/clipped_ratio``,              > 0.3      warning  TRL docs: many completions truncated at
                        ``response_length/clip_ratio`` (verl)                            max_completion_length, no EOS
``reward_flat_kl_grows`` reward (``objective/rlhf_reward``,         see below  warning  TRL docs: reward should rise; KL should
                        ``objective/scores``, ``reward``,                                not grow far. KL median of the last
                        ``env/all/reward/total``,                                        quarter > 2x the first quarter's (and
                        ``critic/score/mean``) and KL                                    +0.01), reward rose < 0.5 std
``nonfinite``           every numeric column                        any        error*   TRL docs: value loss "becomes NaN"
                                                                    NaN/Inf              (* warning for non-core metrics)
======================  ==========================================  =========  =======  ==========================================

Threshold checks fire only when the value is past the threshold on ``persist`` (3)
consecutive logged values of that metric, so one noisy step on a real run is not a
finding; NaN/Inf and value-loss spikes fire on one value. "Start" is the median of
the first ``baseline_rows`` (5) logged values. Every threshold is a field of
:class:`Thresholds`; change them with ``Thresholds(ratio_high=3.0)``,
:meth:`Thresholds.with_overrides` (``rllog doctor --set ratio_high=3``) or a JSON/TOML
file (``--config``).

Severity levels: ``error`` (training is numerically broken or updates are far too
large), ``warning`` (likely a problem, look at it), ``info`` (nothing checkable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rllog._format.rows import nonfinite_cells
from rllog._format.rules import (
    ADVICE,
    SEVERITIES,
    THRESHOLD_HELP,
    Finding,
    RuleEngine,
    Severity,
    Thresholds,
    canonical,
)

if TYPE_CHECKING:
    import pandas as pd

    from rllog._read.run import Run

__all__ = ["SEVERITIES", "Finding", "Thresholds", "check_run", "diagnose"]

# the rules live in rllog._format.rules (shared with the live doctor, RunLogger(doctor=True))
_ = (ADVICE, THRESHOLD_HELP, Severity, canonical)


def diagnose(
    metrics: pd.DataFrame | Run,
    thresholds: Thresholds | None = None,
    *,
    nonfinite: Mapping[str, Sequence[int]] | None = None,
    step_key: str | None = "step",
) -> list[Finding]:
    """Check a run's metrics for the PPO/GRPO stability signals (see the module docstring).

    Args:
        metrics: a :class:`rllog.Run` from :func:`rllog.read_run` (its metrics,
            NaN/Inf cells and step column are used; ``nonfinite`` and ``step_key`` are
            ignored), or a DataFrame: one row per logged step (rows in logging order), a ``step_key``
            column (else row positions are the steps), NaN where a key is missing. String columns are
            ignored; a column that mixes strings and numbers is checked on its numbers.
        thresholds: defaults to ``Thresholds()``.
        nonfinite: ``{metric: [step, ...]}`` where the loop logged NaN/±Inf (from
            :func:`nonfinite_cells`; :func:`check_run` reads it from metrics.jsonl). A
            DataFrame cannot tell a logged NaN from a missing key, so without it only
            ±Inf cells are reported as non-finite.

    Returns:
        Findings, errors first, then warnings, each group in check order. The rules are
        :class:`rllog._format.rules.RuleEngine`'s, fed column by column (the live doctor
        feeds the same engine row by row, so both give the same findings).

    Raises:
        TypeError: ``metrics`` is neither (for a path or URL use :func:`check_run`).
    """
    import numpy as np
    import pandas as pd

    from rllog._read.run import Run

    if isinstance(metrics, Run):
        nonfinite, step_key = nonfinite_cells(metrics.rows, step_key=metrics.step_key), metrics.step_key
        metrics = metrics.metrics
    elif not isinstance(metrics, pd.DataFrame):
        raise TypeError(
            f"diagnose takes a Run from rllog.read_run or a metrics DataFrame, got {type(metrics).__name__}; "
            "for a run folder, URL or file use rllog.check_run(path)"
        )

    engine = RuleEngine(thresholds)
    if step_key in metrics.columns:
        steps_all = pd.to_numeric(metrics[step_key], errors="coerce").to_numpy(dtype=float)
    else:
        steps_all = np.arange(len(metrics), dtype=float)
    steps_all = np.where(np.isfinite(steps_all), steps_all, np.arange(len(metrics))).astype(np.int64)
    logged = {k: set(v) for k, v in (nonfinite or {}).items()}
    for col in metrics.columns:
        if col == step_key or not isinstance(col, str):
            continue
        values = pd.to_numeric(metrics[col], errors="coerce").to_numpy(dtype=float)
        cells = logged.pop(col, set())
        keep = ~np.isnan(values)
        events = list(zip(steps_all[keep].tolist(), values[keep].tolist(), strict=True))
        if cells:  # logged NaN cells (a DataFrame NaN may be a missing key), in step order
            inf = {step for step, v in events if v - v != 0}
            events.extend((step, float("nan")) for step in cells if step not in inf)
            events.sort(key=lambda e: e[0])
        feed = engine.feed_value
        for step, v in events:
            feed(col, step, v)
    for col, cells in logged.items():  # NaN cells of columns the DataFrame does not hold
        for step in sorted(cells):
            engine.feed_value(col, step, float("nan"))
    engine.finish()
    return engine.findings()


def check_run(log_path: Any, thresholds: Thresholds | None = None) -> list[Finding]:
    """Read the run at ``log_path`` (a path, URL or Storage) and :func:`diagnose` its metrics.

    ``log_path`` may be anything :func:`rllog.read_run` reads (a run folder or URL, a
    metrics JSONL file, a TRL trainer_state.json). NaN/Inf cells come from the values
    logged as NaN/Infinity, so a missing key or a ``null`` is never reported as NaN.

    Raises:
        FileNotFoundError: nothing at ``log_path``. RunFormatError: not a run (from the reader).
    """
    from rllog._read.view import open_run

    run = open_run(log_path)
    findings = diagnose(run.metrics, thresholds, nonfinite=run.nonfinite, step_key=run.step_key)
    errors = [f for f in findings if f.severity == "error"]
    return errors + damage_findings(run.damaged) + findings[len(errors) :]


def damage_findings(damaged: list[str]) -> list[Finding]:
    """A ``damaged_lines`` warning for the lines the reader skipped (:attr:`rllog.Run.damaged_lines`),
    none when there are none: a row lost in the middle of metrics.jsonl is not "no problems"."""
    if not damaged:
        return []
    shown = "; ".join(damaged[:3]) + (f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
    return [
        Finding(
            check="damaged_lines",
            severity="warning",
            metric="",
            steps=[],
            value=float(len(damaged)),
            threshold="any",
            message=f"{len(damaged)} damaged line(s) skipped by every reader: {shown}",
            advice="the rows on those lines are lost to readers; look for a second writer, a full disk or an edit "
            "of the file (the other rows are read as usual)",
        )
    ]
