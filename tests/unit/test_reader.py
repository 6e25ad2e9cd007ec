"""read_run on synthetic runs: the repeated-step rule, damage, NaN, strings, incremental reads, artifacts."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rllog import RunLogger
from rllog._format.layout import parse_iteration_file
from rllog._format.rows import StepResolver
from rllog._read.run import MetricsTail, read_run
from rllog.errors import RunFormatError
from rllog.storage import LocalStorage, open_storage


def write_lines(path, *lines: str, end: str = "\n") -> None:
    path.write_text("\n".join(lines) + end)


def test_nan_tokens_null_and_strings(tmp_path):
    write_lines(
        tmp_path / "metrics.jsonl",
        '{"step":0,"loss":NaN,"kl":Infinity,"lr":null,"mode":"reward_only","ok":true}',
        '{"step":1,"loss":1.5,"kl":-Infinity,"lr":null,"mode":"kl"}',
    )
    run = read_run(tmp_path)
    df = run.metrics
    assert list(df.columns[:2]) == ["step", "loss"]
    assert math.isnan(df["loss"][0]) and df["loss"][1] == 1.5
    assert df["kl"].tolist() == [math.inf, -math.inf]
    assert df["lr"].dtype == "float64" and df["lr"].isna().all()  # nulls only: a float column
    assert df["mode"].tolist() == ["reward_only", "kl"]
    assert df["mode"].dtype != "float64"
    assert run.warnings == []


def test_torn_final_line_is_tolerated_and_reported(tmp_path):
    write_lines(tmp_path / "metrics.jsonl", '{"step":0,"a":1}', '{"step":1,"a":2}', '{"step":2,"a"', end="")
    run = read_run(tmp_path)
    assert [r["step"] for r in run.rows] == [0, 1]
    assert len(run.warnings) == 1 and "line 3: torn final line" in run.warnings[0]


def test_unterminated_but_whole_last_line_is_read(tmp_path):
    write_lines(tmp_path / "metrics.jsonl", '{"step":0,"a":1}', '{"step":1,"a":2}', end="")
    run = read_run(tmp_path)
    assert [r["a"] for r in run.rows] == [1, 2] and run.warnings == []


def test_damage_in_the_middle_is_skipped_with_its_line_number(tmp_path):
    write_lines(
        tmp_path / "metrics.jsonl", '{"step":0,"a":1}', '{"step":1,"a"::}', "[1, 2]", "", '{"step":3,"a":NaN}'
    )
    run = read_run(tmp_path)
    assert [r["step"] for r in run.rows] == [0, 3]
    assert any("metrics.jsonl line 2: not JSON" in w for w in run.warnings)
    assert any("metrics.jsonl line 3: expected a JSON object, got list" in w for w in run.warnings)


def test_eval_rows_with_the_same_step_merge_and_stay_apart(tmp_path):
    # tinker v3b: the eval-only row comes first; TRL: eval row after the train row, repeating epoch
    write_lines(
        tmp_path / "metrics.jsonl",
        '{"step":0,"env/all/reward/total":0.1,"epoch":0.1}',
        '{"step":1,"test/test/env/all/reward/total":0.4}',
        '{"step":1,"env/all/reward/total":0.2,"epoch":0.2}',
        '{"step":1,"eval_loss":0.9,"epoch":0.2}',
        '{"step":2,"env/all/reward/total":0.3,"epoch":0.3}',
        '{"step":2,"final/accuracy":0.8}',
    )
    run = read_run(tmp_path)
    assert [r["step"] for r in run.rows] == [0, 1, 2]
    assert run.rows[1] == {
        "step": 1,
        "test/test/env/all/reward/total": 0.4,
        "env/all/reward/total": 0.2,
        "epoch": 0.2,
        "eval_loss": 0.9,
    }
    assert run.merged_rows == 3 and run.restarts == [] and run.superseded.empty
    assert run.eval_columns == ["test/test/env/all/reward/total", "eval_loss"]
    ev = run.eval_metrics
    assert ev["step"].tolist() == [1] and ev["eval_loss"].tolist() == [0.9]
    tr = run.train_metrics
    assert tr["step"].tolist() == [0, 1, 2] and "eval_loss" not in tr.columns
    assert tr["env/all/reward/total"].tolist() == [0.1, 0.2, 0.3]


def test_restart_supersedes_the_abandoned_steps(tmp_path):
    # attempt 1 logs 0..4 and dies; attempt 2 resumes from the checkpoint at 2 and dies at 3
    rows = [{"step": s, "loss": 10 + s, "attempt": 1} for s in range(5)]
    rows += [{"step": s, "loss": 20 + s, "attempt": 2} for s in range(2, 4)]
    write_lines(tmp_path / "metrics.jsonl", *map(json.dumps, rows))
    run = read_run(tmp_path)
    assert [(r["step"], r["attempt"]) for r in run.rows] == [(0, 1), (1, 1), (2, 2), (3, 2)]
    assert run.restarts == [(6, 2)]
    sup = run.superseded
    assert sup["_line"].tolist() == [3, 4, 5] and sup["step"].tolist() == [2, 3, 4]  # step 4 too: abandoned
    assert set(sup["_source"]) == {"metrics.jsonl"}
    assert any("1 restart(s)" in w and "line 6" in w for w in run.warnings)


def test_same_step_clash_is_a_restart(tmp_path):
    write_lines(
        tmp_path / "metrics.jsonl",
        '{"step":0,"t":1.0}',
        '{"step":0,"t":2.0}',
        '{"step":0,"t":NaN}',
        '{"step":0,"t":NaN,"u":1}',
    )
    run = read_run(tmp_path)
    assert len(run.rows) == 1 and math.isnan(run.rows[0]["t"]) and run.rows[0]["u"] == 1
    assert run.restarts == [(2, 0), (3, 0)]  # NaN repeated is not a clash: line 4 adds "u", merged
    assert run.merged_rows == 1 and len(run.superseded) == 2


def test_an_unchanged_replay_of_earlier_steps_is_a_restart(tmp_path):
    # a deterministic resume re-logs steps 1..2 unchanged, then diverges
    rows = [{"step": s, "loss": float(s)} for s in range(4)] + [
        {"step": 1, "loss": 1.0},
        {"step": 2, "loss": 2.0},
        {"step": 3, "loss": 9.0},
    ]
    write_lines(tmp_path / "metrics.jsonl", *map(json.dumps, rows))
    run = read_run(tmp_path)
    assert run.restarts == [(5, 1)] and run.superseded["_line"].tolist() == [2, 3, 4]
    assert [r["loss"] for r in run.rows] == [0.0, 1.0, 2.0, 9.0]


def test_late_eval_rows_merge_into_their_step(tmp_path):
    # async eval: the result for step i-2 arrives while step i trains; it clashes with nothing
    rows = []
    for i in range(20):
        rows.append({"step": i, "train/loss": 1.0 / (i + 1)})
        if i >= 2 and i % 5 == 2:
            rows.append({"step": i - 2, "test/reward": float(i)})
    write_lines(tmp_path / "metrics.jsonl", *map(json.dumps, rows))
    run = read_run(tmp_path)
    assert [r["step"] for r in run.rows] == list(range(20))
    assert run.train_metrics["train/loss"].tolist() == [1.0 / (i + 1) for i in range(20)]
    assert run.eval_metrics["step"].tolist() == [0, 5, 10, 15] and run.eval_metrics[
        "test/reward"
    ].tolist() == [2.0, 7.0, 12.0, 17.0]
    assert run.restarts == [] and run.superseded.empty and run.merged_rows == 4 and run.warnings == []


def test_late_row_for_an_unlogged_step_is_inserted_in_order():
    resolver = StepResolver("step")
    for line, row in enumerate(
        [{"step": 0, "a": 1}, {"step": 10, "a": 2}, {"step": 5, "ev": 3}, {"step": 10, "a": 4}], 1
    ):
        resolver.add(line, row)
    # step 5 had no row: inserted; step 10 re-logged with a different "a": a restart from 10
    assert resolver.kept == [{"step": 0, "a": 1}, {"step": 5, "ev": 3}, {"step": 10, "a": 4}]
    assert resolver.restarts == [(4, 10)] and resolver.superseded == [(2, {"step": 10, "a": 2})]


# --- the rule as a property: simulated crashes and resumes ------------------------------------
@st.composite
def attempts(draw):
    """Attempts of one run, each resuming at a step <= where the previous one stopped (+1).

    Each attempt logs a train row per step; some steps get an eval row, logged either with
    the train row or late (``delay`` steps after it, by an asynchronous evaluator: lost if
    the attempt stops first)."""
    out, end = [], -1
    for _ in range(draw(st.integers(1, 5))):
        start = draw(st.integers(0, end + 1))
        end = start + draw(st.integers(0, 6))
        evals = draw(st.dictionaries(st.integers(start, end), st.integers(0, 3), max_size=3))
        seed = draw(st.integers(0, 1))  # attempts with one seed log the same values: a deterministic replay
        out.append((seed, start, end, evals))
    return out


@settings(max_examples=300, deadline=None)
@given(attempts())
def test_resolved_rows_are_the_last_attempts_timeline(plan):
    resolver = StepResolver("step")
    expected: dict[int, dict] = {}
    line = 0

    def log(row):
        nonlocal line
        line += 1
        resolver.add(line, row)
        expected.setdefault(row["step"], {}).update(row)

    for seed, start, end, evals in plan:
        expected = {s: row for s, row in expected.items() if s < start}
        for s in range(start, end + 1):
            log({"step": s, "loss": float(seed * 100 + s)})
            for e, delay in sorted(evals.items()):
                if e + delay == s:  # the eval of step e finishes now (delay 0: with its train row)
                    log({"step": e, "eval_reward": float(seed)})
    assert resolver.kept == [expected[s] for s in sorted(expected)]
    lines = sorted([ln for ln, _ in resolver.standing_rows()] + [ln for ln, _ in resolver.superseded])
    assert lines == list(range(1, line + 1))  # every row stands or is superseded, once
    assert len(resolver.restarts) == sum(
        1 for i, (_, start, _, _) in enumerate(plan) if i and start <= plan[i - 1][2]
    )


# --- incremental reading ------------------------------------------------------------------------
class CountingStorage(LocalStorage):
    """A LocalStorage that records the byte ranges read from metrics.jsonl."""

    def __init__(self, root):
        super().__init__(root)
        self.ranges: list[tuple[int, int | None]] = []

    def read_range(self, name, start, end=None):
        if name == "metrics.jsonl":
            self.ranges.append((start, end))
        return super().read_range(name, start, end)

    def read(self, name):
        assert name != "metrics.jsonl", "metrics.jsonl must be read incrementally"
        return super().read(name)


def test_refresh_reads_only_new_bytes(tmp_path):
    storage = CountingStorage(tmp_path)
    with RunLogger(storage, code_diff=False) as logger:
        for s in range(3):
            logger.log_metrics(s, {"reward": s / 10})
        run = read_run(storage)
        size = storage.size("metrics.jsonl")
        assert storage.ranges == [(0, 1 << 20)]  # the head only, for the step column
        logger.log_metrics(3, {"reward": 0.3})
        new = run.refresh()
        assert new == [{"step": 3, "reward": 0.3}]
        # the old rows once, then the file's first bytes (still the same file?) and the new
        # bytes with the last <= 256 bytes read before them (not cut and regrown?)
        assert storage.ranges[1:] == [
            (0, size),
            (0, size),
            (max(0, size - 256), storage.size("metrics.jsonl")),
        ]
        assert run.metrics["reward"].tolist() == [0.0, 0.1, 0.2, 0.3]
        assert run.refresh() == [] and len(storage.ranges) == 4  # nothing new: no read at all


def test_tail_leaves_a_partial_line_for_later_and_restarts_on_rewrite(tmp_path):
    storage = LocalStorage(tmp_path)
    storage.append("metrics.jsonl", b'{"step":0,"a":1}\n{"step":1,')
    tail = MetricsTail(storage, "metrics.jsonl")
    assert tail.poll() == [(1, {"step": 0, "a": 1})]
    storage.append("metrics.jsonl", b'"a":2}\n')
    assert tail.poll() == [(2, {"step": 1, "a": 2})]
    storage.write("metrics.jsonl", b'{"step":0,"a":9}\n')  # rewritten shorter (resume)
    assert tail.poll() == [(1, {"step": 0, "a": 9})] and tail.rewritten
    assert "shrank" in tail.problems[-1]


def test_resume_by_the_writer_moves_rows_to_superseded(tmp_path):
    with RunLogger(tmp_path, code_diff=False) as logger:
        for s in range(6):
            logger.log_metrics(s, {"reward": float(s)})
            if s == 2:
                logger.log_checkpoint("000002", batch=3)
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert logger.resume_state.batch == 3
        for s in range(3, 5):
            logger.log_metrics(s, {"reward": 10.0 + s})
    run = read_run(tmp_path)
    assert [(r["step"], r["reward"]) for r in run.rows] == [
        (0, 0.0),
        (1, 1.0),
        (2, 2.0),
        (3, 13.0),
        (4, 14.0),
    ]
    sup = run.superseded
    assert sup["_source"].tolist() == ["metrics.superseded.jsonl"] * 3 and sup["step"].tolist() == [3, 4, 5]
    assert [{k: v for k, v in c.items() if k != "metrics_at"} for c in run.checkpoints] == [
        {"name": "000002", "batch": 3}
    ]


def test_memory_run_round_trip():
    url = f"memory://rllog-reader-{uuid.uuid4().hex}/run"
    with RunLogger(url, config={"lr": 3e-4, "model": {"name": "tiny"}}, code_diff=False) as logger:
        for s in range(4):
            logger.log_metrics(s, {"env/all/reward/total": s / 4, "entropy": math.nan if s == 2 else 1.0})
        logger.log_checkpoint("000003", batch=4, final=True)
    storage = open_storage(url)
    storage.write(
        "train_iteration_000003_rollout_summaries.jsonl", b'{"iteration":3,"total_reward":1.0,"steps":[]}\n'
    )
    storage.write(
        "train_iteration_000003_logtree.json",
        b'{"title":"RL Iteration 3","root":{"tag":"body","attrs":{},"children":[]}}',
    )
    storage.write("eval_test_iteration_000003.html", b"<html>eval</html>")
    storage.close()  # object-store writes are uploaded (visible to other handles) by flush/close
    run = read_run(url)
    assert run.config == {"lr": 3e-4, "model": {"name": "tiny"}}
    assert run.metrics["env/all/reward/total"].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert math.isnan(run.metrics["entropy"][2])
    [record] = run.checkpoints
    assert record.pop("metrics_at")["bytes"] == storage.size("metrics.jsonl")  # where the rows stood
    assert record == {"name": "000003", "batch": 4, "final": True}
    [it] = run.iterations
    assert it.iteration == 3 and it.eval_names == ["test"]
    assert [a.kind for a in it.artifacts] == ["logtree", "rollout_summaries", "html"]
    assert run.rollout_summaries(3) == [{"iteration": 3, "total_reward": 1.0, "steps": []}]
    assert run.logtree(3)["title"] == "RL Iteration 3"
    assert run.html(3, "test") == "<html>eval</html>"
    with pytest.raises(FileNotFoundError, match="no html for train at iteration 3"):
        run.html(3)
    assert {n for n, _ in run.files()} >= {"metrics.jsonl", "config.json", "checkpoints.jsonl"}


def test_iteration_file_names():
    def parsed(name):
        a = parse_iteration_file(name)
        return None if a is None else (a.split, a.eval_name, a.iteration, a.kind)

    assert parsed("train_iteration_000012.html") == ("train", None, 12, "html")
    assert parsed("iteration_000002.html") == ("train", None, 2, "html")  # old flat tinker-cookbook name
    assert parsed("iteration_000007/eval_test_rollout_summaries.jsonl") == (
        "eval",
        "test",
        7,
        "rollout_summaries",
    )
    assert parsed("iteration_000007/train_logtree.json") == ("train", None, 7, "logtree")
    assert parsed("eval_my-eval_iteration_1234567.html") == ("eval", "my-eval", 1234567, "html")
    assert parsed("metrics.jsonl") is None
    assert parsed("iteration_12.html") is None


def test_step_key_choice(tmp_path):
    write_lines(
        tmp_path / "m.jsonl", '{"grad_step":0,"global_step":0,"x":1}', '{"grad_step":0,"global_step":1,"x":2}'
    )
    assert read_run(tmp_path / "m.jsonl").step_key == "global_step"
    run = read_run(tmp_path / "m.jsonl", step_key="grad_step")
    assert len(run.rows) == 1 and run.restarts == [(2, 0)]  # x contradicts at the same grad_step


def test_missing_and_wrong_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run at"):
        read_run(tmp_path / "nope")
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(RunFormatError, match="log_history"):
        read_run(tmp_path / "x.json")
    run = read_run(tmp_path)  # a folder without metrics.jsonl: empty, with a warning
    assert run.rows == [] and run.metrics.empty and "no metrics.jsonl" in run.warnings[0]


def test_prefixed_metrics_file_under_a_uri():
    base = f"memory://rllog-reader-{uuid.uuid4().hex}"
    storage = open_storage(base)
    storage.write("arith_metrics.jsonl", b'{"step":0,"reward":0.5}\n{"step":1,"reward":0.75}\n')
    storage.write("arith_checkpoints.jsonl", b'{"name":"000001","batch":2}\n')
    storage.write("other_metrics.jsonl", b'{"step":0,"reward":9}\n')
    storage.close()
    run = read_run(f"{base}/arith_metrics.jsonl")
    assert run.metrics_name == "arith_metrics.jsonl" and [r["reward"] for r in run.rows] == [0.5, 0.75]
    assert run.checkpoints == [{"name": "000001", "batch": 2}] and run.config is None
    assert [n for n, _ in run.files()] == ["arith_checkpoints.jsonl", "arith_metrics.jsonl"]
    with pytest.raises(FileNotFoundError, match="no such file"):
        read_run(f"{base}/nope_metrics.jsonl")


def test_evaluator_display_name_as_logged(tmp_path):
    from rllog import logtree

    with RunLogger(tmp_path, code_diff=False) as logger:
        logger.log_metrics(0, {"loss": 1.0})
        with logger.evaluation("my eval set 1", 0):
            logtree.text("x")
        with logger.evaluation("other/set", 1):
            pass
    run = read_run(tmp_path)
    safe = run.iterations[0].eval_names
    assert len(safe) == 1 and safe[0] != "my eval set 1"
    assert run.eval_display_name(safe[0]) == "my eval set 1"
    assert run.eval_display_name(run.iterations[1].eval_names[0]) == "other/set"
    assert run.eval_display_name("never-logged") == "never-logged"
    assert (
        run.artifact(0, "html", "my eval set 1").name == run.artifact(0, "html", safe[0]).name
    )  # either name works


def test_refresh_notices_a_rewrite_that_grew_past_the_old_offset(tmp_path):
    """Rows moved aside, then more rows appended than were there: the file is longer than
    what was read, yet another file; refresh must read it again, not splice."""
    from rllog import RunLogger, read_run

    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for i in range(10):
            logger.log_metrics(i, {"loss": 100.0 + i})
    run = read_run(tmp_path)
    assert len(run.rows) == 10
    (tmp_path / "metrics.jsonl").write_bytes(b"")  # e.g. a resume moved every row aside
    with RunLogger(tmp_path, code_diff=False, index=False) as logger:
        for i in range(10, 40):
            logger.log_metrics(i, {"loss": float(i)})
    run.refresh()
    assert [r["step"] for r in run.rows] == list(range(10, 40))
    assert any("rewritten" in w for w in run.warnings)
