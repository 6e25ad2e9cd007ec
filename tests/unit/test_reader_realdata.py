"""Every real log in shared/realdata through read_run or an importer, then summary; facts from SOURCES.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from realdata import REALDATA, needs, needs_full  # ../shared/realdata, else the copy in tests/data

from rllog import read_run
from rllog._read.summary import format_summary, summarize
from rllog.importers import import_tensorboard, import_trl

TINKER = REALDATA / "tinker"
TRL = REALDATA / "trl"
EXTRA = REALDATA / "extra"
STAGE2 = "alexchilton__CAS_NLP_MODULE4_GRPO/expert_guy/post_training_project/threestage/stage2_output"
REDTEAM = EXTRA / "aaravarora01__agent-memory-redteam/modal_results/strict/stage2"
GAURI_NAN = TRL / "gauri0508__med-record/training/trainer_state.json"
GAURI_NULL = TRL / "gauri0508__med-record@f04ea59/training/trainer_state.json"
CODEFORCES = TINKER / "astOwOlfo__tinker-cookbook-reward-hacking/tmp/tinker-runs/bash_codeforces"
BZZ = TINKER / "bzz__tinker-cookbook/data/context_distillation/logs"
JOAN = TINKER / "joanvelja__tinker-cookbook/reports/data"
SUSHANT = TINKER / "sushantmehta-code__tinker-cookbook"
ARVIND = TINKER / "arvindcr4__tinker-rl-lab/experiments/results"


def all_files(pattern: str) -> list[Path]:
    return sorted(REALDATA.rglob(pattern)) if REALDATA.is_dir() else []


def hazy() -> Path:
    found = [p for p in (REALDATA / "extra").rglob("metrics.jsonl") if "HazyResearch" in str(p)]
    return found[0] if found else REALDATA / "extra" / "HazyResearch__act-prm-tinker"


def check_summary(run) -> dict:
    info = summarize(run)
    text = format_summary(info)
    assert text.startswith("run ") and f"{info['rows']} standing" in text
    return info


@pytest.mark.parametrize("path", all_files("*.jsonl"), ids=lambda p: str(p.relative_to(REALDATA)))
def test_every_jsonl_file_reads(path):
    run = read_run(path)
    with open(path, "rb") as f:
        n_lines = sum(1 for line in f if line.strip())
    assert run.rows_read == n_lines  # no line lost or invented
    assert not [w for w in run.warnings if "not JSON" in w or "torn" in w]
    check_summary(run)


@pytest.mark.parametrize("path", all_files("trainer_state.json"), ids=lambda p: str(p.relative_to(REALDATA)))
def test_every_trainer_state_reads_and_imports(path, tmp_path):
    history = json.loads(path.read_text())["log_history"]
    direct = read_run(path)
    assert direct.rows_read == len(history)
    check_summary(direct)
    report = import_trl(path, tmp_path / "run")
    imported = read_run(tmp_path / "run")
    assert report.rows == len(history) and imported.rows_read == len(history)
    assert imported.warnings == []
    assert imported.metrics.shape == direct.metrics.shape
    check_summary(imported)


@pytest.mark.parametrize(
    "events_dir",
    sorted({p.parent for p in all_files("events.out.tfevents.*")}),
    ids=lambda p: p.parent.parent.name,
)
def test_every_tensorboard_dir_imports(events_dir, tmp_path):
    report = import_tensorboard(events_dir, tmp_path / "run")
    run = read_run(tmp_path / "run")
    assert report.rows == run.rows_read and report.superseded == len(run.superseded_rows)
    assert run.warnings == []
    # the two text summaries (training args, model config) became config.json; nothing else was skipped
    assert run.config and "learning_rate" in run.config and "model_config" in run.config
    assert not any("skipped" in n for n in report.notes)
    check_summary(run)


@needs_full
def test_row_counts_from_sources():
    expected = {
        CODEFORCES / "metrics.jsonl": 6,
        JOAN / "gptoss-20b-v2-metrics.jsonl": 48,
        JOAN / "gptoss-20b-v3b-metrics.jsonl": 82,
        JOAN / "qwen3-30b-instruct-v3b-metrics.jsonl": 56,
        JOAN / "qwen3-30b-think-v3b-metrics.jsonl": 25,
        BZZ / "exp1_off_policy/metrics.jsonl": 30,
        BZZ / "exp4_reward_only/metrics.jsonl": 31,
        SUSHANT / "logs_v2/metrics.jsonl": 29,
        SUSHANT / "logs_v2p7/metrics.jsonl": 113,
        ARVIND / "arithmetic_metrics.jsonl": 100,
        ARVIND / "distillation_off_metrics.jsonl": 683,
        REDTEAM / "train_metrics.with_duplicates.jsonl": 179,
        REDTEAM / "train_metrics.jsonl": 150,
        hazy(): 8200,
    }
    for path, rows in expected.items():
        assert read_run(path).rows_read == rows, path
    trl = {
        "Rusheel86__Chaos-Economy": 40,
        "aaravarora01__agent-memory-redteam": 100,
        "gauri0508__med-record/training": 150,
    }
    for name, rows in trl.items():
        assert len(read_run(TRL / name / "trainer_state.json").rows) == rows


@needs(REDTEAM)
def test_resumed_run_resolves_to_the_authors_deduplicated_file():
    dup = read_run(REDTEAM / "train_metrics.with_duplicates.jsonl")
    clean = read_run(REDTEAM / "train_metrics.jsonl")
    assert dup.restarts == [(30, 251)]  # after line 29 the step goes back from 279 to 251
    assert dup.rows == clean.rows and len(dup.rows) == 150
    assert dup.metrics.equals(clean.metrics)
    sup = dup.superseded
    assert sup["_line"].tolist() == list(range(1, 30)) and sup["step"].tolist() == list(range(251, 280))
    assert any("1 restart(s)" in w for w in dup.warnings) and clean.warnings == []


@needs(GAURI_NAN, GAURI_NULL)
def test_nan_cell_reads_as_nan_in_both_versions(tmp_path):
    for path, out in ((GAURI_NAN, "nan"), (GAURI_NULL, "null")):
        for run in (read_run(path), read_run(import_trl(path, tmp_path / out).out)):
            df = run.metrics
            assert df["grad_norm"].dtype == "float64"
            missing = df[df["grad_norm"].isna()]
            assert missing["step"].tolist() == [138] and missing["epoch"].tolist() == [0.92]
            assert df["grad_norm"].notna().sum() == 149
    assert b'"grad_norm":NaN' in (tmp_path / "nan/metrics.jsonl").read_bytes()
    assert b'"grad_norm":null' in (tmp_path / "null/metrics.jsonl").read_bytes()


@needs(TRL / STAGE2)
def test_trl_eval_rows_are_kept_apart(tmp_path):
    path = TRL / STAGE2 / "checkpoint-160/trainer_state.json"
    import_trl(path, tmp_path / "run")
    lines = (tmp_path / "run/metrics.jsonl").read_text().splitlines()
    assert len(lines) == 168  # 160 train + 8 eval rows, as logged
    eval_lines = [json.loads(x) for x in lines if '"eval_' in x]
    assert [r["step"] for r in eval_lines] == list(range(20, 161, 20))
    assert all(
        "loss" not in r and "epoch" not in r for r in eval_lines
    )  # epoch equal to the train row's: dropped
    run = read_run(tmp_path / "run")
    assert len(run.rows) == 160 and run.merged_rows == 8
    ev, tr = run.eval_metrics, run.train_metrics
    assert ev["step"].tolist() == list(range(20, 161, 20)) and len(tr) == 160
    assert ev.loc[0, "eval_loss"] == pytest.approx(0.018174514174461365)
    assert tr.loc[tr.step == 20, "loss"].item() == pytest.approx(-0.0315)
    assert "eval_loss" not in tr.columns and "loss" not in ev.columns
    assert (
        run.config["best_model_checkpoint"] == "stage2_output/checkpoint-140"
        and run.config["max_steps"] == 480
    )


@needs(REALDATA / "tensorboard" / STAGE2, TRL / STAGE2)
def test_tensorboard_restart_later_file_wins_and_matches_trainer_state(tmp_path):
    report = import_tensorboard(REALDATA / "tensorboard" / STAGE2 / "logs", tmp_path / "tb")
    assert report.superseded == 17 and (report.first_step, report.last_step) == (1, 160)
    tb = read_run(tmp_path / "tb")
    sup = tb.superseded
    assert set(sup["_source"]) == {"metrics.superseded.jsonl"} and sup["step"].tolist() == list(range(1, 18))
    trl = read_run(TRL / STAGE2 / "checkpoint-160/trainer_state.json")
    # the same run: TensorBoard keys map back to the trainer's log keys, values equal to float32 precision
    assert len(tb.rows) == len(trl.rows) == 160
    for key in ("reward", "loss", "kl", "grad_norm", "eval_reward", "eval_loss", "completions/mean_length"):
        a, b = tb.metrics[key], trl.metrics[key]
        assert a.notna().sum() == b.notna().sum(), key
        assert a.to_numpy() == pytest.approx(b.to_numpy(), rel=1e-6, nan_ok=True), key
    # the aborted first attempt really differs (step_time always), so the choice matters
    first = sup[sup.step == 1]
    assert first["step_time"].item() != tb.metrics.loc[0, "step_time"]


@needs(REALDATA / "tensorboard")
def test_tensorboard_sparse_tags_and_summary_scalars(tmp_path):
    lara = next((REALDATA / "tensorboard").rglob("*lara_TUF*")).parent
    import_tensorboard(lara, tmp_path / "tb")
    df = read_run(tmp_path / "tb").metrics
    assert df["step"].tolist() == list(range(1, 91))
    assert df["loss"].notna().sum() == 90 and df["kl"].notna().sum() == 90
    assert df["reward"].notna().sum() == 60 and df.loc[df.step % 3 == 0, "reward"].isna().all()
    assert df["train_runtime"].notna().sum() == 1 and not math.isnan(df["train_runtime"].iloc[-1])


@needs(CODEFORCES / "iteration_000000.html")
def test_codeforces_sessions_and_flat_html():
    run = read_run(CODEFORCES)
    assert run.rows_read == 6 and len(run.rows) == 1 and len(run.restarts) == 4  # 5 sessions
    assert run.rows[0]["env/all/reward/total"] == 0.1328125  # the last session's row
    assert len(run.superseded) == 5
    assert [it.iteration for it in run.iterations] == [0, 1, 2]
    assert "RL Iteration 1" in run.html(1)
    assert len(run.checkpoints) == 21 and all("state_path" not in c for c in run.checkpoints)
    assert run.config["model_name"] == "openai/gpt-oss-20b"


@needs(JOAN)
def test_v3b_eval_only_rows_merge_and_stay_apart():
    run = read_run(JOAN / "gptoss-20b-v3b-metrics.jsonl")
    assert run.rows_read == 82 and len(run.rows) == 75 and run.merged_rows == 7 and run.restarts == []
    ev = run.eval_metrics
    assert ev["step"].tolist() == [10, 20, 30, 40, 50, 60, 70]
    assert all(c.startswith("test/test/") for c in ev.columns[1:])
    row10 = run.metrics[run.metrics.step == 10]
    assert row10["env/all/reward/total"].notna().item() and row10["test/test/env/all/correct"].notna().item()


@needs(BZZ / "exp4_reward_only")
def test_string_metrics_and_final_rows():
    run = read_run(BZZ / "exp4_reward_only")
    df = run.metrics
    assert df["progress/mode"].dropna().unique().tolist() == ["reward_only"]
    assert df["progress/mode"].dtype != "float64"
    last = run.rows[-1]  # the trailing summary row: step 30, only final/* keys
    assert (
        set(last) == {"step", "final/accuracy", "final/parse_rate", "final/num_evaluated"}
        and last["step"] == 30
    )
    assert run.config is not None and len(run.checkpoints) == 2


@needs(hazy())
def test_sparse_8200_row_file_with_three_appended_runs():
    run = read_run(hazy())
    assert run.step_key == "global_step"
    assert run.rows_read == 8200 and len(run.rows) == 8000
    assert run.restarts == [(73, 0), (201, 0)]
    assert len(run.superseded) == 200  # 72 + 128 rows of the two earlier runs
    df = run.metrics
    assert df["global_step"].tolist() == list(range(8000))
    assert df.shape[1] == 43
    paths = df["actions_data_lm_save_path"].dropna()
    assert len(paths) > 0 and all(isinstance(p, str) for p in paths)
    assert (df["global_step"] // 8 == df["grad_step"]).all()


@needs(ARVIND / "distillation_off_metrics.jsonl")
def test_prefixed_file_finds_its_checkpoints():
    run = read_run(ARVIND / "distillation_off_metrics.jsonl")
    assert len(run.rows) == 683 and len(run.checkpoints) == 14
    assert max(c["batch"] for c in run.checkpoints) == 700  # checkpoints past the last metrics step
    assert run.config is None and run.iterations == []


@needs(SUSHANT)
def test_logs_v2p7_iterations_and_non_ascii_html():
    run = read_run(SUSHANT / "logs_v2p7")
    [it] = run.iterations
    assert it.find("html") is not None and it.eval_names == ["test"]
    assert "🌟" in run.html(0) or "✅" in run.html(0)
    assert len(run.eval_metrics) == 23 and len(run.checkpoints) == 23
