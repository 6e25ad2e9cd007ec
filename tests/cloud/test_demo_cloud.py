"""The demo run on gs:// (GCS emulator), s3:// (moto) and memory:// reads back identical
to a local run of the same seed: metrics, checkpoints, config, every iteration's
artifacts, rollout summaries and logtree JSON; and it resumes from the bucket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rllog import read_rollouts, read_run
from rllog._demo import DemoConfig, run_demo
from rllog.storage import open_storage

N = 12


def without_times(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def strip_volatile(node: Any) -> Any:
    """A logtree JSON tree without what differs between two runs of one seed: times, paths."""
    if isinstance(node, dict):
        return {k: strip_volatile(v) for k, v in node.items() if k not in ("started_at", "path")}
    if isinstance(node, list):
        return [strip_volatile(v) for v in node]
    if isinstance(node, str) and ("ms" in node or " s" in node) and any(c.isdigit() for c in node):
        return "<time>"  # durations shown in the report
    return node


def final_weights(npz: bytes) -> str:
    import hashlib
    import io

    import numpy as np

    with np.load(io.BytesIO(npz)) as data:
        return hashlib.sha256(data["w"].tobytes()).hexdigest()


def snapshot(url: str, options: dict[str, Any]) -> dict[str, Any]:
    run = read_run(open_storage(url, **options))
    storage = run.storage
    artifacts = sorted(
        (it.iteration, a.kind, a.eval_name or "") for it in run.iterations for a in it.artifacts
    )
    config = dict(run.config)
    config.pop("log_path")
    return {
        "rows": without_times(run.rows),
        # metrics_at: where metrics.jsonl stood, in bytes (they move with the wall-clock values in the rows)
        "checkpoints": [{k: v for k, v in c.items() if k != "metrics_at"} for c in run.checkpoints],
        "config": config,
        "artifacts": artifacts,
        "rollouts": [r for r in read_rollouts(storage)],
        "logtree": [strip_volatile(run.logtree(i)) for i in range(N)],
        "eval_logtree": strip_volatile(run.logtree(10, "test")),
        "weights": final_weights(storage.read("checkpoints/final.npz")),
        "files": sorted(n for n in storage.list() if not n.startswith(".") and "/.parts/" not in n),
    }


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("local") / "run"
    run_demo(DemoConfig(log_path=str(path), n_batches=N, save_every=4), quiet=True)
    return snapshot(str(path), {})


def test_demo_on_a_bucket_reads_back_like_a_local_run(cloud_url, local_reference, tmp_path: Path) -> None:
    url, options = cloud_url
    if url.startswith("memory://"):
        run_demo(DemoConfig(log_path=url, n_batches=N, save_every=4), quiet=True)
    else:
        run_demo(DemoConfig(log_path=url, n_batches=N, save_every=4), quiet=True, **options)
    got = snapshot(url, options)
    assert got["rows"] == local_reference["rows"]
    assert [r["step"] for r in got["rows"]] == list(range(N))
    assert got["checkpoints"] == local_reference["checkpoints"]
    assert got["config"] == local_reference["config"]
    assert got["artifacts"] == local_reference["artifacts"] and len(got["artifacts"]) >= 3 * N
    assert (
        got["rollouts"] == local_reference["rollouts"] and len(got["rollouts"]) == N * 16 * 8 + 3 * 400
    )  # evaluations at 0, 10 and the last
    assert got["logtree"] == local_reference["logtree"]
    assert got["eval_logtree"] == local_reference["eval_logtree"]
    assert got["weights"] == local_reference["weights"]  # the checkpointed policy, bit for bit
    assert set(local_reference["files"]) <= set(got["files"]) | {"code.diff"}, (
        local_reference["files"],
        got["files"],
    )
    # nothing was written to a local folder named like the URL
    assert not Path(url.split("://", 1)[1]).exists() and not (Path.cwd() / url.split("://", 1)[1]).exists()


def test_demo_resumes_from_a_bucket(cloud_url) -> None:
    url, options = cloud_url
    run_demo(
        DemoConfig(log_path=url, n_batches=6, save_every=4), quiet=True, **options
    )  # checkpoints at 4, final 6
    storage = open_storage(url, **options)
    records = [json.loads(line) for line in storage.read("checkpoints.jsonl").splitlines()]
    storage.write("checkpoints.jsonl", json.dumps(records[0]).encode() + b"\n")  # as if killed after batch 5
    storage.close()
    run_demo(DemoConfig(log_path=url, n_batches=8, save_every=4), resume=True, quiet=True, **options)
    run = read_run(open_storage(url, **options))
    assert [r["step"] for r in run.rows] == list(range(8))
    assert [c["batch"] for c in run.checkpoints] == [4, 8]
    assert [r["step"] for r in run.superseded_rows] == [4, 5]
