"""PPO/GRPO metrics from per-sample arrays, computed the way TRL computes them.

For loops that are not TRL but want TRL's metric names and definitions (the ones
:mod:`rllog.doctor` checks). Every function takes numpy arrays, torch tensors (moved to
the CPU and detached) or nested lists, and returns ``{metric name: float}`` ready for
:meth:`rllog.RunLogger.log_metrics`. Pure: numpy only, no I/O.

Sources (TRL 1.16.0 unless said; PPO from TRL 1.12.0, the last release with it):

- ``trl/trainer/grpo_trainer.py``, ``GRPOTrainer._generate_and_score_completions``:
  ``completions/*`` (the block after "Log completion lengths, mean, min, max") and
  ``rewards/<name>/mean|std``, ``reward``, ``reward_std``, ``frac_reward_zero_std``
  (after "Calculate mean reward per function"); ``GRPOTrainer._compute_loss``:
  ``kl``, ``entropy``, ``clip_ratio/*`` (``global_masked_mean``, ``masked_seq_mean``).
- ``trl/trainer/utils.py``: ``nanstd`` (Bessel-corrected, NaN with fewer than two values),
  ``nanmin``, ``nanmax``.
- ``trl/experimental/ppo/ppo_trainer.py`` (1.12.0), ``PPOTrainer.train``: the
  per-minibatch ``approxkl``, ``pg_clipfrac``, ``ratio`` and the ``objective/*``,
  ``policy/*``, ``val/ratio``, ``val/ratio_var`` metrics.

NaN policy: means and standard deviations ignore NaN entries (TRL's ``torch.nanmean`` /
``nanstd``); a mean over nothing is NaN, a standard deviation over fewer than two values
is NaN (as in TRL), except where TRL itself defines another value (no terminated
completion: terminated lengths are 0; a masked mean over no token is 0, TRL's
``clamp(min=1)``). Each function also returns a ``<family>/count`` key (rllog's addition,
not a TRL metric) with the number of values the means were taken over, so a NaN or a 0
can be told apart from a real value. No function raises on empty input; they raise
ValueError on arrays whose shapes do not fit together (the message gives both shapes).

Shapes use the suffix notation: ``_N`` one value per completion, ``_NT`` per completion
and token, ``_G`` group size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "completion_stats",
    "reward_stats",
    "clip_stats",
    "entropy",
    "kl",
    "ppo_minibatch_stats",
    "ppo_stats",
]

_NAN = float("nan")


def _array(x: Any, what: str, dtype: Any = np.float64) -> np.ndarray:
    """``x`` (numpy, torch, list, scalar) as a numpy array of ``dtype``."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor, without importing torch
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what}: expected numbers (numpy, torch or a list), got {type(x).__name__}: {exc}"
        ) from None


def _same_shape(a: np.ndarray, b: np.ndarray, what: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{what}: shapes differ, {a.shape} vs {b.shape}")


def _nanmean(x: np.ndarray) -> float:
    n = int(np.count_nonzero(~np.isnan(x)))
    return float(np.nansum(x) / n) if n else _NAN


def _nanstd(x: np.ndarray) -> float:
    """TRL's ``nanstd`` (trl/trainer/utils.py): Bessel-corrected std of the non-NaN values,
    NaN with fewer than two of them."""
    finite = x[~np.isnan(x)]
    if finite.size < 2:
        return _NAN
    return float(np.sqrt(np.mean((finite - finite.mean()) ** 2) * finite.size / (finite.size - 1)))


def _mask_for(mask: Any, like: np.ndarray, what: str) -> np.ndarray:
    if mask is None:
        return np.ones(like.shape, dtype=bool)
    m = _array(mask, f"{what} mask", dtype=np.float64) != 0
    _same_shape(like, m, what)
    return m


def completion_stats(lengths: Any, truncated: Any) -> dict[str, float]:
    """``completions/*`` of one generation batch.

    Args:
        lengths: tokens in each completion, EOS included (``completion_mask.sum(1)``), shape ``[N]``.
        truncated: True where the completion did not end with EOS or pad (cut at
            ``max_completion_length``), shape ``[N]``.

    Returns ``completions/mean_length``, ``min_length``, ``max_length``,
    ``clipped_ratio`` (fraction truncated), ``mean|min|max_terminated_length`` (over
    completions that ended with EOS; all 0.0 when none did, TRL's edge case) and
    ``completions/count`` (N). With N == 0 every value but the count is NaN.

    Source: TRL ``GRPOTrainer._generate_and_score_completions`` (grpo_trainer.py, "Log
    completion lengths, mean, min, max" and "Identify sequences that terminated with EOS").

    Raises:
        ValueError: ``lengths`` and ``truncated`` differ in shape.
    """
    lens = _array(lengths, "completion_stats lengths").reshape(-1)
    trunc = _array(truncated, "completion_stats truncated", dtype=bool).reshape(-1)
    _same_shape(lens, trunc, "completion_stats(lengths, truncated)")
    out = {"completions/count": float(lens.size)}
    if lens.size == 0:
        keys = ["mean_length", "min_length", "max_length", "clipped_ratio"]
        keys += ["mean_terminated_length", "min_terminated_length", "max_terminated_length"]
        return {**{f"completions/{k}": _NAN for k in keys}, **out}
    term = lens[~trunc]
    if term.size == 0:  # TRL: "edge case where no terminated sequences are found" -> zeros(1)
        term = np.zeros(1)
    return {
        "completions/mean_length": float(lens.mean()),
        "completions/min_length": float(lens.min()),
        "completions/max_length": float(lens.max()),
        "completions/clipped_ratio": float(trunc.mean()),
        "completions/mean_terminated_length": float(term.mean()),
        "completions/min_terminated_length": float(term.min()),
        "completions/max_terminated_length": float(term.max()),
        **out,
    }


def reward_stats(
    rewards_by_func: Mapping[str, Any],
    weights: Sequence[float] | None = None,
    *,
    group_size: int,
    scale_rewards: str = "group",
) -> dict[str, float]:
    """GRPO/RLOO reward metrics of one generation batch.

    Args:
        rewards_by_func: reward-function name -> its reward per completion, shape ``[N]``
            each, completions of one prompt adjacent (groups of ``group_size``); NaN (or
            None in a list) where the function did not score a completion.
        weights: one weight per function, in the mapping's order (default all 1.0;
            TRL's ``reward_weights``).
        group_size: completions per prompt (TRL's ``num_generations``), >= 1.
        scale_rewards: TRL's ``scale_rewards``: ``"group"`` or ``"none"`` (std within
            each group) or ``"batch"`` (std over the whole batch); it decides which std
            ``frac_reward_zero_std`` looks at.

    Returns ``rewards/<name>/mean`` and ``rewards/<name>/std`` (NaN-aware, Bessel),
    ``reward`` and ``reward_std`` of the weighted sum (``nansum`` over functions; a
    completion no function scored is left out), ``frac_reward_zero_std`` (fraction of
    completions whose group (or batch) std is 0, within 1e-8: groups with nothing to
    learn from), and the counts ``rewards/<name>/count`` and ``reward/count``.

    Source: TRL ``GRPOTrainer._generate_and_score_completions`` (grpo_trainer.py,
    ``multi_objective_aggregation="sum_then_normalize"``, the default; RLOOTrainer logs
    the same keys the same way) and ``nanstd`` (trl/trainer/utils.py).

    Raises:
        ValueError: N not a multiple of ``group_size``, functions of different lengths,
            a wrong number of weights, an unknown ``scale_rewards``.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"reward_stats: group_size must be an int >= 1, got {group_size!r}")
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(
            f"reward_stats: scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}"
        )
    names = list(rewards_by_func)
    cols = [
        _array(
            [_NAN if v is None else v for v in r] if isinstance(r, list) else r, f"rewards of {n!r}"
        ).reshape(-1)
        for n, r in rewards_by_func.items()
    ]
    n = cols[0].size if cols else 0
    for name, col in zip(names, cols, strict=True):
        if col.size != n:
            raise ValueError(f"reward_stats: {name!r} has {col.size} rewards, {names[0]!r} has {n}")
    w = np.ones(len(names)) if weights is None else _array(weights, "reward_stats weights").reshape(-1)
    if w.size != len(names):
        raise ValueError(f"reward_stats: {w.size} weights for {len(names)} reward functions {names}")
    if n % group_size:
        raise ValueError(f"reward_stats: {n} rewards is not a multiple of group_size={group_size}")
    out: dict[str, float] = {}
    for name, col in zip(names, cols, strict=True):
        out[f"rewards/{name}/mean"] = _nanmean(col)
        out[f"rewards/{name}/std"] = _nanstd(col)
        out[f"rewards/{name}/count"] = float(np.count_nonzero(~np.isnan(col)))
    per_func = np.stack(cols, axis=1) if cols else np.zeros((0, 0))
    unscorable = np.isnan(per_func).all(axis=1) if cols else np.zeros(0, dtype=bool)
    rewards = np.nansum(per_func * w[None, :], axis=1) if cols else np.zeros(0)
    rewards[unscorable] = _NAN
    out["reward"] = _nanmean(rewards)
    out["reward_std"] = _nanstd(rewards)
    out["reward/count"] = float(np.count_nonzero(~np.isnan(rewards)))
    if n == 0:
        out["frac_reward_zero_std"] = _NAN
    elif scale_rewards == "batch":
        std = _nanstd(rewards) if n > 1 else 0.0
        out["frac_reward_zero_std"] = float(abs(std) <= 1e-8)  # torch.isclose(std, 0): NaN is not close
    elif group_size > 1:
        stds = np.array([_nanstd(g) for g in rewards.reshape(-1, group_size)])
        out["frac_reward_zero_std"] = float(np.mean(np.abs(stds) <= 1e-8))
    else:  # one completion per prompt: TRL uses zeros for the std
        out["frac_reward_zero_std"] = 1.0
    return out


def _masked_mean_clamped(x: np.ndarray, mask: np.ndarray) -> float:
    """TRL's ``global_masked_mean`` on one process: ``sum(x * mask) / max(sum(mask), 1)``."""
    return float(np.where(mask, x, 0.0).sum() / max(float(mask.sum()), 1.0))


def _tokens(values: Any, mask: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    x = _array(values, what)
    if x.ndim == 1:
        x = x[:, None]
    return x, _mask_for(mask, x, what)


def clip_stats(
    ratios: Any,
    advantages: Any,
    mask: Any = None,
    *,
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
) -> dict[str, float]:
    """GRPO's ``clip_ratio/*``: how often the importance ratio sat outside the trust region
    on the side where clipping binds.

    Args:
        ratios: the importance ratio pi/pi_old per token, ``[N, T]`` (TRL's ``coef_1``), or
            per sequence ``[N]`` / ``[N, 1]`` (``importance_sampling_level="sequence"``).
        advantages: per completion ``[N]`` (or ``[N, 1]``).
        mask: ``[N, T]`` true for completion tokens (default: all).
        epsilon_low, epsilon_high: TRL's ``epsilon`` and ``epsilon_high`` (default: equal
            to ``epsilon_low``).

    Returns ``clip_ratio/low_mean`` (ratio < 1 - eps_low and advantage < 0),
    ``high_mean`` (ratio > 1 + eps_high and advantage > 0), ``region_mean`` (either),
    token-weighted over the mask (0.0 with no token); ``low_min`` / ``high_max``, the
    min/max over completions of the per-completion fraction (NaN-aware; NaN when no
    completion has a token); ``clip_ratio/count`` (tokens).

    Source: TRL ``GRPOTrainer._compute_loss`` (grpo_trainer.py, ``is_low_clipped`` ...
    ``clip_ratio/high_max``; ``global_masked_mean``, ``masked_seq_mean``).

    Raises:
        ValueError: shapes that do not fit.
    """
    r, m = _tokens(ratios, mask, "clip_stats ratios")
    a = _array(advantages, "clip_stats advantages").reshape(-1, 1)
    if a.shape[0] != r.shape[0]:
        raise ValueError(
            f"clip_stats: {a.shape[0]} advantages for {r.shape[0]} completions (ratios {r.shape})"
        )
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    low = (r < 1 - epsilon_low) & (a < 0)
    high = (r > 1 + eps_high) & (a > 0)
    region = low | high

    def per_seq(x: np.ndarray) -> np.ndarray:
        if x.shape[1] == 1:
            return x[:, 0].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(m, x, 0.0).sum(1) / m.sum(1)

    def nan_extreme(x: np.ndarray, fn: Any) -> float:
        x = x[~np.isnan(x)]
        return float(fn(x)) if x.size else _NAN

    seq_mask = np.ones_like(low) if r.shape[1] == 1 else m
    return {
        "clip_ratio/low_mean": _masked_mean_clamped(low, seq_mask),
        "clip_ratio/high_mean": _masked_mean_clamped(high, seq_mask),
        "clip_ratio/region_mean": _masked_mean_clamped(region, seq_mask),
        "clip_ratio/low_min": nan_extreme(per_seq(low), np.min),
        "clip_ratio/high_max": nan_extreme(per_seq(high), np.max),
        "clip_ratio/count": float(seq_mask.sum()),
    }


def entropy(entropies: Any, mask: Any = None) -> dict[str, float]:
    """GRPO's ``entropy``: the token-weighted mean of per-token entropies (nats) over the mask.

    Args:
        entropies: ``[N, T]`` per-token entropies (nats).
        mask: ``[N, T]`` true for completion tokens (default: all).

    Returns ``entropy`` (0.0 with no token, TRL's ``clamp(min=1)``) and ``entropy/count`` (tokens).

    Source: TRL ``GRPOTrainer._compute_loss`` (``global_masked_mean(entropies)``).
    """
    x, m = _tokens(entropies, mask, "entropy")
    return {"entropy": _masked_mean_clamped(x, m), "entropy/count": float(m.sum())}


def kl(logps: Any, ref_logps: Any, mask: Any = None) -> dict[str, float]:
    """GRPO's ``kl``: the k3 estimator of KL(policy || reference) per token,
    ``exp(ref - logp) - (ref - logp) - 1`` (>= 0), token-weighted over the mask.

    Args:
        logps, ref_logps: ``[N, T]`` log-probabilities (nats) of the sampled tokens under
            the policy and the reference model.
        mask: ``[N, T]`` true for completion tokens (default: all).

    Returns ``kl`` (0.0 with no token) and ``kl/count`` (tokens).

    Source: TRL ``GRPOTrainer._compute_loss`` (``per_token_kl`` and
    ``global_masked_mean(per_token_kl)``), without ``use_bias_correction_kl``.

    Raises:
        ValueError: ``logps`` and ``ref_logps`` differ in shape.
    """
    lp, m = _tokens(logps, mask, "kl logps")
    ref, _ = _tokens(ref_logps, None, "kl ref_logps")
    _same_shape(lp, ref, "kl(logps, ref_logps)")
    d = np.where(m, ref - lp, 0.0)
    return {"kl": _masked_mean_clamped(np.exp(d) - d - 1, m), "kl/count": float(m.sum())}


def ppo_minibatch_stats(
    new_logprobs: Any, old_logprobs: Any, advantages: Any, mask: Any = None, *, cliprange: float = 0.2
) -> dict[str, float]:
    """The per-minibatch values TRL's PPO averages into ``policy/*`` and ``val/ratio``.

    Args:
        new_logprobs, old_logprobs: ``[N, T]`` log-probabilities (nats) of the response
            tokens under the policy being updated and the rollout policy.
        advantages: ``[N, T]`` per-token advantages.
        mask: ``[N, T]`` true for response tokens (default: all). Padding contributes a
            log-ratio of 0 (ratio 1) to ``approxkl`` and ``ratio``, which TRL averages over
            all positions (both log-probs are ``INVALID_LOGPROB`` there), while ``clipfrac``
            is a masked mean.
        cliprange: PPO's clip range epsilon.

    Returns ``approxkl`` = 0.5 * mean(log-ratio**2), ``clipfrac`` = masked mean of
    ``clamped loss > unclamped loss``, ``ratio`` = mean(exp(log-ratio)); NaN for
    ``clipfrac`` with no token, NaN for all with no position. Pass lists of these to
    :func:`ppo_stats`.

    Source: TRL 1.12.0 ``trl/experimental/ppo/ppo_trainer.py``, ``PPOTrainer.train``
    (``logprobs_diff``, ``ratio``, ``pg_losses``/``pg_losses2``, ``pg_clipfrac``,
    ``approxkl``, ``ratio_stats``).
    """
    new, m = _tokens(new_logprobs, mask, "ppo_minibatch_stats new_logprobs")
    old, _ = _tokens(old_logprobs, None, "ppo_minibatch_stats old_logprobs")
    adv, _ = _tokens(advantages, None, "ppo_minibatch_stats advantages")
    _same_shape(new, old, "ppo_minibatch_stats(new_logprobs, old_logprobs)")
    adv = np.broadcast_to(adv, new.shape) if adv.shape[1] == 1 else adv
    _same_shape(new, adv, "ppo_minibatch_stats(new_logprobs, advantages)")
    if new.size == 0:
        return {"approxkl": _NAN, "clipfrac": _NAN, "ratio": _NAN}
    diff = np.where(m, new - old, 0.0)
    ratio = np.exp(diff)
    losses = -adv * ratio
    losses2 = -adv * np.clip(ratio, 1.0 - cliprange, 1.0 + cliprange)
    n_tok = float(m.sum())
    return {
        "approxkl": float(0.5 * np.mean(diff**2)),
        "clipfrac": float(np.where(m, losses2 > losses, 0.0).sum() / n_tok) if n_tok else _NAN,
        "ratio": float(ratio.mean()),
    }


def _values(x: Any, what: str) -> np.ndarray:
    if isinstance(x, Iterable) and not isinstance(x, (str, bytes, np.ndarray)) and not hasattr(x, "detach"):
        x = [float(v.item() if hasattr(v, "item") else v) for v in x]
    return _array(x, what).reshape(-1)


def ppo_stats(
    *,
    kl: Any,
    logprobs: Any,
    non_score_reward: Any,
    scores: Any,
    mask: Any = None,
    approxkl: Any = (),
    clipfrac: Any = (),
    ratio: Any = (),
) -> dict[str, float]:
    """PPO's rollout and update metrics for one PPO batch.

    Args:
        kl: ``[N, T]`` per-token KL estimate (nats) of policy vs reference (TRL's ``kl``).
        logprobs: ``[N, T]`` rollout log-probabilities of the response tokens (nats).
        non_score_reward: ``[N, T]`` the per-token KL penalty rewards (``-kl_coef * kl``).
        scores: ``[N]`` reward-model scores.
        mask: ``[N, T]`` true for response tokens (default: all).
        approxkl, clipfrac, ratio: the per-minibatch values of this batch (any shape;
            from :func:`ppo_minibatch_stats`, TRL's ``approxkl_stats`` etc. of shape
            ``[epochs, minibatches, grad_accum]``).

    Returns ``objective/kl`` (per-sequence sum, batch mean), ``objective/entropy`` (the
    same of ``-logprobs``), ``objective/non_score_reward``, ``objective/rlhf_reward``
    (= non_score_reward + scores), ``objective/scores``, ``policy/approxkl_avg``,
    ``policy/clipfrac_avg``, ``val/ratio`` (means over minibatches), ``val/ratio_var``
    (Bessel-corrected variance over minibatches: NaN with one minibatch, exactly as TRL
    logs it, see :mod:`rllog.doctor`), ``objective/count`` (N) and ``policy/count``
    (minibatches). Means over nothing are NaN.

    Source: TRL 1.12.0 ``trl/experimental/ppo/ppo_trainer.py``, ``PPOTrainer.train``
    (``mean_kl``, ``mean_entropy``, ``mean_non_score_reward``, ``rlhf_reward`` and the
    ``metrics[...]`` block; ``torch.Tensor.var`` is unbiased).

    Raises:
        ValueError: per-token arrays of different shapes, or ``scores`` not one per row.
    """
    k, m = _tokens(kl, mask, "ppo_stats kl")
    lp, _ = _tokens(logprobs, None, "ppo_stats logprobs")
    nsr, _ = _tokens(non_score_reward, None, "ppo_stats non_score_reward")
    _same_shape(k, lp, "ppo_stats(kl, logprobs)")
    _same_shape(k, nsr, "ppo_stats(kl, non_score_reward)")
    sc = _array(scores, "ppo_stats scores").reshape(-1)
    if sc.size != k.shape[0]:
        raise ValueError(f"ppo_stats: {sc.size} scores for {k.shape[0]} sequences (kl {k.shape})")

    def seq_mean(x: np.ndarray) -> float:
        return float(np.where(m, x, 0.0).sum(1).mean()) if x.shape[0] else _NAN

    mean_nsr = seq_mean(nsr)
    mean_scores = float(sc.mean()) if sc.size else _NAN
    ak, cf, ra = (
        _values(v, f"ppo_stats {n}")
        for v, n in ((approxkl, "approxkl"), (clipfrac, "clipfrac"), (ratio, "ratio"))
    )
    ratio_var = float(np.var(ra, ddof=1)) if ra.size > 1 else _NAN
    return {
        "objective/kl": seq_mean(k),
        "objective/entropy": seq_mean(-lp),
        "objective/non_score_reward": mean_nsr,
        "objective/rlhf_reward": mean_nsr + mean_scores,
        "objective/scores": mean_scores,
        "policy/approxkl_avg": float(ak.mean()) if ak.size else _NAN,
        "policy/clipfrac_avg": float(cf.mean()) if cf.size else _NAN,
        "val/ratio": float(ra.mean()) if ra.size else _NAN,
        "val/ratio_var": ratio_var,
        "objective/count": float(k.shape[0]),
        "policy/count": float(ra.size),
    }
