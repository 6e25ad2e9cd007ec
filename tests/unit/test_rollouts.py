"""Rollout summaries: file format, round trips, input shapes, reader, RunLogger, demo."""

from __future__ import annotations

import json
import math
import os
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from rllog import (
    RunLogger,
    StepSummary,
    TrajectorySummary,
    build_rollout_summaries,
    read_rollouts,
    rollouts_dataframe,
)
from rllog._format.codec import clean_text
from rllog._read.rollouts import decode_rollout_summaries
from rllog._write.rollouts import write_rollouts
from rllog.errors import RunFormatError
from rllog.storage import LocalStorage, open_storage

TRAJ_KEYS = [
    "schema_version",
    "split",
    "iteration",
    "group_idx",
    "traj_idx",
    "tags",
    "sampling_client_step",
    "total_reward",
    "final_reward",
    "trajectory_metrics",
    "final_ob_len",
    "steps",
]
STEP_KEYS = ["step_idx", "ob_len", "ac_len", "reward", "episode_done", "metrics", "logs"]
NAN, INF = float("nan"), float("inf")


def same(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN and 0.0 differs from -0.0, recursing into records."""
    if isinstance(a, (TrajectorySummary, StepSummary)):
        return type(a) is type(b) and all(same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
        )
    if isinstance(a, str) and isinstance(b, str):  # lone surrogates are written as U+FFFD
        return clean_text(a) == clean_text(b)
    return type(a) is type(b) and a == b


def assert_same_records(got: list[TrajectorySummary], want: list[TrajectorySummary]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=False):
        for f in TrajectorySummary.__struct_fields__:
            if f == "steps":
                assert len(g.steps) == len(w.steps)
                for gs, ws in zip(g.steps, w.steps, strict=False):
                    for sf in StepSummary.__struct_fields__:
                        assert same(getattr(gs, sf), getattr(ws, sf)), (
                            f,
                            sf,
                            getattr(gs, sf),
                            getattr(ws, sf),
                        )
            else:
                assert same(getattr(g, f), getattr(w, f)), (f, getattr(g, f), getattr(w, f))


def step(reward: float, **kw: Any) -> dict[str, Any]:
    return {"reward": reward, **kw}


def sample_groups() -> list[list[dict[str, Any]]]:
    """Two groups: multi-step episodes, NaN/inf rewards, unicode and lone surrogates, an empty episode."""
    return [
        [
            {
                "steps": [
                    step(
                        0.0,
                        ob_len=41,
                        ac_len=16,
                        episode_done=False,
                        metrics={"format": 1.0, "n": 3},
                        logs={"answer": "42", "note": "héllo ✅ 🌟"},
                    ),
                    step(0.5, ob_len=60, ac_len=5, metrics={"format": 0.0}, logs={"bad": "x\ud800y", "n": 7}),
                ],
                "final_reward": 1.0,
                "trajectory_metrics": {"correct": 1.0, "nan_metric": NAN},
                "final_ob_len": 70,
            },
            {"steps": [step(NAN, ob_len=41, ac_len=2)], "final_reward": 0.0},
        ],
        [
            {"steps": [], "final_reward": -INF, "metrics": {"correct": 0.0}},
            {"steps": [step(1.0, ob_len=9, ac_len=1, logs={"s": '<script>"quoted"\n'})]},
        ],
    ]


@pytest.fixture
def storage(tmp_path):
    st = LocalStorage(tmp_path)
    yield st
    st.close()


def read_lines(storage, name: str) -> list[dict[str, Any]]:
    data = storage.read(name)
    assert data.endswith(b"\n")
    return [json.loads(line) for line in data.decode().splitlines()]


def test_file_has_exact_keys_and_values(storage):
    records = write_rollouts(storage, 10, sample_groups(), tags=["arith"], sampling_client_step=9)
    assert storage.list() == ["train_iteration_000010_rollout_summaries.jsonl"]
    rows = read_lines(storage, "train_iteration_000010_rollout_summaries.jsonl")
    assert len(rows) == len(records) == 4
    for row in rows:
        assert list(row) == TRAJ_KEYS
        for s in row["steps"]:
            assert list(s) == STEP_KEYS
    first = rows[0]
    assert first["schema_version"] == 1 and first["split"] == "train" and first["iteration"] == 10
    assert (first["group_idx"], first["traj_idx"]) == (0, 0)
    assert first["tags"] == ["arith"] and first["sampling_client_step"] == 9
    assert first["total_reward"] == 1.5 and first["final_reward"] == 1.0 and first["final_ob_len"] == 70
    assert first["trajectory_metrics"]["correct"] == 1.0 and math.isnan(
        first["trajectory_metrics"]["nan_metric"]
    )
    assert first["steps"][0] == {
        "step_idx": 0,
        "ob_len": 41,
        "ac_len": 16,
        "reward": 0.0,
        "episode_done": False,
        "metrics": {"format": 1.0, "n": 3},
        "logs": {"answer": "42", "note": "héllo ✅ 🌟"},
    }
    assert first["steps"][1]["episode_done"] is True  # last step defaults to done
    assert first["steps"][1]["logs"] == {"bad": "x\ufffdy", "n": 7}  # lone surrogate: U+FFFD
    assert math.isnan(rows[1]["total_reward"]) and math.isnan(rows[1]["steps"][0]["reward"])
    assert (rows[2]["group_idx"], rows[2]["traj_idx"], rows[3]["traj_idx"]) == (1, 0, 1)
    assert rows[2]["steps"] == [] and rows[2]["total_reward"] == -INF and rows[2]["final_ob_len"] is None
    assert rows[3]["steps"][0]["logs"]["s"] == '<script>"quoted"\n'


def test_nan_tokens_by_default_null_with_strict_json(storage):
    write_rollouts(storage, 1, sample_groups())
    data = storage.read("train_iteration_000001_rollout_summaries.jsonl")
    assert b'"total_reward":NaN' in data and b'"total_reward":-Infinity' in data
    write_rollouts(storage, 2, sample_groups(), strict_json=True)
    strict = storage.read("train_iteration_000002_rollout_summaries.jsonl")
    for line in strict.splitlines():  # strict JSON: no NaN/Infinity tokens at all
        json.loads(line, parse_constant=lambda c: pytest.fail(f"token {c} in strict JSON"))
    assert b'"total_reward":null' in strict
    back = list(read_rollouts(storage, 2))
    assert math.isnan(back[1].total_reward) and math.isnan(back[1].steps[0].reward)
    assert back[2].total_reward is not None and math.isnan(back[2].total_reward)  # -inf -> null -> NaN
    assert back[0].trajectory_metrics["nan_metric"] is None


def test_round_trip_field_by_field(storage):
    records = write_rollouts(
        storage, 3, sample_groups(), tags=[["a"], ["b", "c"]], sampling_client_step=[1, None]
    )
    back = list(read_rollouts(storage))
    assert_same_records(back, records)
    assert [r.tags for r in back] == [["a"], ["a"], ["b", "c"], ["b", "c"]]
    assert [r.sampling_client_step for r in back] == [1, 1, None, None]
    assert back[0].steps[1].logs["bad"] == "x\ufffdy"  # the codec's one rule
    assert back[2].steps == []


def test_round_trip_without_special_values_uses_fast_path(storage):
    groups = [
        [{"steps": [step(float(i), ob_len=i, ac_len=2 * i, metrics={"m": i / 3}, logs={"t": "ü"})]}]
        for i in range(5)
    ]
    records = write_rollouts(storage, 0, groups)
    data = storage.read("train_iteration_000000_rollout_summaries.jsonl")
    assert "ü".encode() in data  # UTF-8, not \u escapes
    assert_same_records(decode_rollout_summaries(data), records)


def test_unknown_fields_from_newer_schema_are_ignored(storage):
    line = {
        "schema_version": 2,
        "split": "train",
        "iteration": 4,
        "group_idx": 0,
        "traj_idx": 0,
        "tags": [],
        "sampling_client_step": None,
        "total_reward": 1.0,
        "final_reward": 1.0,
        "trajectory_metrics": {},
        "final_ob_len": 5,
        "new_top_level": {"x": [1, 2]},
        "steps": [
            {
                "step_idx": 0,
                "ob_len": 1,
                "ac_len": 2,
                "reward": 0.0,
                "episode_done": True,
                "metrics": {},
                "logs": {},
                "new_step_field": "y",
            }
        ],
    }
    nan_line = dict(line, traj_idx=1, total_reward=NAN)
    storage.write(
        "train_iteration_000004_rollout_summaries.jsonl",
        (json.dumps(line) + "\n" + json.dumps(nan_line) + "\n").encode(),
    )
    recs = list(read_rollouts(storage, 4))
    assert [r.schema_version for r in recs] == [2, 2]
    assert recs[0].final_ob_len == 5 and recs[0].steps[0].ac_len == 2
    assert not hasattr(recs[0], "new_top_level")
    assert math.isnan(recs[1].total_reward)


def test_rewrite_replaces_the_file(storage):
    write_rollouts(storage, 5, sample_groups())
    write_rollouts(storage, 5, [[{"steps": [step(2.0)]}]])
    recs = list(read_rollouts(storage, 5))
    assert len(recs) == 1 and recs[0].total_reward == 2.0
    assert storage.list() == ["train_iteration_000005_rollout_summaries.jsonl"]


def test_empty_iteration_writes_an_empty_file(storage):
    assert write_rollouts(storage, 6, []) == []
    assert storage.read("train_iteration_000006_rollout_summaries.jsonl") == b""
    assert list(read_rollouts(storage, 6)) == []


def test_eval_file_name_split_and_filters(storage):
    write_rollouts(storage, 2, [[{"steps": [step(1.0)]}]])
    write_rollouts(storage, 1, [[{"steps": [step(0.0)]}]])
    write_rollouts(storage, 2, [[{"steps": [step(0.5)]}]], eval_name="gsm8k")
    write_rollouts(storage, 2, [[{"steps": [step(0.25)]}]], eval_name="Odd Name/..")
    names = storage.list()
    assert "eval_gsm8k_iteration_000002_rollout_summaries.jsonl" in names
    odd = [n for n in names if n.startswith("eval_odd_name")]
    assert len(odd) == 1 and "/" not in odd[0]
    everything = [(r.split, r.iteration, r.total_reward) for r in read_rollouts(storage)]
    assert everything == [
        ("train", 1, 0.0),
        ("train", 2, 1.0),
        ("eval/gsm8k", 2, 0.5),
        ("eval/Odd Name/..", 2, 0.25),
    ]
    assert [r.total_reward for r in read_rollouts(storage, split="train")] == [0.0, 1.0]
    assert [r.total_reward for r in read_rollouts(storage, split="eval")] == [0.5, 0.25]
    assert [r.total_reward for r in read_rollouts(storage, 2, eval_name="Odd Name/..")] == [0.25]
    assert [r.total_reward for r in read_rollouts(storage, 1)] == [0.0]
    with pytest.raises(ValueError, match="split"):
        list(read_rollouts(storage, split="test"))


def test_reads_tinker_cookbook_nested_layout(storage):
    """Newer tinker-cookbook runs keep iteration_NNNNNN/train_rollout_summaries.jsonl."""
    write_rollouts(storage, 3, [[{"steps": [step(1.0)]}]])
    data = storage.read("train_iteration_000003_rollout_summaries.jsonl")
    storage.remove("train_iteration_000003_rollout_summaries.jsonl")
    storage.write("iteration_000003/train_rollout_summaries.jsonl", data)
    storage.write(
        "iteration_000003/eval_test_rollout_summaries.jsonl", data.replace(b'"train"', b'"eval/test"')
    )
    assert [(r.split, r.iteration) for r in read_rollouts(storage)] == [("train", 3), ("eval/test", 3)]
    assert [r.split for r in read_rollouts(storage, 3, eval_name="test")] == ["eval/test"]


def test_read_from_path_url_and_single_file(tmp_path):
    st = open_storage(tmp_path)
    write_rollouts(st, 7, sample_groups())
    st.close()
    assert len(list(read_rollouts(tmp_path))) == 4
    assert len(list(read_rollouts(str(tmp_path / "train_iteration_000007_rollout_summaries.jsonl")))) == 4
    with pytest.raises(FileNotFoundError):
        list(read_rollouts(tmp_path / "missing"))
    url = f"memory://rollouts-{uuid.uuid4().hex}/run"
    mem = open_storage(url)
    records = write_rollouts(mem, 7, sample_groups(), eval_name="test")
    mem.close()
    assert_same_records(list(read_rollouts(url, eval_name="test")), records)


def test_torn_last_line_dropped_bad_line_raises(storage):
    write_rollouts(storage, 8, [[{"steps": [step(1.0)]}], [{"steps": [step(2.0)]}]])
    name = "train_iteration_000008_rollout_summaries.jsonl"
    data = storage.read(name)
    storage.write(name, data + data[:30])
    with pytest.warns(RuntimeWarning, match="torn last line"):
        recs = list(read_rollouts(storage, 8))
    assert [r.total_reward for r in recs] == [1.0, 2.0]
    storage.write(name, b'{"split": "train"}\n' + data)
    with pytest.raises(RunFormatError, match="line 1"):
        list(read_rollouts(storage, 8))


# ---------------------------------------------------------------------------- input shapes


@dataclass
class FakeModelInput:
    tokens: list[int]

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass
class FakeTokens:
    tokens: list[int]


@dataclass
class FakeTransition:
    ob: FakeModelInput
    ac: FakeTokens
    reward: float
    episode_done: bool
    metrics: dict = field(default_factory=dict)
    logs: dict = field(default_factory=dict)


@dataclass
class FakeTrajectory:
    transitions: list[FakeTransition]
    final_ob: FakeModelInput


@dataclass
class FakeGroup:
    trajectories_G: list[FakeTrajectory]
    final_rewards_G: list[float]
    metrics_G: list[dict]


def fake_groups() -> list[FakeGroup]:
    def traj(n_steps: int, r: float) -> FakeTrajectory:
        return FakeTrajectory(
            [
                FakeTransition(
                    FakeModelInput(list(range(10 + i))),
                    FakeTokens([1] * (3 + i)),
                    r,
                    i == n_steps - 1,
                    {"m": float(i)},
                    {"text": f"turn {i} ✅"},
                )
                for i in range(n_steps)
            ],
            FakeModelInput(list(range(20))),
        )

    return [
        FakeGroup([traj(2, 0.25), traj(1, 0.0)], [1.0, 0.0], [{"g": 1.0}, {"g": 0.0}]),
        FakeGroup([traj(3, 0.5)], [0.5], [{}]),
    ]


def test_tinker_like_objects(storage):
    records = write_rollouts(storage, 1, fake_groups(), tags=[["x"], ["y"]], sampling_client_step=[3, 4])
    r0, r1, r2 = records
    assert (r0.group_idx, r0.traj_idx, r1.traj_idx, r2.group_idx) == (0, 0, 1, 1)
    assert (
        r0.total_reward == 0.25 * 2 + 1.0 and r0.final_reward == 1.0 and r0.trajectory_metrics == {"g": 1.0}
    )
    assert [(s.ob_len, s.ac_len, s.episode_done) for s in r0.steps] == [(10, 3, False), (11, 4, True)]
    assert r0.final_ob_len == 20 and r0.steps[1].logs == {"text": "turn 1 ✅"}
    assert r2.total_reward == 0.5 * 3 + 0.5 and r2.tags == ["y"] and r2.sampling_client_step == 4
    assert_same_records(list(read_rollouts(storage, 1)), records)


def test_matches_tinker_cookbook_serialize_rollout_summaries(storage):
    """Same input through tinker-cookbook's own serializer gives the same JSON objects."""
    pytest.importorskip("torch")
    rollout_logging = pytest.importorskip("tinker_cookbook.rl.rollout_logging")
    import tinker
    from tinker_cookbook.completers import TokensWithLogprobs
    from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

    def traj(n: int, r: float) -> Trajectory:
        return Trajectory(
            [
                Transition(
                    tinker.ModelInput.from_ints(list(range(5 + i))),
                    TokensWithLogprobs([7] * (2 + i), None),
                    r,
                    i == n - 1,
                    {"m": i / 3, "k": i},
                    {"log": f"t{i} é"},
                )
                for i in range(n)
            ],
            tinker.ModelInput.from_ints(list(range(12))),
        )

    groups = [
        TrajectoryGroup([traj(3, 0.1), traj(1, NAN)], [1.0, 0.0], [{"c": 1.0}, {"c": 0.0}]),
        TrajectoryGroup([traj(2, 0.0)], [0.5], [{}]),
    ]
    want = rollout_logging.serialize_rollout_summaries(
        split="train",
        iteration=3,
        trajectory_groups_P=groups,
        taglist_P=[["a"], ["b"]],
        sampling_client_steps_P=[2, 2],
    )
    write_rollouts(storage, 3, groups, tags=[["a"], ["b"]], sampling_client_step=2)
    got = read_lines(storage, "train_iteration_000003_rollout_summaries.jsonl")
    assert len(got) == len(want) == 3
    for g, w in zip(got, want, strict=False):
        assert set(g) == set(w)
        assert json.dumps(g, sort_keys=True) == json.dumps(w, sort_keys=True)
    # ready-made records from tinker-cookbook are accepted as they are
    records = build_rollout_summaries(3, want)
    assert [(r.group_idx, r.traj_idx) for r in records] == [(0, 0), (0, 1), (1, 0)]
    assert json.loads(json.dumps(want[0]))["steps"][0]["metrics"] == records[0].steps[0].metrics


def test_numpy_and_torch_values_are_converted(storage):
    torch = pytest.importorskip("torch")
    groups = [
        [
            {
                "steps": [
                    {
                        "reward": torch.tensor(0.5),
                        "ob_len": np.int64(4),
                        "ac_len": torch.tensor(3),
                        "episode_done": np.bool_(True),
                        "metrics": {"a": np.float32(0.25), "b": torch.tensor([1.5])},
                        "logs": {"arr": np.array([1, 2]), "f": np.float64(NAN)},
                    }
                ],
                "final_reward": np.float64(1.0),
                "trajectory_metrics": {"c": np.int32(2)},
                "final_ob_len": np.uint16(7),
            }
        ]
    ]
    records = write_rollouts(storage, 0, groups)
    row = read_lines(storage, "train_iteration_000000_rollout_summaries.jsonl")[0]
    assert row["total_reward"] == 1.5 and row["final_ob_len"] == 7 and row["trajectory_metrics"] == {"c": 2}
    s = row["steps"][0]
    assert (s["reward"], s["ob_len"], s["ac_len"], s["episode_done"]) == (0.5, 4, 3, True)
    assert s["metrics"] == {"a": 0.25, "b": 1.5} and s["logs"]["arr"] == [1, 2] and math.isnan(s["logs"]["f"])
    assert type(records[0].steps[0].reward) is float and type(records[0].steps[0].ob_len) is int


def test_values_the_quick_batch_check_lets_through_are_converted_or_refused(storage):
    from fractions import Fraction

    groups = [[{"steps": [{"reward": 1.0, "metrics": {"f": Fraction(1, 2), "x": 1.0, 3: 2.0}}]}]]
    write_rollouts(storage, 0, groups)
    row = read_lines(storage, "train_iteration_000000_rollout_summaries.jsonl")[0]
    assert row["steps"][0]["metrics"] == {"f": 0.5, "x": 1.0, "3": 2.0}
    bad = [[{"steps": [{"reward": 1.0, "metrics": {(1, 2): 1.0}}]}]]
    with pytest.raises(TypeError, match=r"group 0, trajectory 0: step 0: metrics: keys must be str.*tuple"):
        write_rollouts(storage, 1, bad)
    assert storage.list() == ["train_iteration_000000_rollout_summaries.jsonl"]


def test_ready_made_records_keep_their_indices(storage):
    recs = [
        TrajectorySummary(
            split="train",
            iteration=2,
            group_idx=5,
            traj_idx=3,
            total_reward=1.0,
            steps=[StepSummary(step_idx=0, ob_len=1, ac_len=1, reward=1.0, episode_done=True)],
        ),
        {"group_idx": 6, "traj_idx": 0, "total_reward": 0.0, "steps": [{"reward": 0.0}]},
    ]
    write_rollouts(storage, 2, recs)
    back = list(read_rollouts(storage, 2))
    assert [(r.group_idx, r.traj_idx) for r in back] == [(5, 3), (6, 0)]
    with pytest.raises(ValueError, match="iteration=2 but this call writes iteration=3"):
        write_rollouts(storage, 3, recs)


@pytest.mark.parametrize(
    ("groups", "kwargs", "error", "match"),
    [
        (
            [[{"steps": [{"reward": 1.0, "metrics": {"m": [1, 2]}}]}]],
            {},
            TypeError,
            r"group 0, trajectory 0: step 0: metrics\['m'\]: expected a number",
        ),
        (
            [[{"steps": [{"reward": 1.0}]}, {"steps": [{"rewrd": 1.0}]}]],
            {},
            ValueError,
            r"trajectory 1: step 0: unknown keys \['rewrd'\]",
        ),
        ([[{"steps": [{"reward": "high"}]}]], {}, TypeError, "step 0: reward: expected a number"),
        ([[{"steps": [{"reward": 1.0, "ac_len": -1}]}]], {}, TypeError, "ac_len"),
        ([[{"stepz": []}]], {}, ValueError, "unknown keys"),
        ([["not a trajectory"]], {}, TypeError, "expected a trajectory"),
        ([[{"steps": []}]], {"tags": [["a"], ["b"]]}, ValueError, r"one per group \(1\), got 2"),
        ([[{"steps": []}]], {"split": "test"}, ValueError, "eval_name"),
        ({"steps": []}, {}, TypeError, "list of trajectory groups"),
    ],
)
def test_misuse_fails_fast_and_writes_nothing(storage, groups, kwargs, error, match):
    with pytest.raises(error, match=match):
        write_rollouts(storage, 0, groups, **kwargs)
    assert storage.list() == []


# ---------------------------------------------------------------------------- DataFrames


def test_dataframes_per_trajectory_and_per_step(storage):
    write_rollouts(storage, 3, sample_groups(), tags=["arith"])
    write_rollouts(storage, 3, [[{"steps": [step(1.0, ac_len=4)]}]], eval_name="test")
    df = rollouts_dataframe(storage)
    assert len(df) == 5
    assert list(df.columns[:12]) == [
        "split",
        "iteration",
        "group_idx",
        "traj_idx",
        "tags",
        "sampling_client_step",
        "total_reward",
        "final_reward",
        "final_ob_len",
        "num_steps",
        "total_ob_tokens",
        "total_ac_tokens",
    ]
    assert df["num_steps"].tolist() == [2, 1, 0, 1, 1]
    assert df["total_ac_tokens"].tolist() == [21, 2, 0, 1, 4]
    assert df["split"].tolist() == ["train"] * 4 + ["eval/test"]
    assert df["trajectory_metrics/correct"].iloc[0] == 1.0 and df["trajectory_metrics/correct"].iloc[2] == 0.0
    assert math.isnan(df["total_reward"].iloc[1])
    steps = rollouts_dataframe(storage, 3, split="train", per="step")
    assert len(steps) == 4
    assert steps["reward"].iloc[:2].tolist() == [0.0, 0.5]
    assert steps["metrics/format"].iloc[:2].tolist() == [1.0, 0.0]
    assert steps["logs/answer"].iloc[0] == "42"
    assert steps[["group_idx", "traj_idx", "step_idx"]].values.tolist() == [
        [0, 0, 0],
        [0, 0, 1],
        [0, 1, 0],
        [1, 1, 0],
    ]
    from_records = rollouts_dataframe(list(read_rollouts(storage, split="eval")), per="step")
    assert from_records["ac_len"].tolist() == [4]
    with pytest.raises(ValueError, match="per"):
        rollouts_dataframe(storage, per="group")


# ---------------------------------------------------------------------------- RunLogger


def test_run_logger_writes_and_non_writer_rank_does_not(tmp_path):
    with RunLogger(tmp_path / "run", code_diff=False) as logger:
        logger.log_rollouts(0, sample_groups(), tags=["t"])
        logger.log_rollouts(0, [[{"steps": [step(1.0)]}]], eval_name="test")
    assert sorted(p for p in os.listdir(tmp_path / "run") if "rollout" in p) == [
        "eval_test_iteration_000000_rollout_summaries.jsonl",
        "train_iteration_000000_rollout_summaries.jsonl",
    ]
    with RunLogger(tmp_path / "rank1", rank=1, code_diff=False) as logger:
        logger.log_rollouts(0, sample_groups())
    assert not (tmp_path / "rank1").exists() or not any(
        "rollout" in p for p in os.listdir(tmp_path / "rank1")
    )


def test_run_logger_strict_json(tmp_path):
    with RunLogger(tmp_path, strict_json=True, code_diff=False) as logger:
        logger.log_rollouts(1, sample_groups())
    data = (tmp_path / "train_iteration_000001_rollout_summaries.jsonl").read_bytes()
    assert b"NaN" not in data and b"Infinity" not in data and b'"total_reward":null' in data


class FlakyStorage(LocalStorage):
    failing = False

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        if self.failing and "rollout" in name:
            raise OSError(28, "No space left on device")
        super().write(name, data, durable=durable)


def test_run_logger_backend_failure_warns_retries_and_rescues(tmp_path):
    st = FlakyStorage(tmp_path / "run")
    logger = RunLogger(st, code_diff=False)
    st.failing = True
    with pytest.warns(RuntimeWarning, match="rollout summary file"):
        logger.log_rollouts(0, [[{"steps": [step(1.0)]}]])  # does not raise
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        logger.log_rollouts(1, [[{"steps": [step(2.0)]}]])
    st.failing = False
    logger.log_rollouts(2, [[{"steps": [step(3.0)]}]])  # retries the kept files first
    assert [r.total_reward for r in read_rollouts(st)] == [1.0, 2.0, 3.0]
    st.failing = True
    logger.log_rollouts(3, [[{"steps": [step(4.0)]}]])
    with pytest.warns(RuntimeWarning, match="saved to"):
        logger.close()
    rescued = next(w for w in logger.warnings if "saved to" in w).rsplit(" ", 1)[-1]
    assert os.listdir(rescued) == ["train_iteration_000003_rollout_summaries.jsonl"]
    assert [
        r.total_reward for r in read_rollouts(rescued + "/train_iteration_000003_rollout_summaries.jsonl")
    ] == [4.0]


# ---------------------------------------------------------------------------- demo


def test_demo_writes_train_and_eval_rollouts(tmp_path):
    from rllog._demo import DemoConfig, run_demo

    run_demo(
        DemoConfig(log_path=str(tmp_path), n_batches=3, eval_every=2, groups_per_batch=4, group_size=4),
        quiet=True,
    )
    names = [n for n in os.listdir(tmp_path) if n.endswith("_rollout_summaries.jsonl")]
    assert sorted(names) == [
        "eval_test_iteration_000000_rollout_summaries.jsonl",
        "eval_test_iteration_000002_rollout_summaries.jsonl",
        "train_iteration_000000_rollout_summaries.jsonl",
        "train_iteration_000001_rollout_summaries.jsonl",
        "train_iteration_000002_rollout_summaries.jsonl",
    ]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    df = rollouts_dataframe(tmp_path, split="train")
    assert len(df) == 3 * 16
    for row in rows:
        it = df[df.iteration == row["step"]]
        assert row["env/all/reward/total"] == pytest.approx(it.total_reward.mean())
        assert row["env/all/total_episodes"] == 16
    evals = rollouts_dataframe(tmp_path, 2, split="eval")
    assert len(evals) == 400 and set(evals.split) == {"eval/test"}
    assert rows[2]["test/env/all/reward/total"] == pytest.approx(evals.total_reward.mean())


def test_split_means_the_same_when_writing_and_reading(tmp_path):
    """The split a record is written with ("eval/<name>") selects it when reading."""
    from rllog import RunLogger

    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        logger.log_rollouts(1, [[{"steps": [{"reward": 1.0}]}]])
        logger.log_rollouts(1, [[{"steps": [{"reward": 0.5}]}]], eval_name="my set")
        logger.log_rollouts(1, [[{"steps": [{"reward": 0.25}]}]], eval_name="other")
    for split in ("train", "eval/my set", "eval/other"):
        got = list(read_rollouts(tmp_path, split=split))
        assert [r.split for r in got] == [split]
    assert sorted(r.split for r in read_rollouts(tmp_path, split="eval")) == ["eval/my set", "eval/other"]
    assert [r.split for r in read_rollouts(tmp_path, eval_name="my set")] == ["eval/my set"]
    with pytest.raises(ValueError, match="another evaluator"):
        list(read_rollouts(tmp_path, split="eval/my set", eval_name="other"))
    with pytest.raises(ValueError, match="'eval/<name>'"):
        list(read_rollouts(tmp_path, split="test"))


def test_build_rollout_summaries_in_the_old_argument_order_fails_with_the_fix():
    with pytest.raises(TypeError, match=r"iteration comes first .*build_rollout_summaries\(3, groups\)"):
        build_rollout_summaries([[{"steps": [{"reward": 1.0}]}]], 3)
