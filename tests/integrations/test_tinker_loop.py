"""tinker-cookbook's own RL loop (``tinker_cookbook.rl.train.main``) with rllog as its logger,
against fake tinker clients built here (no network, no tinker service), and tinker-cookbook's
own readers on an rllog run written with ``layout="tinker"``.

tinker-cookbook cannot be installed with its dependencies from PyPI; CI installs it with
``--no-deps`` (README's test command). Skipped when it is not importable.
Marked slow (conftest: tests/integrations)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

tinker_cookbook = pytest.importorskip(
    "tinker_cookbook",
    reason="tinker-cookbook is not installed (CI: pip install --no-deps tinker-cookbook tinker ...)",
)
import chz  # noqa: E402  # after the importorskip: tinker-cookbook's dependencies
import tinker  # noqa: E402
import torch  # noqa: E402
from tinker_cookbook.rl import train  # noqa: E402
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, RLDataset, RLDatasetBuilder, StepResult  # noqa: E402
from tinker_cookbook.stores.registry import RunRegistry  # noqa: E402
from tinker_cookbook.stores.storage import LocalStorage  # noqa: E402
from tinker_cookbook.stores.training_store import TrainingRunStore  # noqa: E402
from tinker_cookbook.utils import logtree as tlogtree  # noqa: E402

from rllog import RunLogger, read_run  # noqa: E402
from rllog import logtree as rlogtree  # noqa: E402
from rllog.integrations.tinker import use_rllog  # noqa: E402

GROUP = 3  # trajectories per group
BATCH = 2  # groups per batch
STEPS = 4


# -- a toy environment: one step, reward 1 when the first sampled token is even -----------


class ToyEnv(Env):
    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt

    async def initial_observation(self):
        return tinker.ModelInput.from_ints(self.prompt), []

    async def step(self, action, *, extra=None):
        reward = 1.0 if action[0] % 2 == 0 else 0.0
        with tlogtree.scope_header("Toy step"):
            tlogtree.log_text(f"prompt {self.prompt} -> action {list(action)} <b>reward</b> {reward}")
            tlogtree.table_from_dict({"reward": reward, "first": action[0]}, caption="Step")
        return StepResult(
            reward=reward,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=[],
            metrics={"even": reward},
        )


class ToyGroup(EnvGroupBuilder):
    def __init__(self, prompt: list[int]) -> None:
        self.prompt = prompt

    async def make_envs(self):
        return [ToyEnv(self.prompt) for _ in range(GROUP)]

    def logging_tags(self):
        return ["toy"]


class ToyDataset(RLDataset):
    def __init__(self, n: int, offset: int = 0) -> None:
        self.n, self.offset = n, offset

    def get_batch(self, index):
        return [ToyGroup([self.offset + index, g, 7]) for g in range(BATCH)]

    def __len__(self):
        return self.n


@chz.chz
class ToyDatasetBuilder(RLDatasetBuilder):
    n: int = STEPS

    async def __call__(self):
        return ToyDataset(self.n), ToyDataset(1, offset=100)


# -- fake tinker clients ---------------------------------------------------------------------


class FakeSampling:
    def __init__(self) -> None:
        self.calls = 0

    async def sample(self, prompt, num_samples, sampling_params, **kw):
        self.calls += 1
        tokens = [(self.calls * 7 + prompt.length) % 11, 3, 5][: sampling_params.max_tokens]
        seq = tinker.SampledSequence(
            stop_reason="stop",
            sequence_id=f"s{self.calls}",
            _tokens_list=tokens,
            _logprobs_list=[-0.5] * len(tokens),
        )
        return tinker.SampleResponse(sequences=[seq])


async def _value(v):
    return v


class FakeTraining:
    def __init__(self) -> None:
        self.steps = 0

    async def save_weights_and_get_sampling_client(self, **kw):
        return FakeSampling()

    def create_sampling_client(self, path, **kw):
        return SimpleNamespace(result=lambda: FakeSampling())

    def save_state(self, name, ttl_seconds=None):
        return _value(SimpleNamespace(path=f"tinker://fake/state/{name}"))

    def save_weights_for_sampler(self, name, ttl_seconds=None):
        return _value(SimpleNamespace(path=f"tinker://fake/sampler/{name}"))

    def forward_backward(self, data, loss_fn=None, loss_fn_config=None):
        outs = [
            {
                "logprobs": tinker.TensorData.from_torch(
                    torch.full((len(d.loss_fn_inputs["target_tokens"].data),), -0.5)
                )
            }
            for d in data
        ]
        return _value(tinker.ForwardBackwardOutput(loss_fn_output_type="x", loss_fn_outputs=outs, metrics={}))

    def optim_step(self, adam_params):
        self.steps += 1
        return _value(tinker.OptimStepResponse(metrics={"optim/fake_step": float(self.steps)}))


class FakeService:
    resumed_from: list[str] = []

    def __init__(self, **kw) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    async def create_lora_training_client(self, *a, **kw):
        return FakeTraining()

    async def create_training_client_from_state_with_optimizer(self, path, **kw):
        self.resumed_from.append(path)
        return FakeTraining()

    def create_rest_client(self):  # the renderer check on resume
        async def get_training_run_by_tinker_path(path):
            return SimpleNamespace(user_metadata={"renderer_name": "role_colon"})

        return SimpleNamespace(get_training_run_by_tinker_path=get_training_run_by_tinker_path)


class FakeTokenizer:
    def decode(self, tokens, **kw):
        return " ".join(f"t{t}" for t in tokens)


@pytest.fixture
def offline(monkeypatch):
    """tinker-cookbook's loop with nothing that reaches the network."""
    monkeypatch.setattr(train.tinker, "ServiceClient", FakeService)
    monkeypatch.setattr(train, "get_tokenizer", lambda name: FakeTokenizer())
    monkeypatch.setattr(train, "fetch_model_pricing", lambda name, **kw: None)


def _config(log_path, max_steps=None):
    return train.Config(
        learning_rate=1e-5,
        dataset_builder=ToyDatasetBuilder(),
        model_name="meta-llama/Llama-3.2-1B",
        renderer_name="role_colon",
        max_tokens=3,
        log_path=str(log_path),
        eval_every=2,
        save_every=2,
        max_steps=max_steps,
        recipe_name="rllog-test",
    )


def test_tinker_rl_loop_writes_an_rllog_run(tmp_path, offline):
    run_dir = tmp_path / "run"
    with use_rllog(code_diff=False):
        asyncio.run(train.main(_config(run_dir)))

    run = read_run(run_dir)
    assert not [w for w in run.warnings if "tinker" in w]
    metrics = run.metrics.set_index("step")
    assert list(range(STEPS)) == [s for s in metrics.index if s < STEPS]
    assert metrics.loc[STEPS - 1, "optim/fake_step"] == STEPS
    assert metrics.loc[0, "env/all/reward/total"] == pytest.approx(
        sum(r["total_reward"] for r in run.rollout_summaries(0)) / (GROUP * BATCH)
    )
    assert json.loads((run_dir / "config.json").read_text())["learning_rate"] == 1e-5

    # train rollouts: one record per trajectory, rewards as the env gave them
    for i in range(STEPS):
        recs = run.rollout_summaries(i)
        assert len(recs) == GROUP * BATCH
        assert {(r["group_idx"], r["traj_idx"]) for r in recs} == {
            (g, t) for g in range(BATCH) for t in range(GROUP)
        }
        assert all(r["steps"][0]["reward"] == r["total_reward"] in (0.0, 1.0) for r in recs)
        assert all(r["steps"][0]["metrics"] == {"even": r["total_reward"]} for r in recs)
        assert all(r["tags"] == ["toy"] and r["split"] == "train" for r in recs)
    # evaluations (every 2 steps and at the end) apart from train
    evals = {(it.iteration, n) for it in run.iterations for n in it.eval_names}
    assert evals == {(0, "test"), (2, "test"), (4, "test")}
    assert len(run.rollout_summaries(2, "test")) == GROUP * BATCH
    assert {r["split"] for r in run.rollout_summaries(2, "test")} == {"eval/test"}

    # the report of an iteration holds what the env logged through tinker-cookbook's logtree
    tree = run.logtree(1)
    assert tree["title"] == "RL Iteration 1"
    flat = json.dumps(tree)
    assert "prompt [1, 0, 7] -> action" in flat and "<b>reward</b>" in flat  # text, unescaped once
    page = (run_dir / "iteration_000001" / "train.html").read_text()
    assert "&lt;b&gt;reward&lt;/b&gt;" in page and "<b>reward</b>" not in page  # rllog's page, escaped
    assert "Toy step" in page and "lt-" in page

    # checkpoints through the store: state paths every 2 steps and the final one
    names = [c["name"] for c in run.checkpoints]
    assert names == ["000002", "000004", "final"]
    assert run.checkpoints[-1]["state_path"] == "tinker://fake/state/final"
    assert run.checkpoints[-1]["batch"] == STEPS

    # tinker-cookbook's own readers see the same run
    store = TrainingRunStore(LocalStorage(str(run_dir)))
    assert [it.iteration for it in store.list_iterations()] == list(range(STEPS + 1))
    assert store.read_rollouts(3) == run.rollout_summaries(3)
    assert store.read_logtree(1)["title"] == "RL Iteration 1"


def test_tinker_rl_loop_resumes_with_rllog(tmp_path, offline):
    run_dir = tmp_path / "run"
    with use_rllog(code_diff=False):
        asyncio.run(train.main(_config(run_dir, max_steps=3)))
    with use_rllog(code_diff=False):
        asyncio.run(train.main(_config(run_dir)))
    run = read_run(run_dir)
    steps = [s for s in run.metrics["step"] if s < STEPS]
    assert FakeService.resumed_from == [
        "tinker://fake/state/final"
    ]  # the first run's last checkpoint (batch 3)
    assert steps == [0, 1, 2, 3]  # no step twice
    assert set(run.superseded["step"]) == {3}  # the first run's rows at its end step, moved aside by rllog
    assert [(c["name"], c["batch"]) for c in run.checkpoints] == [
        ("000002", 2),
        ("final", 3),
        ("000004", 4),
        ("final", 4),
    ]


def test_tinker_readers_read_an_rllog_run_in_tinker_layout(tmp_path):
    run_dir = tmp_path / "runs" / "exp"
    with RunLogger(run_dir, layout="tinker", code_diff=False, index=False) as logger:
        for i in range(3):
            with logger.iteration(i):
                with rlogtree.group(0):
                    rlogtree.text(f"iteration {i}")
                    rlogtree.trajectory_stats(0, total_reward=float(i))
            logger.log_rollouts(i, [[{"steps": [{"ob_len": 4, "ac_len": 2, "reward": float(i)}]}]])
            logger.log_rollouts(
                i, [[{"steps": [{"ob_len": 4, "ac_len": 2, "reward": 1.0}]}]], eval_name="gsm8k"
            )
            logger.log_metrics(i, {"env/all/reward/total": float(i)})

    store = TrainingRunStore(LocalStorage(str(run_dir)))
    its = store.list_iterations()
    assert [(i.iteration, i.has_train_rollouts, i.has_train_logtree, i.eval_labels) for i in its] == [
        (i, True, True, ["gsm8k"]) for i in range(3)
    ]
    recs = store.read_rollouts(2)
    assert [r["total_reward"] for r in recs] == [2.0] and recs == read_run(run_dir).rollout_summaries(2)
    assert store.read_rollouts(1, base_name="eval_gsm8k")[0]["split"] == "eval/gsm8k"
    assert store.read_logtree(1)["title"] == "Train iteration 1"
    assert store.list_logtrees(0) == ["train"]
    assert [m["step"] for m in store.read_metrics()] == [0, 1, 2]
    info = RunRegistry([LocalStorage(str(tmp_path / "runs"))]).get_run("exp")
    assert info is not None and info.iteration_count == 3 and info.has_checkpoints is False
