"""torchrun with gloo on CPU, 3 processes: only rank 0 writes the run; a rank>0 logger
pickled and unpickled stays a non-writer; with ``all_ranks=True`` each rank writes its
own rank-tagged files of the same run, which the reader lists and reads."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")


def torchrun(run: Path, *job_args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=3",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            str(Path(__file__).with_name("torchrun_job.py")),
            str(run),
            *job_args,
        ],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    return out


def test_only_rank_0_writes_even_through_pickled_loggers(tmp_path):
    run = tmp_path / "run"
    out = torchrun(run)
    assert out.returncode == 0, out.stderr.decode()[-3000:]
    lines = sorted(x for x in out.stdout.decode().splitlines() if x.startswith("rank "))
    assert lines == ["rank 0 True True", "rank 1 False False", "rank 2 False False"]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows == [{"step": s, "rank_value": float(s)} for s in range(3)]
    for step in range(3):
        (record,) = [
            json.loads(x)
            for x in (run / f"train_iteration_{step:06d}_rollout_summaries.jsonl").read_text().splitlines()
        ]
        assert record["total_reward"] == float(step)
    assert not any("-2" in p.name for p in run.iterdir())


def test_all_ranks_write_their_own_rank_tagged_files_of_one_run(tmp_path):
    from rllog import read_run

    run = tmp_path / "run"
    out = torchrun(run, "all_ranks")
    lines = sorted(x for x in out.stdout.decode().splitlines() if x.startswith("rank "))
    assert lines == ["rank 0 True True", "rank 1 True True", "rank 2 True True"]
    names = {p.name for p in run.iterdir()}
    assert {"metrics.jsonl", "metrics.rank1.jsonl", "metrics.rank2.jsonl"} <= names
    assert {"checkpoints.jsonl", "checkpoints.rank1.jsonl", "checkpoints.rank2.jsonl"} <= names
    assert {"config.json", "config.rank1.json", "config.rank2.json"} <= names
    assert read_run(run).ranks == [0, 1, 2]
    for rank in range(3):
        r = read_run(run, rank=rank)
        assert r.rows == [
            *({"step": s, "rank_value": float(s + rank)} for s in range(3)),
            {"step": 3, "from_copy": float(rank)},  # the rank's pickled copy appends to its file
        ]
        assert r.config == {"rank": rank}
        (ckpt,) = r.checkpoints
        at = ckpt.pop("metrics_at")
        assert ckpt == {"name": "000003", "batch": 3}
        # where the rank's own file stood: after the logger's 3 rows (the pickled copy's row
        # may reach the file before or after the record)
        lines = [json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in r.rows]
        assert at["bytes"] in (len(b"".join(lines[:3])), len(b"".join(lines)))
    # every rank's rollout summaries of an iteration are kept, rank-tagged (no race)
    for step in range(3):
        for rank in range(3):
            tag = f".rank{rank}" if rank else ""
            (record,) = [
                json.loads(x)
                for x in (run / f"train_iteration_{step:06d}{tag}_rollout_summaries.jsonl")
                .read_text()
                .splitlines()
            ]
            assert record["total_reward"] == float(step + rank)
    its = read_run(run).iterations
    assert [len(it.artifacts) for it in its] == [3, 3, 3]
    assert read_run(run).rollout_summaries(1)[0]["total_reward"] == 1.0  # rank 0's is the run's
