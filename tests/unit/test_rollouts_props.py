"""Property tests for the rollout summary encoder: any record survives the file, in both JSON modes."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_rollouts import STEP_KEYS, TRAJ_KEYS, assert_same_records

from rllog._format.codec import clean_text
from rllog._read.rollouts import decode_rollout_summaries
from rllog._write.rollouts import build_rollout_summaries, encode_rollouts

# every code point, lone surrogates included (written as U+FFFD in values)
text = st.text(st.characters(blacklist_categories=()), max_size=12)
# names (metric and log keys): lone surrogates are refused at the call (test_fail_fast)
names = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(
    floats, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none(), text
)  # ints past int64 are rejected
values = st.dictionaries(names, scalars, max_size=4)
steps = st.lists(
    st.fixed_dictionaries(
        {"reward": floats},
        optional={
            "ob_len": st.integers(0, 10**6),
            "ac_len": st.integers(0, 10**6),
            "episode_done": st.booleans(),
            "metrics": values,
            "logs": st.dictionaries(names, st.one_of(scalars, st.lists(scalars, max_size=3)), max_size=3),
        },
    ),
    max_size=4,
)
trajectories = st.fixed_dictionaries(
    {"steps": steps},
    optional={
        "final_reward": floats,
        "trajectory_metrics": values,
        "final_ob_len": st.integers(0, 10**6),
        "tags": st.lists(text, max_size=3),
        "sampling_client_step": st.integers(0, 10**6),
    },
)
groups = st.lists(st.lists(trajectories, min_size=1, max_size=3), max_size=3)


def encode(groups: Any, strict: bool) -> tuple[list, bytes]:
    _, records, data = encode_rollouts(7, groups, strict_json=strict)
    return records, data


@settings(max_examples=150, deadline=None)
@given(groups)
def test_every_line_is_json_with_exact_keys_and_reads_back_equal(gs):
    records, data = encode(gs, strict=False)
    data.decode("utf-8")  # valid UTF-8 (lone surrogates are U+FFFD)
    lines = data.splitlines()
    assert len(lines) == len(records)
    for line, rec in zip(lines, records, strict=False):
        obj = json.loads(line)
        assert list(obj) == TRAJ_KEYS
        assert all(list(s) == STEP_KEYS for s in obj["steps"])
        assert (obj["group_idx"], obj["traj_idx"]) == (rec.group_idx, rec.traj_idx)
    assert_same_records(decode_rollout_summaries(data), records)


@settings(max_examples=100, deadline=None)
@given(groups)
def test_strict_json_has_no_tokens_and_keeps_finite_values(gs):
    records, data = encode(gs, strict=True)
    back = decode_rollout_summaries(data)
    for line, rec, got in zip(data.splitlines(), records, back, strict=False):
        json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
        for want_s, got_s in zip(rec.steps, got.steps, strict=False):
            if math.isfinite(want_s.reward):
                assert got_s.reward == want_s.reward
            else:
                assert math.isnan(got_s.reward)  # written as null, read back as NaN
            for k, v in want_s.metrics.items():
                expect = None if isinstance(v, float) and not math.isfinite(v) else v
                if isinstance(expect, str):
                    expect = clean_text(
                        expect
                    )  # the one surrogate rule: a lone surrogate is written as U+FFFD
                assert got_s.metrics[k] == expect or (expect is None and got_s.metrics[k] is None)


@settings(max_examples=50, deadline=None)
@given(groups)
def test_public_builder_matches_the_encoded_records(gs):
    records = build_rollout_summaries(7, gs)
    _, data = encode(gs, strict=False)
    assert_same_records(decode_rollout_summaries(data), records)
