"""metrics.jsonl: rows written by RunLogger.log_metrics read back exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rllog import RunLogger
from rllog._format.codec import MetricsEncoder, decode_json
from rllog._format.redact import redact_metric


class TorchLike:
    """An object that behaves like a one-element torch tensor (numel + item)."""

    def __init__(self, value: float, n: int = 1) -> None:
        self.value, self.n = value, n

    def numel(self) -> int:
        return self.n

    def size(self) -> tuple[int]:
        return (self.n,)

    def item(self) -> float:
        if self.n != 1:
            raise RuntimeError("a Tensor with more than one element cannot be converted to Scalar")
        return self.value


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b)


def test_rows_read_back_equal_what_was_logged(tmp_path: Path) -> None:
    rows = [
        {"progress/batch": 0, "env/all/reward/total": 0.25, "flag": True, "name": "réponse ✅", "none": None},
        {"progress/batch": 1, "loss": float("nan"), "up": float("inf"), "down": float("-inf")},
        {
            "np64": np.float64(1.5),
            "np32": np.float32(0.25),
            "npint": np.int64(7),
            "np0d": np.array(2.5),
            "np1": np.array([3.0]),
            "torch": TorchLike(4.5),
            "npbool": np.bool_(True),
        },
        {"lone": "a\ud800b", "emoji": "😀", "quote": 'he said "hi"\n'},
    ]
    with RunLogger(tmp_path, code_diff=False) as logger:
        for step, row in enumerate(rows):
            logger.log_metrics(step, row)
    got = read_rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in got] == [0, 1, 2, 3]
    assert [list(r) for r in got] == [["step", *row] for row in rows]  # step first, then the caller's order
    assert got[0] == {"step": 0, **rows[0]}
    assert math.isnan(got[1]["loss"]) and got[1]["up"] == math.inf and got[1]["down"] == -math.inf
    expected2 = {
        "step": 2,
        "np64": 1.5,
        "np32": 0.25,
        "npint": 7,
        "np0d": 2.5,
        "np1": 3.0,
        "torch": 4.5,
        "npbool": True,
    }
    assert all(same(got[2][k], v) for k, v in expected2.items())
    assert (
        got[3]["lone"] == "a\ufffdb"
    )  # the codec's one rule for lone surrogates and got[3]["emoji"] == "😀" and got[3]["quote"] == 'he said "hi"\n'
    raw = (tmp_path / "metrics.jsonl").read_bytes().splitlines()
    assert raw[1] == b'{"step":1,"progress/batch":1,"loss":NaN,"up":Infinity,"down":-Infinity}'


def test_pandas_reads_the_file_and_the_seed_plot_call_works(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    with RunLogger(tmp_path, code_diff=False) as logger:
        for i in range(20):
            logger.log_metrics(
                i,
                {
                    "progress/batch": i,
                    "env/all/reward/total": i / 20,
                    "entropy": float("nan") if i == 3 else 1.0,
                },
            )
    df = pd.read_json(tmp_path / "metrics.jsonl", lines=True)
    assert len(df) == 20 and list(df["progress/batch"]) == list(range(20))
    assert math.isnan(df["entropy"][3]) and df["entropy"][4] == 1.0
    ax = df.plot(x="progress/batch", y="env/all/reward/total")
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == list(range(20))
    assert list(line.get_ydata()) == pytest.approx(
        [i / 20 for i in range(20)], rel=1e-15
    )  # pandas parses floats to ~1 ulp


def test_odd_scalars_become_the_numbers_they_stand_for(tmp_path: Path) -> None:
    import enum
    from decimal import Decimal
    from fractions import Fraction

    import torch

    class Phase(str, enum.Enum):
        TRAIN = "train"

    class Level(enum.IntEnum):
        HIGH = 3

    with RunLogger(tmp_path, code_diff=False) as logger:
        logger.log_metrics(
            0,
            {
                "masked": np.ma.masked_invalid([np.nan, np.nan]).mean(),
                "longdouble": np.longdouble(0.5),
                "phase": Phase.TRAIN,
                "level": Level.HIGH,
                "dec": Decimal("0.25"),
                "frac": Fraction(1, 4),
                "f16": np.float16(0.5),
                "bf16": torch.tensor([0.5], dtype=torch.bfloat16),
                "u8": np.uint8(7),
                "i64max": 2**63 - 1,
            },
        )
    row = read_rows(tmp_path / "metrics.jsonl")[0]
    assert math.isnan(row.pop("masked"))
    assert row == {
        "step": 0,
        "longdouble": 0.5,
        "phase": "train",
        "level": 3,
        "dec": 0.25,
        "frac": 0.25,
        "f16": 0.5,
        "bf16": 0.5,
        "u8": 7,
        "i64max": 2**63 - 1,
    }


def test_a_dict_changed_by_another_thread_is_written_as_one_snapshot(tmp_path: Path) -> None:
    import threading

    metrics = {f"k{i}": float(i) for i in range(100)}
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            metrics["k50"] = float("nan")
            metrics["k50"] = 1.0

    t = threading.Thread(target=flip)
    t.start()
    try:
        with RunLogger(tmp_path, code_diff=False) as logger:
            for i in range(5000):
                logger.log_metrics(i, metrics)
    finally:
        stop.set()
        t.join()
    assert b"null" not in (tmp_path / "metrics.jsonl").read_bytes()  # NaN is never lost as null
    values = {json.dumps(r["k50"]) for r in read_rows(tmp_path / "metrics.jsonl")}
    assert values <= {"NaN", "1.0"}


def test_strict_json_writes_null(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False, strict_json=True) as logger:
        logger.log_metrics(0, {"a": float("nan"), "b": float("-inf"), "c": 1.0})
    line = (tmp_path / "metrics.jsonl").read_bytes()
    assert line == b'{"step":0,"a":null,"b":null,"c":1.0}\n'
    json.loads(line, parse_constant=lambda c: pytest.fail(f"strict JSON has token {c}"))


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"n": 2**70}, "n"),
        ({"tokens": 2**1100, "loss": 0.5}, "tokens"),
        ({"when": np.datetime64("2024-01-01T00:00:00", "ns")}, "when"),
        ({"dt": np.timedelta64(5, "s")}, "dt"),
        ({"c": np.complex128(1 + 2j)}, "c"),
        ({"ok": 1.0, "vec": [1.0, 2.0]}, "vec"),
        ({"arr": np.zeros(3)}, "arr"),
        ({"t": TorchLike(1.0, n=4)}, "t"),
        ({"d": {"nested": 1}}, "d"),
        ({"o": object()}, "o"),
        ({"b": b"bytes"}, "b"),
    ],
)
def test_bad_values_raise_type_error_naming_the_key_and_write_nothing(
    tmp_path: Path, bad: dict, key: str
) -> None:
    with RunLogger(tmp_path, code_diff=False) as logger:
        logger.log_metrics(0, {"a": 1})
        with pytest.raises(TypeError, match=repr(key)):
            logger.log_metrics(1, bad)
        logger.log_metrics(2, {"a": 3})
    assert [r["step"] for r in read_rows(tmp_path / "metrics.jsonl")] == [0, 2]


def test_misuse_of_step_and_keys(tmp_path: Path) -> None:
    with RunLogger(tmp_path, code_diff=False) as logger:
        with pytest.raises(TypeError, match="step must be an int"):
            logger.log_metrics(1.5, {"a": 1})
        with pytest.raises(TypeError, match="step must be an int"):
            logger.log_metrics(True, {"a": 1})
        with pytest.raises(TypeError, match=r"takes \(step, metrics\), step first"):
            logger.log_metrics({"a": 1}, 3)
        with pytest.raises(ValueError, match="step must be >= 0"):
            logger.log_metrics(-1, {"a": 1})
        with pytest.raises(ValueError, match="key 'step'"):
            logger.log_metrics(1, {"step": 1})
        with pytest.raises(TypeError, match="keys must be str"):
            logger.log_metrics(1, {3: 1.0})
        with pytest.raises(TypeError, match="must be a dict"):
            logger.log_metrics(1, [("a", 1)])
        logger.log_metrics(np.int64(5), {"a": 1})
    assert read_rows(tmp_path / "metrics.jsonl") == [{"step": 5, "a": 1}]
    with pytest.raises(RuntimeError, match="closed"):
        logger.log_metrics(6, {"a": 1})


def test_rows_reach_the_os_before_log_metrics_returns(tmp_path: Path) -> None:
    logger = RunLogger(tmp_path, code_diff=False)
    logger.log_metrics(0, {"a": 1.0})
    # read through another file description, with the logger still open and not flushed
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step":0,"a":1.0}\n'
    logger.close()
    logger.close()  # idempotent


# -- property tests on the encoder ---------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)
keys = st.text().filter(lambda k: k not in ("step", ""))  # "" is refused (test_fail_fast)


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metrics=st.dictionaries(keys, scalars, max_size=12), step=st.integers(min_value=0, max_value=2**62))
@example(metrics={"SECRET/0": "0"}, step=0)  # found by hypothesis: a secret-named key comes back redacted
def test_any_dict_of_allowed_values_round_trips(metrics: dict, step: int) -> None:
    try:
        "".join(metrics).encode("utf-8")
    except UnicodeEncodeError:
        return  # keys with lone surrogates are covered by the rejection test below
    line = bytes(MetricsEncoder().encode_row(step, metrics))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = json.loads(line)
    assert list(back) == ["step", *metrics]
    assert back["step"] == step
    for k, v in metrics.items():
        # a string may come back redacted (a secret-named key or shape, docs/FORMATS.md)
        assert same(back[k], v) or (isinstance(v, str) and back[k] == redact_metric(k, v)), (k, v, back[k])
    assert decode_json(line) == json.loads(line) or any(
        isinstance(v, float) and math.isnan(v) for v in metrics.values()
    )


bad_values = st.one_of(
    st.lists(st.integers(), min_size=1),
    st.dictionaries(st.text(), st.integers(), min_size=1),
    st.binary(),
    st.builds(object),
    st.sets(st.integers(), min_size=1),
    st.complex_numbers(allow_nan=False),
    st.integers(min_value=2**63),  # past int64: pandas and msgspec cannot read it back
    st.integers(max_value=-(2**63) - 1),
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(good=st.dictionaries(keys, scalars, max_size=5), bad_key=keys, bad=bad_values)
def test_anything_else_raises_type_error_and_leaves_the_file_unchanged(
    tmp_path: Path, good: dict, bad_key: str, bad: object
) -> None:
    path = tmp_path / "metrics.jsonl"
    with RunLogger(tmp_path, code_diff=False) as logger:
        before = path.read_bytes() if path.exists() else b""
        with pytest.raises(TypeError) as info:
            logger.log_metrics(0, {**good, bad_key: bad})
        after = path.read_bytes() if path.exists() else b""
    assert after == before
    assert repr(bad_key) in str(info.value)
