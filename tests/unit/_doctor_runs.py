"""Synthetic runs (healthy and with planted problems) and real-data run folders for the doctor,
index and plot tests."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

from realdata import REALDATA  # ../shared/realdata, else the copy in tests/data


def write_run(folder: Path, rows: list[dict], config=None, checkpoints=(), files=()) -> Path:
    """A run folder with metrics.jsonl written by Python's json (NaN/Infinity tokens kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    if checkpoints:
        (folder / "checkpoints.jsonl").write_text("".join(json.dumps(r) + "\n" for r in checkpoints))
    for name in files:
        (folder / name).write_text(f"<html><body>{name}</body></html>")
    return folder


def healthy_rows(n: int = 40, seed: int = 0) -> list[dict]:
    """A run that learns: reward up, entropy slowly down, ratio ~1, small KL and clip fractions."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        f = i / (n - 1)
        noise = lambda s: rng.gauss(0, s)
        reward = 0.2 + 0.6 * f + noise(0.03)
        rows.append(
            {
                "step": i,
                "progress/batch": i,
                # PPO (TRL PPOTrainer)
                "objective/kl": 2.0 + 3.0 * f + noise(0.2),
                "objective/entropy": 60.0 - 10 * f + noise(1.0),
                "objective/rlhf_reward": reward,
                "policy/approxkl_avg": 0.01 + abs(noise(0.003)),
                "policy/clipfrac_avg": 0.08 + abs(noise(0.02)),
                "loss/value_avg": 0.4 + abs(noise(0.05)),
                "loss/policy_avg": noise(0.02),
                "val/ratio": 1.0 + noise(0.02),
                # GRPO (TRL GRPOTrainer)
                "reward": reward,
                "kl": 0.01 + 0.02 * f + abs(noise(0.002)),
                "entropy": 1.2 - 0.3 * f + noise(0.02),
                "clip_ratio/region_mean": 0.02 + abs(noise(0.01)),
                "completions/clipped_ratio": 0.05 + abs(noise(0.02)),
                # tinker-cookbook
                "env/all/reward/total": reward,
                "optim/entropy": 0.8 - 0.2 * f + noise(0.02),
                "optim/kl_sample_train_v1": 0.001 + noise(0.0003),
                "optim/kl_sample_train_v2": 0.001 + abs(noise(0.0003)),
                "optim/lr": 4e-5,
            }
        )
    return rows


def planted(problem: str, n: int = 40) -> list[dict]:
    """``healthy_rows`` with one problem planted from step 20 on (ratio for 5 steps; a
    value-loss spike at step 25; reward flat and KL growing over the whole run)."""
    rows = healthy_rows(n)
    for i, row in enumerate(rows):
        if problem == "ratio" and 20 <= i < 25:
            row["val/ratio"] = 3.0
        elif problem == "entropy" and i >= 20:
            row["entropy"] = max(0.01, 1.0 * (0.5 ** (i - 19)))
        elif problem == "value_nan" and i >= 30:
            row["loss/value_avg"] = math.nan
        elif problem == "clipped" and i >= 20:
            row["completions/clipped_ratio"] = 0.9
        elif problem == "kl_negative" and i >= 20:
            row["kl"] = -0.2
        elif problem == "value_spike" and i == 25:
            row["loss/value_avg"] = 40.0
        elif problem == "clipfrac" and i >= 20:
            row["policy/clipfrac_avg"] = 0.6
        elif problem == "approxkl" and i >= 20:
            row["policy/approxkl_avg"] = 0.5
        elif problem == "kl_large" and i >= 20:
            row["kl"] = 3.0
        elif problem == "entropy_rise" and i >= 20:
            row["entropy"] = 5.0
        elif problem == "reward_flat_kl_grows":
            f = i / (n - 1)
            for key in ("reward", "objective/rlhf_reward", "env/all/reward/total"):
                row[key] = 0.5 + 0.001 * (i % 3)
            row["objective/kl"] = 2.0 + 20.0 * f  # the first KL key of a row: the one the trend rule reads
        elif problem == "inf_reward" and i == 33:
            row["reward"] = math.inf
    return rows


def real_runs(tmp_path: Path) -> dict[str, Path]:
    """Every real metrics file as a run folder under ``tmp_path`` (originals are only read).

    tinker/extra JSONL files are copied as metrics.jsonl (with their sibling config.json,
    checkpoints.jsonl and HTML reports); TRL trainer_state.json files and TensorBoard event
    folders are imported with rllog's importers.
    """
    runs: dict[str, Path] = {}
    for i, src in enumerate(sorted(REALDATA.rglob("*.jsonl"))):
        if "checkpoints" in src.name:
            continue
        dst = tmp_path / f"run{i:02d}"
        dst.mkdir(parents=True)
        shutil.copyfile(src, dst / "metrics.jsonl")
        if src.name == "metrics.jsonl":
            for sib in src.parent.iterdir():
                if sib.name in ("config.json", "checkpoints.jsonl") or sib.suffix == ".html":
                    shutil.copyfile(sib, dst / sib.name)
        elif (ck := src.with_name(src.name.replace("metrics", "checkpoints"))).exists():
            shutil.copyfile(ck, dst / "checkpoints.jsonl")
        runs[str(src.relative_to(REALDATA))] = dst
    from rllog.importers import import_tensorboard, import_trl

    for i, src in enumerate(sorted(REALDATA.rglob("trainer_state.json"))):
        import_trl(src, tmp_path / f"trl{i:02d}")
        runs[str(src.relative_to(REALDATA))] = tmp_path / f"trl{i:02d}"
    for i, events in enumerate(sorted({p.parent for p in REALDATA.rglob("events.out.tfevents.*")})):
        import_tensorboard(events, tmp_path / f"tb{i:02d}")
        runs[str(events.relative_to(REALDATA))] = tmp_path / f"tb{i:02d}"
    return runs
