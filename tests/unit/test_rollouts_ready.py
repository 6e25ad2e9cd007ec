"""Ready rollout records (TrajectorySummary) are written as they are when building
would reproduce them exactly, and rebuilt (never mutated) otherwise; the bytes are the
same either way."""

from __future__ import annotations

import copy
import fractions

import msgspec
import numpy as np
import pytest

from rllog import TrajectorySummary, build_rollout_summaries
from rllog._write.rollouts import encode_rollouts


def groups():
    return [
        [
            {
                "steps": [
                    {
                        "reward": 0.5 * t,
                        "ob_len": 10 + s,
                        "ac_len": 5,
                        "metrics": {"m": 1.0},
                        "logs": {"a": "x"},
                    }
                    for s in range(3)
                ],
                "final_reward": 1.0,
                "trajectory_metrics": {"c": 0.25},
            }
            for t in range(4)
        ]
        for _ in range(3)
    ]


def test_exact_ready_records_are_written_as_they_are():
    ready = build_rollout_summaries(7, groups())
    _, from_dicts, data = encode_rollouts(7, groups())
    _, records, again = encode_rollouts(7, ready)
    assert again == data
    assert all(a is b for a, b in zip(records, ready, strict=True))  # no copy, no rebuild


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: setattr(r[0].steps[1], "reward", 1),  # an int reward: written as 1.0
        lambda r: setattr(r[0].steps[1], "step_idx", 5),  # step_idx is the position
        lambda r: setattr(r[0].steps[0], "metrics", {"m": np.float32(1.0)}),  # converted
        lambda r: setattr(r[1], "total_reward", np.float64(0.5)),
        lambda r: setattr(r[2], "tags", ("t",)),
    ],
    ids=["int reward", "step_idx", "numpy metric", "numpy total", "tuple tags"],
)
def test_records_that_need_building_are_rebuilt_without_touching_the_callers(spoil):
    ready = build_rollout_summaries(7, groups())
    spoil(ready)
    before = copy.deepcopy(ready)
    _, records, data = encode_rollouts(7, ready)
    assert records[0] is not ready[0]
    assert repr(ready) == repr(before)  # the caller's records are untouched
    expected = msgspec.json.Encoder().encode_lines(records)
    assert data == expected
    assert all(type(s.reward) is float for r in records for s in r.steps)
    assert [s.step_idx for s in records[0].steps] == [0, 1, 2]


def test_a_value_only_the_encoder_refuses_is_converted_in_a_rebuilt_copy():
    ready = build_rollout_summaries(7, groups())
    ready[1].steps[0].metrics = {"m": fractions.Fraction(1, 4)}
    _, records, data = encode_rollouts(7, ready)
    assert records[1].steps[0].metrics == {"m": 0.25}
    assert data.splitlines()[1].count(b'"metrics":{"m":0.25}') == 1
    assert ready[1].steps[0].metrics == {"m": fractions.Fraction(1, 4)}


def test_a_record_of_another_iteration_still_raises():
    ready = build_rollout_summaries(7, groups())
    with pytest.raises(ValueError, match="iteration=7 but this call writes iteration=8"):
        encode_rollouts(8, ready)
    assert isinstance(ready[0], TrajectorySummary)
