"""One metric vocabulary: the key names that the summary, the index page, the console and
the doctor recognise. Pure data, no I/O.

Names come from the loops rllog reads and writes: tinker-cookbook (``env/all/...``,
``optim/...``, ``time/...``), TRL (``reward``, ``kl``, ``clip_ratio/...``,
``completions/...``, ``eval_...``; TRL's logging docs, https://huggingface.co/docs/trl/logging),
verl (``actor/...``, ``critic/...``) and OpenRLHF (``ppo_kl``, ``policy_entropy``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "STEP_KEYS",
    "EVAL_PREFIXES",
    "TIME_KEYS",
    "KEY_METRICS",
    "MAIN_METRICS",
    "CONSOLE_KEYS",
    "is_eval",
    "RATIO_KEYS",
    "CLIPFRAC_KEYS",
    "APPROXKL_KEYS",
    "TOKEN_KL_KEYS",
    "SEQ_KL_KEYS",
    "SAMPLE_KL_KEYS",
    "VALUE_LOSS_KEYS",
    "ENTROPY_KEYS",
    "CLIPPED_KEYS",
    "REWARD_KEYS",
    "CORE_KEYS",
    "check_keys",
]

#: step columns tried in order when ``step_key`` is not given: rllog/tinker/TRL ``step``,
#: HF/custom ``global_step``, W&B ``_step``, then ``iteration`` and ``grad_step``.
STEP_KEYS = ("step", "global_step", "_step", "iteration", "grad_step")

#: metric name prefixes of evaluation metrics (tinker ``test/...``, TRL ``eval_...``).
#: ``val/`` is not one: PPO's ``val/ratio`` is a training metric.
EVAL_PREFIXES = ("eval/", "eval_", "test/", "test_")


def is_eval(column: str) -> bool:
    """Whether a metric name holds an evaluation result (starts with one of :data:`EVAL_PREFIXES`)."""
    return column.startswith(EVAL_PREFIXES)


#: metrics shown first when present, in this order: tinker-cookbook, TRL, custom loops.
KEY_METRICS = (
    "env/all/reward/total", "reward", "train/reward", "test/env/all/reward/total", "eval_reward",
    "env/all/correct", "test/env/all/correct", "test/accuracy", "final/accuracy",
    "loss", "train/loss", "train_mean_nll", "eval_loss",
    "optim/entropy", "entropy", "optim/kl_sample_train_v1", "optim/kl_sample_train_v2", "kl", "objective/kl",
    "teacher_kl", "grad_norm", "val/ratio", "clip_ratio/region_mean", "completions/clipped_ratio",
    "completions/mean_length", "env/all/ac_tokens_per_turn", "optim/lr", "learning_rate", "progress/done_frac",
)  # fmt: skip

#: per-iteration wall time, in seconds, first found wins.
TIME_KEYS = (
    "time/total",
    "time/training_loop/total",
    "step_time",
    "time/step",
    "time/iteration",
    "train/step_time",
)


#: metrics charted first when present (after stripping a leading ``train/``), in this order
MAIN_METRICS = (
    "env/all/reward/total",
    "reward",
    "objective/rlhf_reward",
    "objective/scores",
    "test/env/all/reward/total",
    "test/test/env/all/reward/total",
    "eval_reward",
    "reward_std",
    "objective/kl",
    "kl",
    "optim/kl_sample_train_v1",
    "optim/kl_sample_train_v2",
    "kl_sample_train_v1",
    "kl_sample_train_v2",
    "policy/approxkl_avg",
    "teacher_kl",
    "objective/entropy",
    "policy/entropy_avg",
    "entropy",
    "optim/entropy",
    "val/ratio",
    "policy/clipfrac_avg",
    "clip_ratio",
    "clip_ratio/region_mean",
    "completions/clipped_ratio",
    "loss/value_avg",
    "loss/policy_avg",
    "loss",
    "train_mean_nll",
    "train/loss",
    "completions/mean_length",
    "env/all/ac_tokens_per_turn",
    "grad_norm",
    "optim/lr",
    "learning_rate",
    "time/total",
)

#: what ``RunLogger(console=True)`` prints of each row when present, in this order
CONSOLE_KEYS = (
    "env/all/reward/total",
    "reward",
    "env/all/correct",
    "entropy",
    "kl_sample_train_v1",
    "kl",
    "loss",
)

# The doctor's metric families: exact key names (after stripping a leading "train/").
RATIO_KEYS = ("val/ratio",)
CLIPFRAC_KEYS = (
    "policy/clipfrac_avg",
    "clip_ratio",
    "clip_ratio/region_mean",
    "clip_ratio/low_mean",
    "clip_ratio/high_mean",
    "actor/pg_clipfrac",  # verl
    "ppo_clip_ratio",  # OpenRLHF
)
APPROXKL_KEYS = ("policy/approxkl_avg", "actor/ppo_kl", "ppo_kl")  # TRL, verl, OpenRLHF
TOKEN_KL_KEYS = ("kl", "actor/kl_loss")  # TRL and OpenRLHF; verl's KL-to-reference loss
SEQ_KL_KEYS = ("objective/kl",)
SAMPLE_KL_KEYS = (
    "optim/kl_sample_train_v1",
    "optim/kl_sample_train_v2",
    "kl_sample_train_v1",
    "kl_sample_train_v2",
)
VALUE_LOSS_KEYS = ("loss/value_avg", "critic/vf_loss", "critic_loss")  # TRL, verl, OpenRLHF
ENTROPY_KEYS = (
    "objective/entropy",
    "policy/entropy_avg",
    "entropy",
    "optim/entropy",
    "actor/entropy",
    "policy_entropy",
)
CLIPPED_KEYS = ("completions/clipped_ratio", "response_length/clip_ratio")  # TRL, verl
REWARD_KEYS = (
    "objective/rlhf_reward",
    "objective/scores",
    "reward",
    "env/all/reward/total",
    "critic/score/mean",
)
CORE_KEYS = set(
    RATIO_KEYS
    + CLIPFRAC_KEYS
    + APPROXKL_KEYS
    + TOKEN_KL_KEYS
    + SEQ_KL_KEYS
    + SAMPLE_KL_KEYS
    + VALUE_LOSS_KEYS
    + ENTROPY_KEYS
    + REWARD_KEYS
)
CORE_KEYS.update(
    {
        "loss",
        "loss/policy_avg",
        "grad_norm",
        "optim/lr",
        "learning_rate",
        "actor/pg_loss",
        "policy_loss",
        "actor/grad_norm",
    }
)


def check_keys(keys: Sequence[str], known: list[str], where: str) -> None:
    """Raise when a requested metric key is not among ``known`` (a run's columns).

    Raises:
        ValueError: ``-k 'reward/maen' is not a metric of <where>; closest: reward/mean``,
            the closest matches by :func:`difflib.get_close_matches` (up to 3), else the
            first 20 keys of the run.
    """
    import difflib

    known_set = set(known)
    for key in keys:
        if key in known_set:
            continue
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        hint = f"closest: {', '.join(close)}" if close else f"its keys: {', '.join(known[:20]) or 'none'}"
        raise ValueError(f"-k {key!r} is not a metric of {where}; {hint}")
