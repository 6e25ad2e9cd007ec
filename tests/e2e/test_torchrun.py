"""torchrun with gloo on CPU, 3 processes: only rank 0 writes the run; a rank>0 logger
pickled and unpickled stays a non-writer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")


def test_only_rank_0_writes_even_through_pickled_loggers(tmp_path):
    run = tmp_path / "run"
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
        ],
        capture_output=True,
        env=env,
        timeout=120,
    )
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
