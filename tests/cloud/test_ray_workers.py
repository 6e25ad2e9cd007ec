"""Rollout workers in other processes, with a real engine: a learner holds a RunLogger
and 4 Ray actors (a local Ray cluster, ``ray.init(num_cpus=2)``, loopback only) each get
the pickled logger and write the logtree reports and rollout summaries of the iterations
they sample, into a local run and into a GCS-emulator run. The learner alone writes
metrics. (Under tests/cloud: marked cloud and slow by conftest.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from rllog import RunLogger, read_run

ray = pytest.importorskip("ray")

ITERATIONS = 8
WORKERS = 4


@pytest.fixture(scope="module")
def ray_cluster():
    import os
    import shutil
    import tempfile

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage report to the internet
    # Ray's unix sockets live under its temp dir and a socket path may not exceed 107 bytes:
    # a short folder directly under /tmp, not the (long) per-test temp root TMPDIR points at
    temp_dir = tempfile.mkdtemp(prefix="rllog-ray-", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp_dir,
    )
    yield
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


def _sampler_class() -> Any:
    @ray.remote(num_cpus=0)
    class Sampler:
        def __init__(self, logger: Any, worker: int) -> None:
            self.logger = logger  # unpickled here: a worker logger of the learner's run
            self.worker = worker

        def sample(self, iteration: int) -> float:
            from rllog import logtree

            groups = [
                [
                    {"steps": [{"ob_len": 10, "ac_len": 3 + t, "reward": float(t)}], "final_reward": 0.0}
                    for t in range(2)
                ]
                for _ in range(2)
            ]
            with self.logger.iteration(iteration):
                with logtree.group(0):
                    logtree.text(f"worker {self.worker} sampled iteration {iteration}")
            self.logger.log_rollouts(iteration, groups)
            self.logger.flush(durable=True)
            return sum(s["reward"] for g in groups for tr in g for s in tr["steps"]) / 4

        def close(self) -> list[str]:
            self.logger.close()
            return list(self.logger.warnings)

    return Sampler


@pytest.mark.parametrize("where", ["local", "gcs"])
def test_ray_actors_write_the_reports_of_the_iterations_they_sample(ray_cluster, where, tmp_path, request):
    if where == "local":
        url, options = str(tmp_path / "run"), {}
    else:
        server = request.getfixturevalue("gcs_server")
        url, options = f"gs://{server.new_bucket()}/runs/ray", server.storage_options()
    learner = RunLogger(url, code_diff=False, index=False, **options)
    Sampler = _sampler_class()
    samplers = [Sampler.remote(learner, w) for w in range(WORKERS)]
    for i in range(ITERATIONS):
        reward = ray.get(samplers[i % WORKERS].sample.remote(i))
        learner.log_metrics(i, {"progress/batch": i, "env/all/reward/total": reward})
    warnings = ray.get([s.close.remote() for s in samplers])
    learner.close()
    assert warnings == [[]] * WORKERS and learner.warnings == []

    run = read_run(url, **options)
    assert list(run.metrics["step"]) == list(range(ITERATIONS))
    assert list(run.metrics["env/all/reward/total"]) == [0.5] * ITERATIONS
    names = set(run.storage.list())
    for i in range(ITERATIONS):
        for suffix in (".html", "_logtree.json", "_rollout_summaries.jsonl"):
            assert f"train_iteration_{i:06d}{suffix}" in names
        page = run.storage.read(f"train_iteration_{i:06d}.html").decode()
        assert f"worker {i % WORKERS} sampled iteration {i}" in page
        records = [
            json.loads(x)
            for x in run.storage.read(f"train_iteration_{i:06d}_rollout_summaries.jsonl").splitlines()
        ]
        assert [(r["iteration"], r["group_idx"], r["traj_idx"]) for r in records] == [
            (i, g, t) for g in range(2) for t in range(2)
        ]
    assert not any("-2" in n for n in names)
