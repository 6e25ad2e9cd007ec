"""The doctor finds planted PPO/GRPO stability problems (TRL logging docs, verl, OpenRLHF names), nothing on healthy runs, and runs on real data."""

from __future__ import annotations

import json
import math

import msgspec
import pandas as pd
import pytest
from _doctor_runs import healthy_rows, planted, real_runs, write_run
from click.testing import CliRunner
from realdata import needs_full

from rllog._format.rows import nonfinite_cells
from rllog.cli import main
from rllog.doctor import Thresholds, check_run, diagnose, thresholds_from_file


def _only(findings, check):
    hits = [f for f in findings if f.check == check]
    assert hits, f"no {check} finding in {[f.message for f in findings]}"
    return hits


def test_healthy_run_has_no_findings(tmp_path):
    assert check_run(write_run(tmp_path / "ok", healthy_rows())) == []
    for seed in range(1, 6):  # other noise draws too: persistence keeps single noisy steps quiet
        assert diagnose(pd.DataFrame(healthy_rows(seed=seed))) == []


def test_ratio_far_from_one_for_five_steps(tmp_path):
    (f,) = _only(check_run(write_run(tmp_path / "r", planted("ratio"))), "ratio")
    assert (f.metric, f.severity, f.steps, f.value) == ("val/ratio", "error", [(20, 24)], 3.0)
    assert "> 2" in f.threshold and "learning rate" in f.advice
    assert "val/ratio" in f.message and "20-24" in f.message


def test_ratio_threshold_and_persistence_are_configurable(tmp_path):
    run = write_run(tmp_path / "r", planted("ratio"))
    assert not [f for f in check_run(run, Thresholds(ratio_high=5.0)) if f.check == "ratio"]
    assert not [f for f in check_run(run, Thresholds().with_overrides(["persist=6"])) if f.check == "ratio"]
    rows = planted("ratio")
    rows[22]["val/ratio"] = 1.0  # 3.0 on 2 + 2 steps: no run of 3
    assert not [f for f in diagnose(pd.DataFrame(rows)) if f.check == "ratio"]


def test_entropy_collapse(tmp_path):
    (f,) = _only(check_run(write_run(tmp_path / "e", planted("entropy"))), "entropy_collapse")
    assert f.metric == "entropy" and f.severity == "warning"
    assert f.value == pytest.approx(0.01)
    assert f.steps[-1][1] == 39 and 22 <= f.steps[0][0] <= 26  # from when it fell under 0.05


def test_nan_value_loss_is_an_error(tmp_path):
    findings = check_run(write_run(tmp_path / "n", planted("value_nan")))
    (f,) = _only(findings, "nonfinite")
    assert (f.metric, f.severity, f.steps) == ("loss/value_avg", "error", [(30, 39)])
    assert findings[0] is f  # errors first


def test_value_loss_spike(tmp_path):
    (f,) = _only(check_run(write_run(tmp_path / "s", planted("value_spike"))), "value_loss_spike")
    assert (f.metric, f.steps, f.value) == ("loss/value_avg", [(25, 25)], 40.0)


def test_clipped_completions(tmp_path):
    (f,) = _only(check_run(write_run(tmp_path / "c", planted("clipped"))), "clipped_completions")
    assert (f.metric, f.steps, f.value) == ("completions/clipped_ratio", [(20, 39)], 0.9)
    assert "max_completion_length" in f.advice


def test_kl_negative(tmp_path):
    (f,) = _only(check_run(write_run(tmp_path / "k", planted("kl_negative"))), "kl_negative")
    assert (f.metric, f.severity, f.steps, f.value) == ("kl", "error", [(20, 39)], -0.2)


def test_more_planted_signals():
    base = healthy_rows()
    df = pd.DataFrame(base)
    df.loc[10:, "policy/clipfrac_avg"] = 0.5
    df.loc[10:15, "policy/approxkl_avg"] = 0.4
    df.loc[30:, "optim/entropy"] = 5.0
    df.loc[5:9, "optim/kl_sample_train_v2"] = 0.05
    df["train/kl"] = df["kl"] * 100  # a TensorBoard-imported name
    df["eval/kl"] = -1.0  # eval keys: NaN/Inf only
    found = {(f.check, f.metric) for f in diagnose(df)}
    assert found == {
        ("clip_fraction", "policy/clipfrac_avg"),
        ("approx_kl", "policy/approxkl_avg"),
        ("entropy_rise", "optim/entropy"),
        ("kl_large", "optim/kl_sample_train_v2"),
        ("kl_large", "train/kl"),
    }


def test_reward_flat_while_kl_grows():
    rows = healthy_rows(60)
    for i, row in enumerate(rows):
        row["reward"] = 0.5 + 0.01 * math.sin(i)
        row["kl"] = 0.01 + 0.01 * i
        for k in (
            "objective/kl",
            "objective/rlhf_reward",
            "env/all/reward/total",
            "optim/kl_sample_train_v1",
            "optim/kl_sample_train_v2",
        ):
            del row[k]
    (f,) = _only(diagnose(pd.DataFrame(rows)), "reward_flat_kl_grows")
    assert f.metric == "kl" and "reward" in f.message and f.steps == [(45, 59)]


def test_inf_found_without_nonfinite_map_and_missing_keys_are_not_nan():
    df = pd.DataFrame(healthy_rows())
    df.loc[7, "loss/policy_avg"] = math.inf
    df.loc[3:9, "reward"] = math.nan  # could be missing keys: not reported without the map
    (f,) = diagnose(df)
    assert (f.check, f.metric, f.steps) == ("nonfinite", "loss/policy_avg", [(7, 7)])
    assert f.to_dict()["value"] == "Infinity" and json.dumps(f.to_dict())  # strict JSON
    assert f.message.startswith("loss/policy_avg is Infinity at step(s) 7")
    df.loc[8, "loss/policy_avg"] = -math.inf
    (f,) = diagnose(df, nonfinite={"loss/policy_avg": [2]})
    assert (
        f.to_dict()["value"] == "Infinity"
        and f.steps == [(2, 2), (7, 8)]
        and "is NaN/Infinity/-Infinity" in f.message
    )
    df.loc[7, "loss/policy_avg"] = 1.0
    assert diagnose(df)[0].to_dict()["value"] == "-Infinity"


def test_verl_and_openrlhf_keys_are_checked():
    n = 30
    verl = pd.DataFrame(
        {
            "step": range(n),
            "actor/ppo_kl": [0.5] * n,  # approx KL between consecutive policies, far too high
            "actor/pg_clipfrac": [0.6] * n,
            "actor/entropy": [1.0] * 10 + [0.001] * (n - 10),
            "critic/vf_loss": [1.0] * 20 + [50.0] + [1.0] * (n - 21),
            "response_length/clip_ratio": [0.9] * n,
            "critic/score/mean": [0.5] * n,
        }
    )
    found = {(f.check, f.metric) for f in diagnose(verl)}
    assert found >= {
        ("approx_kl", "actor/ppo_kl"),
        ("clip_fraction", "actor/pg_clipfrac"),
        ("entropy_collapse", "actor/entropy"),
        ("value_loss_spike", "critic/vf_loss"),
        ("clipped_completions", "response_length/clip_ratio"),
    }
    openrlhf = pd.DataFrame(
        {  # wandb names carry train/, stripped
            "step": range(n),
            "train/ppo_kl": [0.3] * n,
            "train/ppo_clip_ratio": [0.5] * n,
            "train/kl": [-0.2] * n,
            "train/policy_entropy": [2.0] * 10 + [9.0] * (n - 10),
            "train/critic_loss": [1.0] * n,
        }
    )
    found = {(f.check, f.metric) for f in diagnose(openrlhf)}
    assert found >= {
        ("approx_kl", "train/ppo_kl"),
        ("clip_fraction", "train/ppo_clip_ratio"),
        ("kl_negative", "train/kl"),
        ("entropy_rise", "train/policy_entropy"),
    }


def test_diagnose_takes_a_run_or_says_what_it_takes(tmp_path):
    from rllog import read_run

    path = write_run(tmp_path / "bad", planted("ratio"))
    assert [f.check for f in diagnose(read_run(path))] == [f.check for f in check_run(path)] == ["ratio"]
    with pytest.raises(TypeError, match="check_run"):
        diagnose(str(path))


def test_nonfinite_cells_counts_only_logged_values():
    rows = [{"step": 0, "a": 1.0}, {"step": 1, "a": math.nan, "b": None}, {"step": 2, "c": -math.inf}]
    assert nonfinite_cells(rows) == {"a": [1], "c": [2]}


def test_unknown_metrics_only_get_an_info():
    (f,) = diagnose(pd.DataFrame({"step": range(5), "my/thing": range(5), "s": list("abcde")}))
    assert (f.check, f.severity) == ("no_metrics", "info")


def test_thresholds_from_files_and_bad_values(tmp_path):
    (tmp_path / "t.toml").write_text("ratio_high = 4.0\npersist = 2\n")
    (tmp_path / "t.json").write_text('{"entropy_floor": 0.1}')
    assert thresholds_from_file(tmp_path / "t.toml") == Thresholds(ratio_high=4.0, persist=2)
    assert thresholds_from_file(tmp_path / "t.json").entropy_floor == 0.1
    (tmp_path / "bad.json").write_text('{"ratio_hgh": 3}')
    with pytest.raises(ValueError, match="ratio_hgh"):
        thresholds_from_file(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="valid names"):
        Thresholds().with_overrides({"nope": 1})
    with pytest.raises(ValueError, match="name=value"):
        Thresholds().with_overrides(["ratio_high"])
    with pytest.raises(ValueError, match="persist"):
        Thresholds(persist=0)


def test_cli_exit_codes_and_json(tmp_path):
    ok = write_run(tmp_path / "ok", healthy_rows())
    bad = write_run(tmp_path / "bad", planted("ratio"))
    cli = CliRunner()
    res = cli.invoke(main, ["doctor", str(ok)])
    assert res.exit_code == 0 and "no problems" in res.output
    res = cli.invoke(main, ["doctor", str(bad), "--json"])
    assert res.exit_code == 1
    out = json.loads(res.output)
    assert out["ok"] is False and out["findings"][0]["metric"] == "val/ratio"
    assert out["findings"][0]["steps"] == [[20, 24]] and out["findings"][0]["value"] == 3.0
    assert cli.invoke(main, ["doctor", str(bad), "--set", "ratio_high=3.5"]).exit_code == 0
    assert cli.invoke(main, ["doctor", str(bad), "--fail-on", "never"]).exit_code == 0
    (tmp_path / "t.toml").write_text("ratio_high = 3.5\n")
    assert cli.invoke(main, ["doctor", str(bad), "--config", str(tmp_path / "t.toml")]).exit_code == 0
    res = cli.invoke(main, ["doctor", str(bad)])
    assert res.exit_code == 1 and "ERROR" in res.output and "try:" in res.output
    assert cli.invoke(main, ["doctor", str(tmp_path / "missing")]).exit_code == 2
    assert not (tmp_path / "missing").exists()  # reading never creates a folder
    assert cli.invoke(main, ["doctor", str(bad), "--set", "nope=1"]).exit_code == 2
    res = cli.invoke(main, ["doctor", str(bad), "--set", "ratio_high=abc"])
    assert (
        res.exit_code == 2
        and "ratio_high must be a number, got 'abc'" in res.output
        and "msgspec" not in res.output
    )
    res = cli.invoke(main, ["doctor", "--list-thresholds"])
    assert res.exit_code == 0
    line = next(ln for ln in res.output.splitlines() if ln.startswith("ratio_high"))
    assert "2.0" in line and "val/ratio" in line  # default and a one-line description
    assert len(res.output.splitlines()) >= len(msgspec.structs.fields(Thresholds))
    assert "seed 0" not in cli.invoke(main, ["doctor", "--help"]).output


def test_doctor_json_keeps_infinity(tmp_path):
    rows = healthy_rows()
    rows[5]["loss/value_avg"] = math.inf
    run = tmp_path / "inf"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")  # json writes Infinity
    out = json.loads(CliRunner().invoke(main, ["doctor", str(run), "--json"]).output)
    (f,) = [f for f in out["findings"] if f["check"] == "nonfinite"]
    assert f["value"] == "Infinity" and f["steps"] == [[5, 5]]


@needs_full
def test_real_runs(tmp_path):
    runs = real_runs(tmp_path)
    assert len(runs) >= 24
    results = {name: check_run(path) for name, path in runs.items()}
    by = lambda part: next(v for k, v in results.items() if part in k)
    # checked by hand: every completion is truncated in the late rows (SOURCES.md)
    clipped = _only(by("Rusheel86"), "clipped_completions")[0]
    assert clipped.metric == "completions/clipped_ratio" and clipped.value == 1.0
    # arithmetic RL: reward saturates at 1.0 by step 7 and optim/entropy falls 0.77 -> 1e-4
    coll = _only(by("arithmetic_metrics"), "entropy_collapse")[0]
    assert coll.metric == "optim/entropy" and coll.steps[0][0] == 4 and coll.value < 1e-3
    # the bare NaN token in grad_norm is found; the author's later null edit is not a NaN
    nan = _only(by("gauri0508__med-record/"), "nonfinite")[0]
    assert (nan.metric, nan.severity, nan.steps) == ("grad_norm", "error", [(138, 138)])
    assert not [f for f in by("med-record@f04ea59") if f.check == "nonfinite"]
    # reward-only GRPO with sampler/trainer KL 0.04-0.58 on steps 2-7 (others stay near 1e-3)
    kl = [
        f for f in by("exp4_reward_only") if f.check == "kl_large" and f.metric == "optim/kl_sample_train_v2"
    ]
    assert kl and kl[0].steps[0] == (2, 7) and kl[0].value == pytest.approx(0.579151, abs=1e-6)
    # the TensorBoard events of the stage-2 run agree with its trainer_state.json: per-token kl ~1-1.6
    tb = [f.metric for f in by("threestage/stage2_output/logs") if f.check == "kl_large"]
    assert tb == ["kl"] and [f.metric for f in by("checkpoint-160") if f.check == "kl_large"] == ["kl"]
    # healthy real runs stay quiet (no noise from single-step excursions)
    for quiet in ("logs_v2p7", "gptoss-20b-v2", "qwen3-30b-instruct", "checkpoint-400"):
        assert [f for f in by(quiet) if f.severity != "info"] == [], quiet


def test_ppo_val_ratio_var_nan_is_no_finding_but_inf_is(tmp_path):
    """TRL's PPO logs val/ratio_var = NaN with one minibatch (rllog.stats.ppo_stats gives the same)."""
    from rllog import RunLogger, stats
    from rllog.doctor import check_run

    with RunLogger(tmp_path / "ppo", code_diff=False, index=False) as lg:
        for step in range(6):
            row = stats.ppo_stats(
                kl=[[0.01, 0.02]],
                logprobs=[[-1.0, -2.0]],
                non_score_reward=[[0.0, 0.0]],
                scores=[1.0],
                approxkl=[0.001],
                clipfrac=[0.05],
                ratio=[1.0],
            )
            assert math.isnan(row["val/ratio_var"])
            if step == 5:
                row["loss/value_avg"] = float("nan")
            lg.log_metrics(step, row)
    findings = check_run(tmp_path / "ppo")
    assert [f.metric for f in findings if f.check == "nonfinite"] == ["loss/value_avg"]
    with RunLogger(tmp_path / "ppo", code_diff=False, index=False) as lg:
        lg.log_metrics(6, {"val/ratio_var": float("inf")})
    assert "val/ratio_var" in [f.metric for f in check_run(tmp_path / "ppo") if f.check == "nonfinite"]


def test_doctor_of_a_folder_without_metrics_says_so_and_exits_2(tmp_path):
    # `rllog doctor runs/` (the parent folder) or a TensorBoard log folder said "only NaN/Inf
    # were checked" and exited 0, so `rllog doctor $RUN --fail-on error` in a script passed
    # on a wrong path; exit code 2 is documented for "the run could not be read"
    (tmp_path / "runs" / "exp1").mkdir(parents=True)
    write_run(tmp_path / "runs" / "exp1", healthy_rows())
    tb = tmp_path / "tb"
    tb.mkdir()
    (tb / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    for folder in (tmp_path / "runs", tb):
        res = CliRunner().invoke(main, ["doctor", str(folder)])
        assert res.exit_code == 2, res.output
        assert f"no metrics.jsonl in {folder}" in res.output and "nothing was checked" in res.output
    assert "rllog import tensorboard" in res.output
    with pytest.raises(FileNotFoundError, match="no metrics.jsonl"):
        check_run(tmp_path / "runs")
