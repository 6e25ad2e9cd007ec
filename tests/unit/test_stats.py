"""rllog.stats against TRL's definitions, and its NaN/empty policy.

The reference values come from TRL's own functions where TRL exposes them
(``trl.trainer.utils.nanstd``/``nanmin``/``nanmax``) and otherwise from TRL's expressions
evaluated with torch as ``GRPOTrainer._generate_and_score_completions`` /
``_compute_loss`` (TRL 1.16.0) and ``PPOTrainer.train`` (TRL 1.12.0) write them. The values a
real GRPOTrainer run logged are compared in tests/integrations/test_trl.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rllog import stats

torch = pytest.importorskip("torch")


def _close(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(
        b, rel=1e-6, abs=1e-9
    )  # TRL computes the Bessel factor in float32


def test_reward_stats_match_trl_nanstd_and_group_std():
    trl_utils = pytest.importorskip("trl.trainer.utils")
    rng = np.random.default_rng(0)
    a = rng.normal(size=12)
    b = rng.integers(0, 2, size=12).astype(float)
    b[[0, 1, 2, 3]] = 1.0  # group 0 all equal under b
    a[[0, 1, 2, 3]] = np.nan  # ... and a does not score group 0
    a[7] = np.nan
    got = stats.reward_stats({"a": a, "b": list(b)}, weights=[0.5, 2.0], group_size=4)
    ta, tb = torch.tensor(a), torch.tensor(b)
    per_func = torch.stack([ta, tb], 1)
    rewards = (per_func * torch.tensor([0.5, 2.0])).nansum(1)
    std_g = trl_utils.nanstd(rewards.view(-1, 4), dim=1).repeat_interleave(4)
    assert _close(got["rewards/a/mean"], torch.nanmean(ta).item())
    assert _close(got["rewards/a/std"], trl_utils.nanstd(ta).item())
    assert _close(got["rewards/b/std"], trl_utils.nanstd(tb).item())
    assert _close(got["reward"], torch.nanmean(rewards).item())
    assert _close(got["reward_std"], trl_utils.nanstd(rewards).item())
    assert (
        got["frac_reward_zero_std"]
        == pytest.approx(torch.isclose(std_g, torch.zeros_like(std_g)).float().mean().item())
        == 1 / 3
    )
    assert got["rewards/a/count"] == 7 and got["reward/count"] == 12


def test_reward_stats_unscorable_rows_and_errors():
    got = stats.reward_stats({"a": [None, 1.0], "b": [None, 3.0]}, group_size=2)
    assert got["reward"] == 4.0 and got["reward/count"] == 1 and math.isnan(got["reward_std"])
    with pytest.raises(ValueError, match="multiple of group_size=4"):
        stats.reward_stats({"a": [1.0, 2.0]}, group_size=4)
    with pytest.raises(ValueError, match="'b' has 1 rewards"):
        stats.reward_stats({"a": [1.0, 2.0], "b": [1.0]}, group_size=1)


def test_completion_stats_edge_case_nothing_terminated():
    got = stats.completion_stats(torch.tensor([12, 12, 12]), [True, True, True])
    assert got["completions/clipped_ratio"] == 1.0
    assert got["completions/mean_terminated_length"] == got["completions/max_terminated_length"] == 0.0
    got = stats.completion_stats([3, 12, 5], np.array([False, True, False]))
    assert got["completions/mean_length"] == pytest.approx(20 / 3)
    assert got["completions/min_terminated_length"] == 3 and got["completions/max_terminated_length"] == 5


def _trl_clip(coef_1, adv, mask, lo, hi):
    """TRL 1.16 GRPOTrainer._compute_loss, the clip_ratio block, on one process."""
    adv = adv.unsqueeze(1)
    low = (coef_1 < 1 - lo) & (adv < 0)
    high = (coef_1 > 1 + hi) & (adv > 0)
    region = low | high
    gmm = lambda x: ((x * mask).sum() / mask.sum().clamp(min=1.0)).item()
    seq = lambda x: (x * mask).sum(-1) / mask.sum(-1)
    from trl.trainer.utils import nanmax, nanmin

    return {
        "clip_ratio/low_mean": gmm(low.float()),
        "clip_ratio/high_mean": gmm(high.float()),
        "clip_ratio/region_mean": gmm(region.float()),
        "clip_ratio/low_min": nanmin(seq(low.float())).item(),
        "clip_ratio/high_max": nanmax(seq(high.float())).item(),
    }


def test_clip_entropy_kl_match_trl_expressions():
    pytest.importorskip("trl")
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(6, 5, generator=g) * 3
    old = logp + torch.randn(6, 5, generator=g) * 0.4
    ref = logp + torch.randn(6, 5, generator=g) * 0.2
    mask = torch.ones(6, 5)
    mask[0, 3:] = 0
    mask[5, :] = 0  # a completion with no token
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    coef_1 = torch.exp(logp - old)
    got = stats.clip_stats(coef_1, adv, mask, epsilon_low=0.2, epsilon_high=0.28)
    want = _trl_clip(coef_1, adv, mask, 0.2, 0.28)
    assert all(_close(got[k], v) for k, v in want.items()), (got, want)
    assert got["clip_ratio/count"] == mask.sum().item()
    per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
    assert _close(stats.kl(logp, ref, mask)["kl"], ((per_token_kl * mask).sum() / mask.sum()).item())
    ent = torch.rand(6, 5, generator=g)
    assert _close(stats.entropy(ent, mask)["entropy"], ((ent * mask).sum() / mask.sum()).item())


def test_ppo_stats_match_trl_112_expressions():
    """TRL 1.12.0 trl/experimental/ppo/ppo_trainer.py PPOTrainer.train, one microbatch per minibatch."""
    g = torch.Generator().manual_seed(2)
    new = -torch.rand(4, 6, generator=g)
    old = new + torch.randn(4, 6, generator=g) * 0.3
    pad = torch.zeros(4, 6, dtype=torch.bool)
    pad[1, 4:] = True
    new = new.masked_fill(pad, 1.0)  # INVALID_LOGPROB on both sides
    old = old.masked_fill(pad, 1.0)
    adv = torch.randn(4, 6, generator=g)
    diff = new - old
    ratio = torch.exp(diff)
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.2)
    mb = stats.ppo_minibatch_stats(new, old, adv, ~pad, cliprange=0.2)
    assert _close(mb["approxkl"], (0.5 * (diff**2).mean()).item())
    assert _close(mb["ratio"], ratio.mean().item())
    assert _close(mb["clipfrac"], (((l2 > l1).float() * ~pad).sum() / (~pad).sum()).item())

    kl_t = torch.rand(4, 6, generator=g).masked_fill(pad, 0.0)
    scores = torch.randn(4, generator=g)
    nsr = -0.05 * kl_t
    one = stats.ppo_stats(
        kl=kl_t,
        logprobs=old,
        non_score_reward=nsr,
        scores=scores,
        mask=~pad,
        approxkl=[mb["approxkl"]],
        clipfrac=[mb["clipfrac"]],
        ratio=[mb["ratio"]],
    )
    assert _close(one["objective/kl"], kl_t.sum(1).mean().item())
    assert _close(one["objective/entropy"], ((-old) * (~pad).float()).sum(1).mean().item())
    assert _close(one["objective/rlhf_reward"], (nsr.sum(1).mean() + scores.mean()).item())
    assert math.isnan(one["val/ratio_var"]) and math.isnan(torch.tensor([mb["ratio"]]).var().item())
    two = stats.ppo_stats(
        kl=kl_t, logprobs=old, non_score_reward=nsr, scores=scores, ratio=torch.tensor([1.0, 1.5])
    )
    assert _close(two["val/ratio_var"], torch.tensor([1.0, 1.5]).var().item()) and two["policy/count"] == 2


floats = st.one_of(st.floats(-1e6, 1e6), st.just(float("nan")))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 4), st.integers(1, 3), st.data())
def test_nan_and_empty_never_raise(n_groups, g, data):
    n = n_groups * g
    a = data.draw(st.lists(floats, min_size=n, max_size=n))
    got = stats.reward_stats({"a": a}, group_size=g)
    finite = [x for x in a if not math.isnan(x)]
    assert got["rewards/a/count"] == len(finite)
    if finite:
        assert got["rewards/a/mean"] == pytest.approx(np.mean(finite))
    else:
        assert math.isnan(got["rewards/a/mean"]) and math.isnan(got["reward"])
    assert math.isnan(got["rewards/a/std"]) == (len(finite) < 2)
    lens = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    trunc = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    c = stats.completion_stats(lens, trunc)
    assert c["completions/count"] == n and math.isnan(c["completions/mean_length"]) == (n == 0)
    for fn in (stats.entropy, lambda x: stats.kl(x, x)):
        assert all(not math.isnan(v) for v in fn(np.zeros((0, 3))).values())
    p = stats.ppo_stats(
        kl=np.zeros((0, 2)), logprobs=np.zeros((0, 2)), non_score_reward=np.zeros((0, 2)), scores=[]
    )
    assert math.isnan(p["objective/kl"]) and math.isnan(p["val/ratio"]) and p["objective/count"] == 0
    assert math.isnan(stats.clip_stats(np.zeros((0, 2)), [])["clip_ratio/low_min"])
