"""The column paths of rollout building (plain dict groups, tinker-cookbook TrajectoryGroups,
ready records) are taken for those shapes, and give the same records, bytes and errors
as the general value-by-value path for any input."""

from __future__ import annotations

import copy
import dataclasses
import fractions
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rllog._write import rollout_input

try:  # tinker's own ModelInput when installed (imported here: its import must not run inside a strategy)
    import tinker
except ImportError:
    tinker = None
from rllog._write.rollouts import build_rollout_summaries, encode_rollouts

# ------------------------------------------------------------------------------ inputs

names = st.sampled_from(["a", "b", "loss", "x\ud800", "é"])  # a key with a lone surrogate is refused
text = st.text(st.characters(blacklist_categories=()), max_size=4)
odd = st.sampled_from(
    [np.float32(0.5), np.float64(1.5), np.int64(3), np.bool_(True), fractions.Fraction(1, 2), 2**70, [1, 2]]
)
values = st.one_of(
    st.floats(-1e3, 1e3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    text,
)
value_dicts = st.dictionaries(names, values, max_size=3)
# what one spoiled field of a step, trajectory or record may hold instead
spoilers = st.one_of(
    odd,
    values,
    st.sampled_from([-1, True, 3.0, 2.5, None, ("t",), ["t"], [1], 7, "train", {"m": [1]}, [], "x"]),
)


@st.composite
def step_dicts(draw: Any) -> dict[str, Any]:
    step = {
        "ob_len": draw(st.integers(0, 100)),
        "ac_len": draw(st.integers(0, 100)),
        "reward": draw(st.one_of(st.floats(-10, 10), st.floats(allow_nan=True, allow_infinity=True))),
        "episode_done": draw(st.booleans()),
        "metrics": draw(value_dicts),
        "logs": draw(value_dicts),
    }
    kind = draw(st.integers(0, 9))
    if kind == 0:
        step[draw(st.sampled_from(sorted(step)))] = draw(spoilers)
    elif kind == 1:
        del step[draw(st.sampled_from(sorted(step)))]
    elif kind == 2:
        step["rewrd"] = 1.0
    return step


@st.composite
def trajectory_dicts(draw: Any) -> dict[str, Any]:
    traj: dict[str, Any] = {"steps": draw(st.lists(step_dicts(), max_size=3))}
    if draw(st.booleans()):
        traj["final_reward"] = draw(st.one_of(st.floats(-1, 1), st.integers(0, 2)))
    if draw(st.booleans()):
        traj[draw(st.sampled_from(["trajectory_metrics", "metrics"]))] = draw(
            st.one_of(value_dicts, st.none())
        )
    if draw(st.booleans()):
        traj["final_ob_len"] = draw(st.one_of(st.integers(0, 9), st.none()))
    if draw(st.integers(0, 9)) == 0:
        key = draw(st.sampled_from(["steps", "final_reward", "tags", "total_reward", "iteration", "stepz"]))
        traj[key] = draw(spoilers)
    return traj


dict_groups = st.lists(
    st.one_of(st.lists(trajectory_dicts(), max_size=3), st.lists(trajectory_dicts(), max_size=3).map(tuple)),
    max_size=3,
)


@dataclasses.dataclass
class Ob:  # an observation that counts its own tokens
    length: Any


@dataclasses.dataclass
class Ac:
    tokens: Any


@dataclasses.dataclass
class Transition:  # tinker-cookbook's fields
    ob: Any
    ac: Any
    reward: Any
    episode_done: Any
    metrics: Any
    logs: Any


@dataclasses.dataclass
class Trajectory:
    transitions: Any
    final_ob: Any


@dataclasses.dataclass
class TrajectoryGroup:
    trajectories_G: Any
    final_rewards_G: Any
    metrics_G: Any


@dataclasses.dataclass
class RolloutSummaryGroup:
    trajectory_group: Any
    tags: Any
    sampling_client_step: Any


def observation(n: int, chunks: int) -> Any:
    """tinker's own ModelInput (one or two text chunks) when installed, else an :class:`Ob`."""
    if tinker is None:
        return Ob(n * chunks)
    return tinker.ModelInput(chunks=[tinker.EncodedTextChunk(tokens=[1] * n)] * chunks)


@st.composite
def transitions(draw: Any) -> Transition:
    t = Transition(
        observation(draw(st.integers(0, 30)), draw(st.sampled_from([1, 1, 1, 2]))),
        Ac([1] * draw(st.integers(0, 5))),
        draw(st.floats(-1, 1)),
        draw(st.booleans()),
        draw(value_dicts),
        draw(value_dicts),
    )
    if draw(st.integers(0, 8)) == 0:
        field = draw(st.sampled_from(["reward", "episode_done", "metrics", "logs", "ob", "ac"]))
        setattr(t, field, draw(st.one_of(spoilers, st.builds(Ob, spoilers))))
    return t


@st.composite
def tinker_groups(draw: Any) -> Any:
    final_obs = st.builds(observation, st.integers(0, 9), st.just(1))
    trajs = draw(
        st.lists(
            st.builds(
                Trajectory, st.lists(transitions(), max_size=3), st.one_of(final_obs, final_obs, st.none())
            ),
            max_size=3,
        )
    )
    n = max(0, len(trajs) + draw(st.sampled_from([0, 0, 0, 0, 1, -1])))
    group = TrajectoryGroup(
        trajs,
        [draw(st.one_of(st.floats(-1, 1), spoilers)) for _ in range(n)],
        [draw(st.one_of(value_dicts, value_dicts, st.none())) for _ in range(n)],
    )
    if draw(st.integers(0, 4)) == 0:
        return RolloutSummaryGroup(
            group, draw(st.sampled_from([["w"], [], "bad"])), draw(st.sampled_from([5, None, -1]))
        )
    return group


def spoil(record: Any, field: str, value: Any) -> None:
    if field.startswith("step."):
        if record.steps:
            setattr(record.steps[0], field[5:], value)
    else:
        setattr(record, field, value)


record_fields = st.sampled_from(
    ["split", "iteration", "group_idx", "traj_idx", "tags", "sampling_client_step", "total_reward"]
    + ["final_reward", "trajectory_metrics", "final_ob_len", "steps", "schema_version"]
    + [f"step.{f}" for f in ("step_idx", "ob_len", "ac_len", "reward", "episode_done", "metrics", "logs")]
)

# ------------------------------------------------------------------------------ tests


def outcome(groups: Any, strict_json: bool) -> tuple[Any, ...]:
    """What encode_rollouts gives: the file name, bytes and records, or the error."""
    try:
        name, records, data = encode_rollouts(7, groups, strict_json=strict_json)
    except Exception as e:  # the error itself is what is compared
        return ("error", type(e), str(e))
    return (name, data, repr(records))


def both_paths(groups: Any, strict_json: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The column paths give what the general path gives, and leave the caller's objects as they were."""
    before = repr(groups)
    general_input = copy.deepcopy(groups)
    got = outcome(groups, strict_json)
    assert repr(groups) == before
    with monkeypatch.context() as m:
        m.setattr(rollout_input, "_plain", lambda *a: None)
        m.setattr(rollout_input, "_as_written", lambda *a: None)
        want = outcome(general_input, strict_json)
    assert got == want


SETTINGS = settings(
    max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(dict_groups, st.booleans())
def test_dict_groups_column_path_equals_general_path(monkeypatch, groups, strict_json):
    both_paths(groups, strict_json, monkeypatch)


@SETTINGS
@given(st.lists(tinker_groups(), max_size=3), st.booleans())
def test_tinker_groups_column_path_equals_general_path(monkeypatch, groups, strict_json):
    both_paths(groups, strict_json, monkeypatch)


@SETTINGS
@given(
    st.lists(st.lists(trajectory_dicts(), min_size=1, max_size=3), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 20), record_fields, spoilers), max_size=1),
    st.booleans(),
)
def test_ready_records_column_check_equals_rebuilding(monkeypatch, groups, spoils, strict_json):
    try:
        ready = build_rollout_summaries(7, groups)
    except (TypeError, ValueError):
        return
    for i, field, value in spoils:
        spoil(ready[i % len(ready)], field, value)
    both_paths(ready, strict_json, monkeypatch)


def readme_groups() -> list[list[dict[str, Any]]]:
    step = {
        "ob_len": 412,
        "ac_len": 96,
        "reward": 1.0,
        "episode_done": True,
        "metrics": {"correct": 1.0},
        "logs": {"answer": "42"},
    }
    return [[{"steps": [step, dict(step)], "final_reward": 0.5, "trajectory_metrics": {}}] * 2] * 3


def test_plain_shapes_are_built_a_column_at_a_time(monkeypatch):
    """Plain dict groups and TrajectoryGroups never go value by value (the cost of
    benchmarks/bench_rollouts.py), and give what the general path gives."""
    groups = readme_groups()
    tinker = [
        TrajectoryGroup(
            [Trajectory([Transition(Ob(5), Ac([1, 2]), 0.5, True, {"m": 1}, {"l": "x"})], Ob(9))] * 2,
            [1.0, 0.0],
            [{"c": 1.0}, {}],
        )
    ]
    want = [encode_rollouts(3, g) for g in (groups, tinker)]

    def value_by_value(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("built value by value")

    monkeypatch.setattr(rollout_input._Builder, "trajectory", value_by_value)
    monkeypatch.setattr(rollout_input._Builder, "step", value_by_value)
    got = [encode_rollouts(3, g) for g in (groups, tinker)]
    assert [(n, d, repr(r)) for n, r, d in got] == [(n, d, repr(r)) for n, r, d in want]
    assert (
        got[0][1][0].steps[0].metrics is groups[0][0]["steps"][0]["metrics"]
    )  # the caller's dict, not a copy


@pytest.mark.skipif(tinker is None, reason="tinker is not installed")
def test_tinker_observation_lengths_match_model_input_length():
    one = [tinker.ModelInput.from_ints([1] * n) for n in (0, 3, 7)]
    two = [
        *one,
        tinker.ModelInput(
            chunks=[tinker.EncodedTextChunk(tokens=[1, 2]), tinker.EncodedTextChunk(tokens=[3])]
        ),
    ]
    assert rollout_input._ob_lengths(one) == [0, 3, 7]
    assert rollout_input._ob_lengths(two) == [0, 3, 7, 3]


# ------------------------------------------------- one bad value deep in a full-size batch


def big_dict_groups(steps: Any = 3) -> list[list[dict[str, Any]]]:
    """128 groups of 8 trajectories (the benchmark's size), ``steps`` steps each (an int,
    or a function of the trajectory's number for uneven lengths)."""
    count = steps if callable(steps) else lambda n: steps
    return [
        [
            {
                "steps": [
                    {
                        "ob_len": n % 50,
                        "ac_len": s,
                        "reward": n / 7 + s,
                        "episode_done": s == count(n) - 1,
                        "metrics": {"format": 0.5, "len": n},
                        "logs": {"answer": str(n)},
                    }
                    for s in range(count(n))
                ],
                "final_reward": n / 3,
                "trajectory_metrics": {"group_correct": 1.0},
                "final_ob_len": n,
            }
            for n in range(g * 8, g * 8 + 8)
        ]
        for g in range(128)
    ]


def big_tinker_groups(groups: list[list[dict[str, Any]]]) -> list[TrajectoryGroup]:
    return [
        TrajectoryGroup(
            [
                Trajectory(
                    [
                        Transition(
                            observation(s["ob_len"], 1),
                            Ac([1] * s["ac_len"]),
                            s["reward"],
                            s["episode_done"],
                            s["metrics"],
                            s["logs"],
                        )
                        for s in t["steps"]
                    ],
                    observation(t["final_ob_len"], 1),
                )
                for t in group
            ],
            [t["final_reward"] for t in group],
            [t["trajectory_metrics"] for t in group],
        )
        for group in groups
    ]


def spoil_step_1000(groups: Any, where: str, value: Any) -> None:
    """Set ``where`` (metrics/logs key or step field) of step 1 of trajectory 1000 (group 125, traj 0)."""
    target = groups[125][0] if isinstance(groups[0], list) else groups[1000]
    step = target["steps"][1] if isinstance(target, dict) else None
    if isinstance(target, dict):
        if where in ("reward", "ob_len"):
            step[where] = value
        else:
            step["metrics" if where == "metric" else "logs"]["bad"] = value
    else:  # a ready record
        st = target.steps[1]
        if where in ("reward", "ob_len"):
            setattr(st, where, value)
        else:
            (st.metrics if where == "metric" else st.logs)["bad"] = value


BAD_VALUES = [
    ("metric", float("nan")),  # written as the token NaN (null with strict_json), not msgspec's null
    ("metric", float("-inf")),
    ("metric", [1.0, float("nan")]),  # a list-valued metric: TypeError naming the key
    ("metric", np.float64(0.25)),  # numpy scalars converted
    ("metric", np.float32(float("nan"))),
    ("log", {"nested": [float("nan")]}),  # a nested log value with a NaN inside
    ("log", "lone \ud800 surrogate"),  # written as U+FFFD
    ("reward", float("inf")),
    ("reward", 1),  # an int reward is written 1.0
    ("ob_len", -1),  # a negative token count: TypeError
]


@pytest.mark.parametrize("where,value", BAD_VALUES)
@pytest.mark.parametrize("shape", ["dicts", "uneven dicts", "ready records", "tinker"])
def test_one_bad_value_in_trajectory_1000_of_1024(monkeypatch, shape, where, value):
    """A value the fast paths must not let through, in step 1 of trajectory 1000 of a
    benchmark-size batch: the same bytes, records or error as the general path."""
    groups: Any = big_dict_groups(lambda n: 2 + n % 3 if shape == "uneven dicts" else 3)
    if shape == "ready records":
        groups = build_rollout_summaries(7, groups)
    spoil_step_1000(groups, where, value)
    if shape == "tinker":
        groups = big_tinker_groups(groups)
    for strict_json in (False, True):
        both_paths(groups, strict_json, monkeypatch)


def test_a_bad_value_deep_in_a_batch_changes_what_is_written():
    """The bytes and errors the comparison above relies on are the documented ones."""
    groups = big_dict_groups()
    spoil_step_1000(groups, "metric", float("nan"))
    lines = encode_rollouts(7, groups)[2].splitlines()
    assert b'"bad":NaN' in lines[1000] and b"NaN" not in lines[999]
    assert b'"bad":null' in encode_rollouts(7, groups, strict_json=True)[2].splitlines()[1000]
    ready = build_rollout_summaries(7, big_dict_groups())
    spoil_step_1000(ready, "metric", [1.0])
    with pytest.raises(TypeError, match=r"record 1000: step 1.*metrics\['bad'\]"):
        encode_rollouts(7, ready)
    tinker_groups = big_tinker_groups(big_dict_groups())
    tinker_groups[125].trajectories_G[0].transitions[1].metrics["bad"] = np.float64(0.25)
    lines = encode_rollouts(7, tinker_groups)[2].splitlines()
    assert b'"bad":0.25' in lines[1000]
    assert lines[0] == encode_rollouts(7, big_dict_groups())[2].splitlines()[0]
