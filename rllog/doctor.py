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
finding; a NaN in ``val/ratio_var`` is not one either (TRL's PPO logs it NaN whenever a
batch has one minibatch, :data:`NAN_BY_DEFINITION`); NaN/Inf and value-loss spikes fire on one value. "Start" is the median of
the first ``baseline_rows`` (5) logged values. Every threshold is a field of
:class:`Thresholds`; change them with ``Thresholds(ratio_high=3.0)``,
:meth:`Thresholds.with_overrides` (``rllog doctor --set ratio_high=3``) or a JSON/TOML
file (``--config``).

Severity levels: ``error`` (training is numerically broken or updates are far too
large), ``warning`` (likely a problem, look at it), ``info`` (nothing checkable).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from rllog._format.rows import nonfinite_cells
from rllog._format.vocab import (
    APPROXKL_KEYS,
    CLIPFRAC_KEYS,
    CLIPPED_KEYS,
    CORE_KEYS,
    ENTROPY_KEYS,
    RATIO_KEYS,
    REWARD_KEYS,
    SAMPLE_KL_KEYS,
    SEQ_KL_KEYS,
    TOKEN_KL_KEYS,
    VALUE_LOSS_KEYS,
)

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from rllog._read.run import Run

__all__ = ["SEVERITIES", "Finding", "Thresholds", "check_run", "diagnose"]

#: severity levels, mildest first
SEVERITIES = ("info", "warning", "error")
Severity = Literal["info", "warning", "error"]


class Thresholds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The numbers the doctor compares against; defaults and sources in the module docstring.

    KL values are nats (per token unless noted); ratios and fractions are unitless;
    ``persist``, ``spike_window``, ``baseline_rows`` and ``trend_min_rows`` count logged
    values of one metric (rows where it is missing do not count).

    Raises:
        ValueError: from ``__post_init__`` if a count is < 1 or a factor is <= 0.
    """

    persist: int = 3
    ratio_high: float = 2.0
    ratio_low: float = 0.5
    clipfrac_high: float = 0.3
    approxkl_high: float = 0.1
    kl_negative: float = -0.01
    kl_high: float = 1.0
    seq_kl_high: float = 30.0
    sample_train_kl_high: float = 0.03
    value_loss_spike: float = 10.0
    spike_window: int = 10
    entropy_floor: float = 0.05
    entropy_collapse_frac: float = 0.2
    entropy_rise_factor: float = 3.0
    baseline_rows: int = 5
    clipped_completions_high: float = 0.3
    trend_min_rows: int = 20
    kl_growth_factor: float = 2.0
    kl_growth_min: float = 0.01
    reward_flat_z: float = 0.5

    def __post_init__(self) -> None:
        for name in ("persist", "spike_window", "baseline_rows", "trend_min_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"threshold {name} must be >= 1, got {getattr(self, name)}")
        for name in (
            "value_loss_spike",
            "entropy_rise_factor",
            "kl_growth_factor",
            "ratio_high",
            "ratio_low",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"threshold {name} must be > 0, got {getattr(self, name)}")

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str]) -> Thresholds:
        """A copy with some fields changed: a mapping, or ``"name=value"`` strings (CLI ``--set``).

        Raises:
            ValueError: unknown name (the message lists the valid names), a string without
                ``=``, or a value of the wrong type (``"ratio_high must be a number, got 'abc'"``).
        """
        if not isinstance(overrides, Mapping):
            pairs = {}
            for item in overrides:
                name, sep, value = item.partition("=")
                if not sep:
                    raise ValueError(f"threshold override must look like name=value, got {item!r}")
                pairs[name.strip()] = value.strip()
            overrides = pairs
        fields = msgspec.structs.asdict(self)
        unknown = sorted(set(overrides) - set(fields))
        if unknown:
            raise ValueError(f"unknown threshold(s) {unknown}; valid names: {sorted(fields)}")
        for name, value in overrides.items():
            fields[name] = _threshold_value(name, value, type(fields[name]))
        return Thresholds(**fields)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Thresholds:
        """Read thresholds from a JSON or TOML file (by suffix) holding some of the fields.

        Raises:
            OSError: the file cannot be read. ValueError: bad content (unknown name, wrong type).
        """
        data = Path(path).read_bytes()
        kind = "TOML" if str(path).endswith(".toml") else "JSON"
        try:
            fields = msgspec.toml.decode(data) if kind == "TOML" else msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise ValueError(f"{path}: not {kind} ({exc})") from None
        if not isinstance(fields, dict):
            raise ValueError(
                f"{path}: expected a {kind} table of threshold names and values, got {type(fields).__name__}"
            )
        try:
            return cls().with_overrides(fields)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None


#: one line per threshold, for ``rllog doctor --list-thresholds`` (units as in :class:`Thresholds`)
THRESHOLD_HELP = {
    "persist": "consecutive logged values past a threshold before it is a finding",
    "ratio_high": "val/ratio (new/old policy probability) above this is an error",
    "ratio_low": "val/ratio below this is an error",
    "clipfrac_high": "fraction of updates clipped (clipfrac, clip_ratio) above this is a warning",
    "approxkl_high": "approximate KL between consecutive policies (nats) above this is a warning",
    "kl_negative": "a KL-to-reference estimate below this (nats) is an error: it must stay >= 0",
    "kl_high": "per-token KL to the reference (kl, nats) above this is a warning",
    "seq_kl_high": "KL to the reference summed over a completion (objective/kl, nats) above this is a warning",
    "sample_train_kl_high": "KL between sampler and trainer logprobs (kl_sample_train_*, nats) above this is a warning",
    "value_loss_spike": "value loss above this many times the median of the previous spike_window values is a spike",
    "spike_window": "logged values in the median a value-loss spike is compared with",
    "entropy_floor": "entropy below this (and below entropy_collapse_frac x its start) has collapsed",
    "entropy_collapse_frac": "entropy below this fraction of its start (and below entropy_floor) has collapsed",
    "entropy_rise_factor": "entropy above this many times its start is rising",
    "baseline_rows": "first logged values whose median is a metric's start",
    "clipped_completions_high": "fraction of completions cut at the max length above this is a warning",
    "trend_min_rows": "logged values reward and KL need before the reward-flat/KL-grows check runs",
    "kl_growth_factor": "KL grows when the median of its last quarter exceeds this many times the first quarter's",
    "kl_growth_min": "... and exceeds it by at least this much (nats)",
    "reward_flat_z": "reward is flat when its last quarter rose less than this many standard deviations",
}


def _threshold_value(name: str, value: Any, kind: type) -> int | float:
    """``value`` (a number, or a string from ``--set``) as the threshold's type, or a ValueError saying what was wrong."""
    what = "a whole number" if kind is int else "a number"
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            raise ValueError(f"{name} must be {what}, got {value!r}") from None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (kind is int and not float(value).is_integer())
    ):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return kind(value)


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One problem the doctor found.

    ``steps`` holds ``[first, last]`` step ranges where the condition held; ``value``
    is the worst value seen there (NaN/Inf for the ``nonfinite`` check); ``threshold``
    says what it was compared with, e.g. ``"> 2.0 for 3 steps"``.
    """

    check: str
    severity: Severity
    metric: str
    steps: list[tuple[int, int]]
    value: float
    threshold: str
    message: str
    advice: str

    def to_dict(self) -> dict[str, Any]:
        """A strict-JSON-able dict; a non-finite ``value`` becomes the string ``"NaN"``/``"Infinity"``/``"-Infinity"``."""
        out = msgspec.structs.asdict(self)
        out["steps"] = [list(r) for r in self.steps]
        if not math.isfinite(self.value):
            out["value"] = (
                "NaN" if self.value != self.value else ("Infinity" if self.value > 0 else "-Infinity")
            )
        return out

    def steps_text(self, limit: int = 6) -> str:
        """The step ranges as ``"3-7, 12"``, at most ``limit`` ranges then ``"(+N more)"``."""
        parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in self.steps[:limit]]
        if len(self.steps) > limit:
            parts.append(f"(+{len(self.steps) - limit} more)")
        return ", ".join(parts)


_ADVICE = {
    "ratio": "updates between consecutive policies are too drastic: lower the learning rate, run fewer PPO "
    "epochs/minibatch passes per batch, and check that the old logprobs come from the policy that sampled",
    "clip_fraction": "the clip limits many updates: lower the learning rate or the epochs per batch, normalise or "
    "clip advantages; if the ratio stays near 1, the clip range (epsilon) may be too tight",
    "approx_kl": "consecutive policies differ a lot: lower the learning rate, run fewer optimisation epochs per "
    "batch, or stop a batch early at a target KL",
    "kl_negative": "a KL estimate that stays below 0 means policy and reference logprobs are not comparable: check "
    "that both score the same tokens with the same temperature, masking and chat template",
    "kl_large": "the policy drifts far from the reference: raise the KL coefficient (beta) or lower the learning rate",
    "kl_large_sample": "sampler and trainer disagree on the logprobs of the same tokens (stale or off-policy samples, "
    "or a numerics/temperature mismatch): sync weights before sampling, match the sampling temperature, "
    "reduce staleness",
    "value_loss_spike": "the value function is unstable: lower the value learning rate or vf_coef, clip value "
    "updates (cliprange_value), normalise or whiten rewards",
    "entropy_collapse": "the policy became (nearly) deterministic, which stops exploration: raise the sampling "
    "temperature, add an entropy bonus, lower the learning rate, and check whether it found a single "
    "answer that games the reward",
    "entropy_rise": "the policy is getting more random: lower the learning rate, check the sign of the loss and "
    "the advantage normalisation; rising entropy often comes before gibberish outputs",
    "clipped_completions": "many completions hit max_completion_length without an EOS: raise "
    "max_completion_length, penalise overlong answers, or check that the chat template ends with EOS",
    "reward_flat_kl_grows": "the policy moves away from the reference without gaining reward: raise the KL "
    "coefficient, lower the learning rate, and check that the reward is informative and not being gamed",
    "nonfinite": "training diverged numerically: look at the steps just before, lower the learning rate, enable "
    "gradient clipping, guard log(0) and division by zero in rewards and losses, compute the loss in fp32",
    "no_metrics": "log the PPO/GRPO stability metrics (entropy, KL, clip fractions; see TRL's logging docs, "
    "https://huggingface.co/docs/trl/logging) to get real checks",
}


def _canonical(column: str) -> str:
    return column.removeprefix("train/")


def _ranges(steps: np.ndarray, idx: np.ndarray) -> list[tuple[int, int]]:
    """``[first, last]`` step ranges of runs of consecutive positions in ``idx``."""
    out: list[tuple[int, int]] = []
    start = prev = None
    for i in idx.tolist():
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            out.append((int(steps[start]), int(steps[prev])))
        start = prev = i
    if start is not None:
        out.append((int(steps[start]), int(steps[prev])))
    return out


def _persistent(mask: np.ndarray, persist: int) -> np.ndarray:
    """Positions of ``mask`` that belong to a run of at least ``persist`` consecutive Trues."""
    import numpy as np

    keep = np.zeros(len(mask), dtype=bool)
    i, n = 0, len(mask)
    while i < n:
        if mask[i]:
            j = i
            while j < n and mask[j]:
                j += 1
            if j - i >= persist:
                keep[i:j] = True
            i = j
        else:
            i += 1
    return np.flatnonzero(keep)


class _Series:
    """One metric's logged finite values ``v`` at steps ``steps`` (rows where it is missing dropped)."""

    __slots__ = ("name", "steps", "v")

    def __init__(self, name: str, v: np.ndarray, steps: np.ndarray) -> None:
        self.name, self.v, self.steps = name, v, steps

    def baseline(self, rows: int) -> float:
        import numpy as np

        return float(np.median(self.v[:rows]))


def _fmt(x: float) -> str:
    return f"{x:.4g}"


class _Doctor:
    def __init__(self, series: dict[str, _Series], t: Thresholds) -> None:
        self.series, self.t = series, t
        self.findings: list[Finding] = []

    def family(self, names: Sequence[str]) -> list[_Series]:
        return [s for col, s in self.series.items() if _canonical(col) in names]

    def add(
        self,
        check: str,
        severity: Severity,
        s: _Series,
        idx: np.ndarray,
        value: float,
        threshold: str,
        what: str,
        advice: str | None = None,
    ) -> None:
        steps = _ranges(s.steps, idx)
        where = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in steps[:4]) + (
            " ..." if len(steps) > 4 else ""
        )
        self.findings.append(
            Finding(
                check=check,
                severity=severity,
                metric=s.name,
                steps=steps,
                value=value,
                threshold=threshold,
                message=f"{s.name} {what} at step(s) {where} (worst {_fmt(value)}; threshold {threshold})",
                advice=_ADVICE[advice or check],
            )
        )

    def threshold(
        self,
        check: str,
        severity: Severity,
        s: _Series,
        high: float | None,
        low: float | None,
        what: str,
        advice: str | None = None,
    ) -> None:
        import numpy as np

        t = self.t
        for bound, mask, worst, op in (
            (high, s.v > high if high is not None else None, np.max, ">"),
            (low, s.v < low if low is not None else None, np.min, "<"),
        ):
            if mask is None or bound is None:
                continue
            idx = _persistent(mask, t.persist)
            if len(idx):
                value = float(worst(s.v[idx]))
                self.add(
                    check,
                    severity,
                    s,
                    idx,
                    value,
                    f"{op} {_fmt(bound)} for {t.persist} logged steps",
                    what,
                    advice,
                )

    def run(self) -> list[Finding]:
        import numpy as np

        t = self.t
        for s in self.family(RATIO_KEYS):
            self.threshold("ratio", "error", s, t.ratio_high, t.ratio_low, "is far from 1")
        for s in self.family(CLIPFRAC_KEYS):
            self.threshold("clip_fraction", "warning", s, t.clipfrac_high, None, "is high")
        for s in self.family(APPROXKL_KEYS):
            self.threshold("approx_kl", "warning", s, t.approxkl_high, None, "is high")
        for names, high, advice in (
            (TOKEN_KL_KEYS, t.kl_high, None),
            (SEQ_KL_KEYS, t.seq_kl_high, None),
            (SAMPLE_KL_KEYS, t.sample_train_kl_high, "kl_large_sample"),
        ):
            for s in self.family(names):
                self.threshold("kl_negative", "error", s, None, t.kl_negative, "is negative")
                self.threshold("kl_large", "warning", s, high, None, "is large", advice)
        for s in self.family(CLIPPED_KEYS):
            self.threshold("clipped_completions", "warning", s, t.clipped_completions_high, None, "is high")
        for s in self.family(VALUE_LOSS_KEYS):
            self.value_loss_spikes(s)
        for s in self.family(ENTROPY_KEYS):
            if len(s.v) <= t.baseline_rows:
                continue
            start = s.baseline(t.baseline_rows)
            idx = _persistent((s.v < t.entropy_floor) & (s.v < t.entropy_collapse_frac * start), t.persist)
            if len(idx):
                self.add(
                    "entropy_collapse",
                    "warning",
                    s,
                    idx,
                    float(np.min(s.v[idx])),
                    f"< {_fmt(t.entropy_floor)} and < {_fmt(t.entropy_collapse_frac)} x start ({_fmt(start)})",
                    f"collapsed from {_fmt(start)} toward 0",
                )
            if start > 0:
                idx = _persistent(s.v > t.entropy_rise_factor * start, t.persist)
                if len(idx):
                    self.add(
                        "entropy_rise",
                        "warning",
                        s,
                        idx,
                        float(np.max(s.v[idx])),
                        f"> {_fmt(t.entropy_rise_factor)} x start ({_fmt(start)})",
                        f"rose from {_fmt(start)}",
                    )
        self.reward_flat_kl_grows()
        return self.findings

    def value_loss_spikes(self, s: _Series) -> None:
        import numpy as np

        t = self.t
        spikes = []
        for i in range(3, len(s.v)):
            base = float(np.median(s.v[max(0, i - t.spike_window) : i]))
            if base > 0 and s.v[i] > t.value_loss_spike * base:
                spikes.append(i)
        if spikes:
            idx = np.asarray(spikes)
            self.add(
                "value_loss_spike",
                "warning",
                s,
                idx,
                float(np.max(s.v[idx])),
                f"> {_fmt(t.value_loss_spike)} x median of the previous {t.spike_window}",
                "spiked",
            )

    def reward_flat_kl_grows(self) -> None:
        import numpy as np

        t = self.t
        rewards = self.family(REWARD_KEYS)
        kls = self.family(SEQ_KL_KEYS + TOKEN_KL_KEYS + SAMPLE_KL_KEYS)
        if not rewards or not kls:
            return
        r, kl = rewards[0], kls[0]
        if min(len(r.v), len(kl.v)) < t.trend_min_rows:
            return
        q_r, q_k = max(t.baseline_rows, len(r.v) // 4), max(t.baseline_rows, len(kl.v) // 4)
        kl_first, kl_last = float(np.median(kl.v[:q_k])), float(np.median(kl.v[-q_k:]))
        r_first, r_last = float(np.median(r.v[:q_r])), float(np.median(r.v[-q_r:]))
        r_std = float(np.std(r.v))
        grows = kl_last > t.kl_growth_factor * max(kl_first, 0.0) and kl_last - kl_first > t.kl_growth_min
        flat = r_last - r_first < t.reward_flat_z * r_std
        if grows and flat:
            idx = np.arange(len(kl.v) - q_k, len(kl.v))
            self.add(
                "reward_flat_kl_grows",
                "warning",
                kl,
                idx,
                kl_last,
                f"KL > {_fmt(t.kl_growth_factor)} x first quarter and reward gain < {_fmt(t.reward_flat_z)} std",
                f"grew from {_fmt(kl_first)} to {_fmt(kl_last)} while {r.name} moved {_fmt(r_first)} -> {_fmt(r_last)}",
            )


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
        Findings, errors first, then warnings, each group in check order.

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

    t = thresholds or Thresholds()
    if step_key in metrics.columns:
        steps_all = pd.to_numeric(metrics[step_key], errors="coerce").to_numpy(dtype=float)
    else:
        steps_all = np.arange(len(metrics), dtype=float)
    steps_all = np.where(np.isfinite(steps_all), steps_all, np.arange(len(metrics)))
    series: dict[str, _Series] = {}
    logged_nonfinite = {k: list(v) for k, v in (nonfinite or {}).items()}
    infinite: dict[str, dict[int, float]] = {}  # {metric: {step: +-inf}}: the DataFrame keeps infinities
    for col in metrics.columns:
        if col == step_key or not isinstance(col, str):
            continue
        values = pd.to_numeric(metrics[col], errors="coerce").to_numpy(dtype=float)
        inf = np.isinf(values)
        if inf.any():
            infinite[col] = {int(x): float(v) for x, v in zip(steps_all[inf], values[inf], strict=False)}
            found = logged_nonfinite.setdefault(col, [])
            found.extend(x for x in infinite[col] if x not in found)
        finite = np.isfinite(values)
        if finite.any():
            series[col] = _Series(col, values[finite], steps_all[finite].astype(np.int64))
    doctor = _Doctor(series, t)
    doctor.findings.extend(_nonfinite_findings(logged_nonfinite, infinite))
    doctor.run()
    if not doctor.findings and not any(_canonical(c) in CORE_KEYS for c in series):
        doctor.findings.append(
            Finding(
                check="no_metrics",
                severity="info",
                metric="",
                steps=[],
                value=float("nan"),
                threshold="",
                message="no PPO/GRPO stability metric (ratio, KL, clip fraction, entropy, value loss) was found; only NaN/Inf were checked",
                advice=_ADVICE["no_metrics"],
            )
        )
    order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    return sorted(doctor.findings, key=lambda f: order[f.severity])


#: metrics that are NaN by definition in healthy runs, so a NaN there is no finding (an
#: infinity still is): TRL's PPO logs ``val/ratio_var`` as ``ratio_stats.var()`` (torch,
#: unbiased) over the minibatches of a batch, NaN whenever there is one minibatch
#: (trl/experimental/ppo/ppo_trainer.py, ``PPOTrainer.train``, TRL <= 1.12; ``rllog.stats.ppo_stats``).
NAN_BY_DEFINITION = frozenset({"val/ratio_var"})


def _nonfinite_findings(
    nonfinite: Mapping[str, Sequence[int]], infinite: Mapping[str, Mapping[int, float]]
) -> list[Finding]:
    """One finding per metric with NaN/±Inf cells; its ``value`` is +Inf if any cell is, else
    -Inf if any is, else NaN, and the message names which of them occur."""
    out = []
    for col, steps in nonfinite.items():
        inf = infinite.get(col, {})
        if _canonical(col) in NAN_BY_DEFINITION:
            steps = [step for step in steps if step in inf]  # only infinities are findings
        if not steps:
            continue
        kinds = [
            name
            for name, present in (
                ("NaN", any(step not in inf for step in steps)),
                ("Infinity", math.inf in inf.values()),
                ("-Infinity", -math.inf in inf.values()),
            )
            if present
        ]
        value = math.inf if "Infinity" in kinds else (-math.inf if "-Infinity" in kinds else math.nan)
        merged: list[tuple[int, int]] = []
        for step in sorted(set(steps)):
            if merged and step == merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], step)
            else:
                merged.append((step, step))
        f = Finding(
            check="nonfinite",
            severity="error" if _canonical(col) in CORE_KEYS else "warning",
            metric=col,
            steps=merged,
            value=value,
            threshold="any NaN or Inf",
            message="",
            advice=_ADVICE["nonfinite"],
        )
        out.append(
            msgspec.structs.replace(
                f,
                message=f"{col} is {'/'.join(kinds)} at step(s) {f.steps_text(4)} ({len(set(steps))} values)",
            )
        )
    return out


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
    return diagnose(run.metrics, thresholds, nonfinite=run.nonfinite, step_key=run.step_key)
