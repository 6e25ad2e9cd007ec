"""The stability doctor's rules, as an engine fed one value at a time (pure: no I/O).

Both doctors use it: the post-hoc :func:`rllog.doctor.diagnose` feeds a finished run's
columns, the live one (``RunLogger(doctor=True)``) feeds each row as it is logged, so the
two agree on the same run by construction.

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

import collections
import math
import statistics
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import msgspec

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

__all__ = [
    "SEVERITIES",
    "Severity",
    "Thresholds",
    "THRESHOLD_HELP",
    "Finding",
    "ADVICE",
    "RuleEngine",
    "canonical",
    "watched",
]


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
    def from_bytes(cls, data: bytes, where: str) -> Thresholds:
        """Thresholds from the bytes of a JSON or TOML file (TOML when ``where`` ends in
        ``.toml``) holding some of the fields; :func:`rllog.doctor.thresholds_from_file`
        reads the file.

        Raises:
            ValueError: bad content (not JSON/TOML, unknown name, wrong type), naming ``where``.
        """
        path = where
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
    says what it was compared with, e.g. ``"> 2.0 for 3 steps"``; ``fired_at`` is the
    step of the value that made it a finding (the live doctor raised it then), None for
    the ``no_metrics`` note.
    """

    check: str
    severity: Severity
    metric: str
    steps: list[tuple[int, int]]
    value: float
    threshold: str
    message: str
    advice: str
    fired_at: int | None = None

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


#: metrics that are NaN by definition in healthy runs, so a NaN there is no finding (an
#: infinity still is): TRL's PPO logs ``val/ratio_var`` as ``ratio_stats.var()`` (torch,
#: unbiased) over the minibatches of a batch, NaN whenever there is one minibatch
#: (trl/experimental/ppo/ppo_trainer.py, ``PPOTrainer.train``, TRL <= 1.12; ``rllog.stats.ppo_stats``).
NAN_BY_DEFINITION = frozenset({"val/ratio_var"})

ADVICE = {
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


def canonical(column: str) -> str:
    """A metric name as the rules know it: without a leading ``train/``."""
    return column.removeprefix("train/")


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


class _Bound:
    """One threshold on one metric: fires when ``persist`` consecutive values are past it."""

    __slots__ = (
        "check",
        "severity",
        "op",
        "bound",
        "threshold",
        "what",
        "advice",
        "run",
        "ranges",
        "worst",
        "fired_at",
        "open",
    )

    def __init__(
        self,
        check: str,
        severity: Severity,
        op: str,
        bound: float,
        threshold: str,
        what: str,
        advice: str | None,
    ) -> None:
        self.check, self.severity, self.op, self.bound = check, severity, op, bound
        self.threshold, self.what, self.advice = threshold, what, advice
        self.run: list[tuple[int, float]] = []  # the current run of past values, until it persists
        self.ranges: list[list[int]] = []
        self.worst = math.nan
        self.fired_at: int | None = None
        self.open = False  # the last value extended the last range

    def push(self, step: int, v: float, persist: int) -> bool:
        """Add a value; True when this value makes the check fire for the first time."""
        past = v > self.bound if self.op == ">" else v < self.bound
        if not past:
            self.run, self.open = [], False
            return False
        better = max if self.op == ">" else min
        if self.open:
            self.ranges[-1][1] = step
            self.worst = better(self.worst, v)
            return False
        self.run.append((step, v))
        if len(self.run) < persist:
            return False
        self.ranges.append([self.run[0][0], step])
        worst = better(x for _, x in self.run)
        self.worst = worst if math.isnan(self.worst) else better(self.worst, worst)
        self.run, self.open = [], True
        if self.fired_at is None:
            self.fired_at = step
            return True
        return False


class _Spikes:
    """Value-loss spikes: a value over ``factor`` x the median of the previous ``window`` values."""

    __slots__ = ("prev", "n", "ranges", "worst", "fired_at", "open")

    def __init__(self, window: int) -> None:
        self.prev: collections.deque[float] = collections.deque(maxlen=window)
        self.n = 0
        self.ranges: list[list[int]] = []
        self.worst = math.nan
        self.fired_at: int | None = None
        self.open = False

    def push(self, step: int, v: float, factor: float) -> bool:
        fired = False
        spike = False
        if self.n >= 3:
            base = _median(self.prev)
            spike = base > 0 and v > factor * base
        self.prev.append(v)
        self.n += 1
        if not spike:
            self.open = False
            return False
        if self.open:
            self.ranges[-1][1] = step
        else:
            self.ranges.append([step, step])
        self.open = True
        self.worst = v if math.isnan(self.worst) else max(self.worst, v)
        if self.fired_at is None:
            self.fired_at, fired = step, True
        return fired


class _Metric:
    """The rules' state for one metric: its checks, and its values when a rule needs them all."""

    __slots__ = ("name", "bounds", "spikes", "entropy", "first", "keep", "values", "steps")

    def __init__(self, name: str) -> None:
        self.name = name
        self.bounds: list[_Bound] = []
        self.spikes: _Spikes | None = None
        self.entropy = False
        self.first: list[tuple[int, float]] = []  # entropy: values until the start is known
        self.keep = False  # keep every value (the reward/KL trend rule)
        self.values = array("d")  # 8 bytes a value, 16 with its step: a million-step run's series in 16 MB
        self.steps = array("q")


class RuleEngine:
    """The doctor's rules over a stream of ``(metric, step, value)``.

    Feed values in logging order per metric (:meth:`feed_value`, or :meth:`feed_row`
    for a whole row); each call returns the findings that fired for the first time
    (as :class:`Finding`, with ``fired_at``: the step of the value that made it fire).
    :meth:`finish` runs the whole-run rule (reward flat while KL grows) and returns
    its new findings; :meth:`findings` is every finding with its full step ranges and
    worst value, errors first, then warnings, each in check order (the order
    :func:`rllog.doctor.diagnose` returns).

    Memory: O(1) per metric, except the reward and KL series the trend rule keeps
    (one float and one int per logged value, 16 bytes, in arrays).
    """

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.t = thresholds or Thresholds()
        self._metrics: dict[str, _Metric | None] = {}
        self._nonfinite: dict[str, dict[str, Any]] = {}  # {metric: {"steps", "kinds", "fired_at"}}
        self._reward: _Metric | None = None
        self._kl: _Metric | None = None
        self._trend: Finding | None = None
        self._core = False

    # -- feeding ------------------------------------------------------------------------

    def feed_row(self, step: int, row: Mapping[str, Any]) -> list[Finding]:
        """Feed every numeric value of one row (bools as 0/1; strings and None skipped)."""
        out: list[Finding] = []
        for k, v in row.items():
            t = type(v)
            if t is float or t is int or t is bool:
                out.extend(self.feed_value(k, step, float(v)))
        return out

    def feed_value(self, metric: str, step: int, v: float) -> list[Finding]:
        if v - v != 0:  # NaN or +-Inf
            if v != v and canonical(metric) in NAN_BY_DEFINITION:
                return []  # NaN by definition there; an infinity still is a finding
            return self._feed_nonfinite(metric, step, v)
        m = self._metrics.get(metric, _MISSING)
        if m is _MISSING:
            m = self._metrics[metric] = self._new_metric(metric)
        if m is None:
            return []
        fired: list[Finding] = []
        if m.keep:
            m.values.append(v)
            m.steps.append(step)
        persist = self.t.persist
        for b in m.bounds:
            if b.push(step, v, persist):
                fired.append(self._bound_finding(m, b))
        if m.spikes is not None and m.spikes.push(step, v, self.t.value_loss_spike):
            fired.append(self._spike_finding(m, m.spikes))
        if m.entropy:
            fired.extend(self._feed_entropy(m, step, v))
        return fired

    def _new_metric(self, metric: str) -> _Metric | None:
        name = canonical(metric)
        if name not in _RULE_KEYS:
            return None
        t = self.t
        m = _Metric(metric)
        self._core = self._core or name in CORE_KEYS

        def bound(check: str, sev: Severity, op: str, x: float, what: str, advice: str | None = None) -> None:
            m.bounds.append(
                _Bound(check, sev, op, x, f"{op} {_fmt(x)} for {t.persist} logged steps", what, advice)
            )

        if name in RATIO_KEYS:
            bound("ratio", "error", ">", t.ratio_high, "is far from 1")
            bound("ratio", "error", "<", t.ratio_low, "is far from 1")
        if name in CLIPFRAC_KEYS:
            bound("clip_fraction", "warning", ">", t.clipfrac_high, "is high")
        if name in APPROXKL_KEYS:
            bound("approx_kl", "warning", ">", t.approxkl_high, "is high")
        for names, high, advice in (
            (TOKEN_KL_KEYS, t.kl_high, None),
            (SEQ_KL_KEYS, t.seq_kl_high, None),
            (SAMPLE_KL_KEYS, t.sample_train_kl_high, "kl_large_sample"),
        ):
            if name in names:
                bound("kl_negative", "error", "<", t.kl_negative, "is negative")
                bound("kl_large", "warning", ">", high, "is large", advice)
                if self._kl is None:
                    self._kl, m.keep = m, True
        if name in CLIPPED_KEYS:
            bound("clipped_completions", "warning", ">", t.clipped_completions_high, "is high")
        if name in VALUE_LOSS_KEYS:
            m.spikes = _Spikes(t.spike_window)
        if name in ENTROPY_KEYS:
            m.entropy = True
        if name in REWARD_KEYS and self._reward is None:
            self._reward, m.keep = m, True
        return m

    def _feed_entropy(self, m: _Metric, step: int, v: float) -> list[Finding]:
        t = self.t
        if m.first is not None and len(m.first) < t.baseline_rows:  # the start is not known yet
            m.first.append((step, v))
            return []
        fired = []
        if m.first is not None:  # the first value past the baseline rows: set the rules up, replay
            start = _median([x for _, x in m.first])
            collapse = min(t.entropy_floor, t.entropy_collapse_frac * start)
            m.bounds.append(_Bound(
                "entropy_collapse", "warning", "<", collapse,
                f"< {_fmt(t.entropy_floor)} and < {_fmt(t.entropy_collapse_frac)} x start ({_fmt(start)})",
                f"collapsed from {_fmt(start)} toward 0", None,
            ))  # fmt: skip
            if start > 0:
                m.bounds.append(_Bound(
                    "entropy_rise", "warning", ">", t.entropy_rise_factor * start,
                    f"> {_fmt(t.entropy_rise_factor)} x start ({_fmt(start)})", f"rose from {_fmt(start)}", None,
                ))  # fmt: skip
            replay, m.first = m.first, None  # type: ignore[assignment]  # None: the start is known
            for b in m.bounds:
                if b.check.startswith("entropy"):
                    for s, x in replay:
                        if b.push(s, x, t.persist):
                            fired.append(self._bound_finding(m, b))
        for b in m.bounds:
            if b.check.startswith("entropy") and b.push(step, v, t.persist):
                fired.append(self._bound_finding(m, b))
        return fired

    def _feed_nonfinite(self, metric: str, step: int, v: float) -> list[Finding]:
        entry = self._nonfinite.get(metric)
        kind = "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
        if entry is None:
            self._nonfinite[metric] = {"steps": [step], "kinds": {kind}, "fired_at": step}
            return [self._nonfinite_finding(metric)]
        if step not in entry["steps"]:
            entry["steps"].append(step)
        entry["kinds"].add(kind)
        return []

    def watches(self, metric: str) -> bool:
        """True if a rule besides the NaN/Inf check reads ``metric``; of any other metric
        only non-finite values need feeding (finite ones change nothing)."""
        return canonical(metric) in _RULE_KEYS

    def order_by_columns(self, columns: Sequence[str]) -> None:
        """List findings as if the values had been fed column by column in ``columns``
        order (what :func:`rllog.doctor.diagnose` does with a DataFrame), when they were
        fed row by row: metrics and non-finite findings in that column order, and a
        non-finite finding fired at its lowest step (the column's values in step order).
        Metrics not in ``columns`` keep their place after those that are."""
        rank = {c: i for i, c in enumerate(columns)}
        last = len(rank)
        self._metrics = dict(sorted(self._metrics.items(), key=lambda kv: rank.get(kv[0], last)))
        self._nonfinite = dict(sorted(self._nonfinite.items(), key=lambda kv: rank.get(kv[0], last)))
        for entry in self._nonfinite.values():
            entry["fired_at"] = min(entry["steps"])

    # -- findings -------------------------------------------------------------------------

    def finish(self) -> list[Finding]:
        """Run the whole-run rule (reward flat while KL grows) on what was fed; returns the
        findings that are new (at most one)."""
        self._trend = self._reward_flat_kl_grows()
        return [self._trend] if self._trend is not None else []

    def findings(self) -> list[Finding]:
        """Every finding so far, with full step ranges (see the class docstring)."""
        out: list[Finding] = [self._nonfinite_finding(k) for k in self._nonfinite]
        for check in _CHECK_ORDER:
            for m in self._metrics.values():
                if m is None:
                    continue
                if check == "value_loss_spike":
                    if m.spikes is not None and m.spikes.fired_at is not None:
                        out.append(self._spike_finding(m, m.spikes))
                    continue
                out.extend(
                    self._bound_finding(m, b) for b in m.bounds if b.check == check and b.fired_at is not None
                )
        if self._trend is not None:
            out.append(self._trend)
        if not out and not self._core:
            out.append(Finding(
                check="no_metrics", severity="info", metric="", steps=[], value=math.nan, threshold="",
                message="no PPO/GRPO stability metric (ratio, KL, clip fraction, entropy, value loss) was found; only NaN/Inf were checked",
                advice=ADVICE["no_metrics"],
            ))  # fmt: skip
        order = {s: i for i, s in enumerate(reversed(SEVERITIES))}
        return sorted(out, key=lambda f: order[f.severity])

    def _make(
        self,
        check: str,
        severity: Severity,
        m: _Metric,
        ranges: list[list[int]],
        value: float,
        threshold: str,
        what: str,
        advice: str | None,
        fired_at: int | None,
    ) -> Finding:
        steps = [(a, b) for a, b in ranges]
        where = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in steps[:4]) + (
            " ..." if len(steps) > 4 else ""
        )
        return Finding(
            check=check, severity=severity, metric=m.name, steps=steps, value=value, threshold=threshold,
            message=f"{m.name} {what} at step(s) {where} (worst {_fmt(value)}; threshold {threshold})",
            advice=ADVICE[advice or check], fired_at=fired_at,
        )  # fmt: skip

    def _bound_finding(self, m: _Metric, b: _Bound) -> Finding:
        return self._make(
            b.check, b.severity, m, b.ranges, b.worst, b.threshold, b.what, b.advice, b.fired_at
        )

    def _spike_finding(self, m: _Metric, s: _Spikes) -> Finding:
        t = self.t
        threshold = f"> {_fmt(t.value_loss_spike)} x median of the previous {t.spike_window}"
        return self._make(
            "value_loss_spike", "warning", m, s.ranges, s.worst, threshold, "spiked", None, s.fired_at
        )

    def _nonfinite_finding(self, metric: str) -> Finding:
        entry = self._nonfinite[metric]
        kinds = [k for k in ("NaN", "Infinity", "-Infinity") if k in entry["kinds"]]
        value = math.inf if "Infinity" in kinds else (-math.inf if "-Infinity" in kinds else math.nan)
        merged: list[tuple[int, int]] = []
        for step in sorted(set(entry["steps"])):
            if merged and step == merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], step)
            else:
                merged.append((step, step))
        f = Finding(
            check="nonfinite", severity="error" if canonical(metric) in CORE_KEYS else "warning", metric=metric,
            steps=merged, value=value, threshold="any NaN or Inf", message="", advice=ADVICE["nonfinite"],
            fired_at=entry["fired_at"],
        )  # fmt: skip
        n = len(set(entry["steps"]))
        return msgspec.structs.replace(
            f, message=f"{metric} is {'/'.join(kinds)} at step(s) {f.steps_text(4)} ({n} values)"
        )

    def _reward_flat_kl_grows(self) -> Finding | None:
        t = self.t
        r, kl = self._reward, self._kl
        if r is None or kl is None or min(len(r.values), len(kl.values)) < t.trend_min_rows:
            return None
        q_r, q_k = max(t.baseline_rows, len(r.values) // 4), max(t.baseline_rows, len(kl.values) // 4)
        kl_first, kl_last = _median(kl.values[:q_k]), _median(kl.values[-q_k:])
        r_first, r_last = _median(r.values[:q_r]), _median(r.values[-q_r:])
        r_std = statistics.pstdev(r.values)
        grows = kl_last > t.kl_growth_factor * max(kl_first, 0.0) and kl_last - kl_first > t.kl_growth_min
        if not (grows and r_last - r_first < t.reward_flat_z * r_std):
            return None
        steps = kl.steps[len(kl.steps) - q_k :]
        return self._make(
            "reward_flat_kl_grows", "warning", kl, [[steps[0], steps[-1]]], kl_last,
            f"KL > {_fmt(t.kl_growth_factor)} x first quarter and reward gain < {_fmt(t.reward_flat_z)} std",
            f"grew from {_fmt(kl_first)} to {_fmt(kl_last)} while {r.name} moved {_fmt(r_first)} -> {_fmt(r_last)}",
            None, steps[-1],
        )  # fmt: skip


_MISSING: Any = object()
#: every metric some rule looks at
_RULE_KEYS = frozenset(CORE_KEYS).union(REWARD_KEYS, CLIPPED_KEYS)


def watched(metric: str) -> bool:
    """True when some rule looks at ``metric``'s finite values; any other metric is checked
    only for NaN/Inf (a columnar caller may then feed :meth:`RuleEngine.feed_value` only its
    non-finite cells and get the same findings)."""
    return canonical(metric) in _RULE_KEYS


#: the order findings of one severity are listed in (the order of the module docstring's table)
_CHECK_ORDER = (
    "ratio", "clip_fraction", "approx_kl", "kl_negative", "kl_large", "clipped_completions",
    "value_loss_spike", "entropy_collapse", "entropy_rise",
)  # fmt: skip
