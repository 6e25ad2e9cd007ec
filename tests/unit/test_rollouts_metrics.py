"""summarize_rollouts checked against hand-computed values (and tinker-cookbook when installed)."""

from __future__ import annotations

import math

import pytest

from rllog import build_rollout_summaries, summarize_rollouts


def batch() -> tuple[list, list[list[str]]]:
    """Three groups; rewards and token counts chosen so every number below is easy to check by hand."""
    groups = [
        [  # "math": totals 1.0, 1.0 -> all good
            {
                "steps": [
                    {"reward": 0.0, "ac_len": 10, "ob_len": 100, "metrics": {"format": 1.0}},
                    {"reward": 1.0, "ac_len": 20, "ob_len": 120, "metrics": {"format": 1.0, "correct": 1.0}},
                ],
                "trajectory_metrics": {"len": 2},
            },
            {"steps": [{"reward": 1.0, "ac_len": 30, "ob_len": 100, "metrics": {"format": 0.0}}]},
        ],
        [  # "math": totals 0.0, 0.5 -> mixed
            {"steps": [{"reward": 0.0, "ac_len": 5, "ob_len": 50}]},
            {"steps": [{"reward": 0.25, "ac_len": 5, "ob_len": 50}], "final_reward": 0.25},
        ],
        [  # "code": totals 0.0, 0.0 -> all bad; a None metric is skipped
            {"steps": [{"reward": 0.0, "ac_len": 40, "ob_len": 200, "metrics": {"format": None}}]},
            {"steps": []},
        ],
    ]
    return groups, [["math"], ["math"], ["code"]]


EXPECTED_ALL = {
    "env/all/ac_tokens_per_turn": 110 / 6,
    "env/all/ob_tokens_per_turn": 620 / 6,
    "env/all/turns_per_episode": 6 / 6,
    "env/all/total_episodes": 6,
    "env/all/total_turns": 6,
    "env/all/total_ac_tokens": 110,
    "env/all/total_ob_tokens": 620,
    "env/all/reward/total": 2.5 / 6,
    "env/all/format": 2 / 3,
    "env/all/correct": 1.0,
    "env/all/len": 2.0,
    "env/all/by_group/frac_mixed": 1 / 3,
    "env/all/by_group/frac_all_good": 1 / 3,
    "env/all/by_group/frac_all_bad": 1 / 3,
}
EXPECTED_MATH = {
    "env/math/ac_tokens_per_turn": 70 / 5,
    "env/math/ob_tokens_per_turn": 420 / 5,
    "env/math/turns_per_episode": 5 / 4,
    "env/math/total_episodes": 4,
    "env/math/total_turns": 5,
    "env/math/total_ac_tokens": 70,
    "env/math/total_ob_tokens": 420,
    "env/math/reward/total": 2.5 / 4,
    "env/math/format": 2 / 3,
    "env/math/correct": 1.0,
    "env/math/len": 2.0,
    "env/math/by_group/frac_mixed": 0.5,
    "env/math/by_group/frac_all_good": 0.5,
    "env/math/by_group/frac_all_bad": 0.0,
}
EXPECTED_CODE = {
    "env/code/ac_tokens_per_turn": 40.0,
    "env/code/ob_tokens_per_turn": 200.0,
    "env/code/turns_per_episode": 0.5,
    "env/code/total_episodes": 2,
    "env/code/total_turns": 1,
    "env/code/total_ac_tokens": 40,
    "env/code/total_ob_tokens": 200,
    "env/code/reward/total": 0.0,
    "env/code/by_group/frac_mixed": 0.0,
    "env/code/by_group/frac_all_good": 0.0,
    "env/code/by_group/frac_all_bad": 1.0,
}


def test_hand_computed_values_and_key_order():
    groups, tags = batch()
    got = summarize_rollouts(build_rollout_summaries(4, groups, tags=tags))
    assert list(got) == list(EXPECTED_MATH) + list(EXPECTED_CODE) + list(EXPECTED_ALL)
    want = {**EXPECTED_MATH, **EXPECTED_CODE, **EXPECTED_ALL}
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=0), k
    assert type(got["env/all/total_episodes"]) is int


def test_raw_groups_give_the_same_metrics_and_prefix_applies():
    groups, tags = batch()
    records = build_rollout_summaries(0, groups, tags=tags)
    assert summarize_rollouts(groups, tags=tags) == summarize_rollouts(records)
    assert summarize_rollouts(records, prefix="test/")["test/env/all/reward/total"] == pytest.approx(2.5 / 6)


def test_tags_on_every_group_give_only_all_keys():
    groups, _ = batch()
    got = summarize_rollouts(groups, tags=["math"])
    assert all(k.startswith("env/all/") for k in got)


def test_empty_batch_and_nan_rewards():
    assert summarize_rollouts([]) == {
        "env/all/ac_tokens_per_turn": 0.0,
        "env/all/ob_tokens_per_turn": 0.0,
        "env/all/turns_per_episode": 0.0,
        "env/all/total_episodes": 0,
        "env/all/total_turns": 0,
        "env/all/total_ac_tokens": 0,
        "env/all/total_ob_tokens": 0,
        "env/all/reward/total": 0.0,
        "env/all/by_group/frac_mixed": 0.0,
        "env/all/by_group/frac_all_good": 0.0,
        "env/all/by_group/frac_all_bad": 0.0,
    }
    got = summarize_rollouts([[{"steps": [{"reward": math.nan}]}, {"steps": [{"reward": math.nan}]}]])
    assert math.isnan(got["env/all/reward/total"])
    assert got["env/all/by_group/frac_mixed"] == 1.0  # NaN != NaN: never "all good" or "all bad"


def test_groups_from_different_iterations_stay_apart():
    a = build_rollout_summaries(1, [[{"steps": [{"reward": 1.0}]}]])
    b = build_rollout_summaries(2, [[{"steps": [{"reward": 0.0}]}]])
    got = summarize_rollouts(a + b)
    assert got["env/all/by_group/frac_all_good"] == 0.5 and got["env/all/by_group/frac_all_bad"] == 0.5


def test_matches_tinker_cookbook_compute_trajectory_metrics():
    pytest.importorskip("torch")
    metric_util = pytest.importorskip("tinker_cookbook.rl.metric_util")
    import tinker
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

    def to_tinker(group: list) -> TrajectoryGroup:
        trajs = []
        for t in group:
            steps = [
                Transition(
                    tinker.ModelInput.from_ints([0] * s.get("ob_len", 0)),
                    TokensWithLogprobs([1] * s.get("ac_len", 0), None),
                    s["reward"],
                    True,
                    s.get("metrics", {}),
                )
                for s in t["steps"]
            ]
            trajs.append(Trajectory(steps, tinker.ModelInput.from_ints([])))
        return TrajectoryGroup(
            trajs,
            [t.get("final_reward", 0.0) for t in group],
            [t.get("trajectory_metrics", {}) for t in group],
        )

    groups, tags = batch()
    tinker_groups = [to_tinker(g) for g in groups]
    want = metric_util.compute_trajectory_metrics(tinker_groups, tags)
    want = {k: v for k, v in want.items() if not k.endswith("total_cached_ob_tokens")}
    got = summarize_rollouts(tinker_groups, tags=tags)  # tinker objects go in directly, too
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12), k
