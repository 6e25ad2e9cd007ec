"""The writer's own resume and torn-line code on the real tinker runs in shared/realdata."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from realdata import REALDATA, needs_full  # ../shared/realdata, else the copy in tests/data

import rllog
from rllog import RunLogger, load_config


def tinker_runs() -> list[tuple[str, Path, Path | None, Path | None]]:
    """(id, metrics, checkpoints or None, config or None) for every tinker metrics file."""
    out = []
    for metrics in sorted((REALDATA / "tinker").rglob("*metrics.jsonl")):
        prefix = metrics.name[: -len("metrics.jsonl")]
        ckpt = metrics.with_name(prefix + "checkpoints.jsonl")
        config = metrics.with_name(prefix + "config.json")
        out.append(
            (
                str(metrics.relative_to(REALDATA)),
                metrics,
                ckpt if ckpt.exists() else None,
                config if config.exists() else None,
            )
        )
    return out


RUNS = tinker_runs()


@needs_full
def test_all_tinker_files_are_covered() -> None:
    assert len(RUNS) == 15  # 1 + 4 + 5 + 2 + 3 metrics files (SOURCES.md)


@pytest.mark.parametrize("case", RUNS, ids=[r[0] for r in RUNS])
def test_resume_on_real_run(tmp_path: Path, case: tuple) -> None:
    _, metrics, ckpt, config = case
    shutil.copyfile(metrics, tmp_path / "metrics.jsonl")
    if ckpt:
        shutil.copyfile(ckpt, tmp_path / "checkpoints.jsonl")
    if config:
        shutil.copyfile(config, tmp_path / "config.json")
    lines = metrics.read_bytes().splitlines(keepends=True)
    records = [json.loads(line) for line in ckpt.read_text().splitlines()] if ckpt else []
    with_batch = [r for r in records if isinstance(r.get("batch"), int)]
    if any(r.get("state_path") for r in records):  # tinker's rule: the last record with state_path
        with_batch = [r for r in with_batch if r.get("state_path")]
    point = with_batch[-1]["batch"] if with_batch else 0
    if with_batch and with_batch[-1].get("epoch"):  # batch counts within the epoch: tinker's arithmetic
        rows = [json.loads(line) for line in metrics.read_bytes().splitlines()]
        per_epoch = min(r["step"] for r in rows if r.get("epoch") == 1)
        point = with_batch[-1]["epoch"] * per_epoch + with_batch[-1]["batch"]

    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        if with_batch:
            assert logger.resume_state.record == with_batch[-1]
            assert logger.resume_state.batch == with_batch[-1]["batch"]
        else:
            assert logger.resume_state is None
        kept_steps = [
            json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_bytes().splitlines()
        ]
        logger.log_metrics(point, {"resumed": True})

    keep = [line for line in lines if json.loads(line)["step"] < point]
    moved = [line for line in lines if json.loads(line)["step"] >= point]
    assert all(s < point for s in kept_steps) and len(kept_steps) == len(keep)
    after = (tmp_path / "metrics.jsonl").read_bytes()
    assert after == b"".join(keep) + f'{{"step":{point},"resumed":true}}\n'.encode()
    side = tmp_path / "metrics.superseded.jsonl"
    assert (side.read_bytes() if side.exists() else b"") == b"".join(moved)  # byte for byte, in order
    if config:
        assert load_config(tmp_path) == json.loads(config.read_text())


def test_restarts_appended_in_one_file_resume_from_the_last_record(tmp_path: Path) -> None:
    """astOwOlfo: 21 checkpoint rows from 15 sessions, the last at batch 1; steps run 0,0,0,0,1,0.

    The step-1 row is moved aside; the five step-0 rows of earlier sessions stay (the
    reader resolves them: the latest segment wins)."""
    src = REALDATA / "tinker/astOwOlfo__tinker-cookbook-reward-hacking/tmp/tinker-runs/bash_codeforces"
    for name in ("metrics.jsonl", "checkpoints.jsonl", "config.json"):
        shutil.copyfile(src / name, tmp_path / name)
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert logger.resume_state.name == "000001" and logger.resume_state.batch == 1
        assert logger.resume_state.state_path is None and logger.resume_state.sampler_path.startswith(
            "tinker://30d5e6ac"
        )
    lines = (src / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    assert (tmp_path / "metrics.jsonl").read_bytes() == b"".join(lines[:4] + lines[5:])
    assert (tmp_path / "metrics.superseded.jsonl").read_bytes() == lines[4]


def test_sft_epoch_checkpoints_resume_by_epoch(tmp_path: Path) -> None:
    """bzz exp1: batch is the index within the epoch (10, 9, 0): the last record wins, and
    it stands at epoch 4 * 11 batches + 0 = 44, past every row: all 30 rows stand (the
    earlier rule compared batch 0 with the steps and moved 30 of 30)."""
    src = REALDATA / "tinker/bzz__tinker-cookbook/data/context_distillation/logs/exp1_off_policy"
    for name in ("checkpoints.jsonl", "metrics.jsonl"):
        shutil.copyfile(src / name, tmp_path / name)
    with RunLogger(tmp_path, resume=True, code_diff=False) as logger:
        assert (logger.resume_state.name, logger.resume_state.batch, logger.resume_state.epoch) == (
            "final",
            0,
            4,
        )
    assert (tmp_path / "metrics.jsonl").read_bytes() == (src / "metrics.jsonl").read_bytes()
    assert not (tmp_path / "metrics.superseded.jsonl").exists()
    assert len(rllog.read_run(tmp_path).metrics) == 30


def test_epoch_record_without_batches_per_epoch_moves_nothing_and_warns(tmp_path: Path) -> None:
    src = REALDATA / "tinker/bzz__tinker-cookbook/data/context_distillation/logs/exp1_off_policy"
    shutil.copyfile(src / "checkpoints.jsonl", tmp_path / "checkpoints.jsonl")
    rows = [json.loads(line) for line in (src / "metrics.jsonl").read_text().splitlines()]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "epoch"}) + "\n" for r in rows)
    )
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.warns(RuntimeWarning, match="cannot tell where checkpoint 'final'"):
        with RunLogger(tmp_path, resume=True, code_diff=False, index=False):
            pass
    assert (tmp_path / "metrics.jsonl").read_bytes() == before


def test_torn_copy_of_a_real_file_is_repaired(tmp_path: Path) -> None:
    src = REALDATA / "tinker/arvindcr4__tinker-rl-lab/experiments/results/arithmetic_metrics.jsonl"
    data = src.read_bytes()
    cut = len(data) - 300  # inside the last row
    (tmp_path / "metrics.jsonl").write_bytes(data[:cut])
    with pytest.warns(RuntimeWarning, match="torn last line"):
        with RunLogger(tmp_path, code_diff=False) as logger:
            logger.log_metrics(99, {"again": 1})
    lines = (tmp_path / "metrics.jsonl").read_bytes().splitlines()
    assert len(lines) == 100 and json.loads(lines[-1]) == {"step": 99, "again": 1}
    assert (tmp_path / "metrics.jsonl.torn").read_bytes() == data[data.rfind(b"\n", 0, cut) + 1 : cut] + b"\n"
