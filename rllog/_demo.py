"""The demo RL run behind ``rllog demo``: a small but genuine training loop.

Task: prompts ``"What is a + b?"`` for digits a, b. The policy is a tabular softmax
"language model" over 11 tokens (digits 0-9 and EOS), conditioned on the prompt, the
position (up to ``max_tokens`` = 3) and the previous token: ``logits[a, b, pos, prev]``.
It starts as an imperfect "pretrained" model (a prior towards the right digit and a
weaker one towards off-by-one answers), so early accuracy is low but not zero.

Each iteration (batch) samples ``group_size`` answers for each of ``groups_per_batch``
prompts, a verifier grades them (1.0 for the right number, 0.1 for a well-formed wrong
number, 0 otherwise), advantages are group-relative (reward minus the group mean, as in
GRPO), and the policy takes ``num_substeps`` importance-weighted policy-gradient steps.
From the second substep on the sampler is one update behind the trainer, which is what
``kl_sample_train_v1/v2`` measure (tinker-cookbook's definitions: mean of
``logp_sample - logp_train`` and of half its square, over sampled tokens).

It logs the standard metric names, evaluates greedily on all 100 prompts every
``eval_every`` iterations (``test/env/all/*`` keys in the same row), and checkpoints its
real parameters (an ``.npz`` through Storage, so ``gs://`` works) every ``save_every``
iterations. ``--resume`` continues from the last checkpoint with the same RNG state.
"""

from __future__ import annotations

import io
import json
import sys
import time
from typing import Any

import chz
import numpy as np

from rllog import logtree
from rllog._format.records import TrajectorySummary
from rllog._run import RunLogger
from rllog._write.rollouts import build_rollout_summaries, summarize_rollouts

__all__ = ["DemoConfig", "run_demo"]

EOS = 10
PROMPT_TOKENS = 7  # "What is a + b?"
BOS = 11
VOCAB = 11


@chz.chz
class DemoConfig:
    """Hyperparameters of the demo run (written to config.json)."""

    log_path: str
    n_batches: int = 40
    groups_per_batch: int = 16
    group_size: int = 8
    learning_rate: float = 1.0
    lr_schedule: str = "linear"
    num_substeps: int = 2
    max_tokens: int = 3
    prior_strength: float = 2.6
    save_every: int = 5
    eval_every: int = 10
    num_groups_to_log: int = 4
    seed: int = 0
    iteration_delay: float = 0.0  # seconds of sleep per iteration, to watch a run live


def _answer_tokens(total: int) -> list[int]:
    return [int(c) for c in str(total)] + [EOS]


class Policy:
    """Tabular softmax policy ``logits[a, b, pos, prev, token]``."""

    def __init__(self, cfg: DemoConfig, rng: np.random.Generator) -> None:
        self.cfg = cfg
        w = rng.normal(0.0, 0.3, size=(10, 10, cfg.max_tokens, VOCAB + 1, VOCAB))
        for a in range(10):
            for b in range(10):
                for total, strength in (
                    (a + b, cfg.prior_strength),
                    (a + b + 1, cfg.prior_strength * 0.75),
                    (max(a + b - 1, 0), cfg.prior_strength * 0.6),
                ):
                    prev = BOS
                    for pos, tok in enumerate(_answer_tokens(total)[: cfg.max_tokens]):
                        w[a, b, pos, prev, tok] += strength
                        prev = tok
        self.w = w

    def probs(
        self, a: np.ndarray, b: np.ndarray, pos: int, prev: np.ndarray, w: np.ndarray | None = None
    ) -> np.ndarray:
        logits = (self.w if w is None else w)[a, b, pos, prev]
        logits = logits - logits.max(axis=-1, keepdims=True)
        p = np.exp(logits)
        return p / p.sum(axis=-1, keepdims=True)


def _sample(policy: Policy, a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n, T = len(a), policy.cfg.max_tokens
    tokens = np.full((n, T), -1)
    logp = np.zeros((n, T))
    ent = np.zeros((n, T))
    prevs = np.full((n, T), BOS)
    alive = np.ones(n, dtype=bool)
    prev = np.full(n, BOS)
    for pos in range(T):
        p = policy.probs(a, b, pos, prev)
        tok = (p.cumsum(-1) > rng.random((n, 1))).argmax(-1)
        tok = np.where(alive, tok, -1)
        idx = np.arange(n)
        logp[:, pos] = np.where(alive, np.log(p[idx, np.maximum(tok, 0)] + 1e-12), 0.0)
        ent[:, pos] = np.where(alive, -(p * np.log(p + 1e-12)).sum(-1), 0.0)
        tokens[:, pos] = tok
        prevs[:, pos] = prev
        prev = np.where(alive, tok, prev)
        alive &= tok != EOS
    return {"tokens": tokens, "logp": logp, "entropy": ent, "prev": prevs, "mask": tokens >= 0}


def _grade(
    a: np.ndarray, b: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Verifier: (reward, correct, well_formed, answer_text) per sample."""
    reward, correct, formed, texts = [], [], [], []
    for ai, bi, seq in zip(a, b, tokens, strict=True):
        toks = [int(t) for t in seq if t >= 0]
        digits = toks[:-1] if toks and toks[-1] == EOS else toks
        text = "".join(str(t) for t in digits if t != EOS)
        ok_form = (
            bool(toks)
            and toks[-1] == EOS
            and 1 <= len(digits) <= 2
            and EOS not in digits
            and not (len(digits) == 2 and digits[0] == 0)
        )
        ok = ok_form and int(text) == ai + bi
        reward.append(1.0 if ok else (0.1 if ok_form else 0.0))
        correct.append(float(ok))
        formed.append(float(ok_form))
        texts.append(text + ("" if ok_form else " <malformed>"))
    return np.array(reward), np.array(correct), np.array(formed), texts


def _log_groups(
    a: np.ndarray, b: np.ndarray, texts: list[str], reward: np.ndarray, ac_tokens: np.ndarray, group_size: int
) -> None:
    """Logtree content of a batch: one group per prompt, one scope per sampled answer."""
    for g in range(len(a) // group_size):
        rows = range(g * group_size, (g + 1) * group_size)
        with logtree.group(g):
            for t, k in enumerate(rows):
                if logtree.is_active():
                    with logtree.scope(f"Trajectory {t}"):
                        logtree.conversation(
                            [
                                {"role": "user", "content": f"What is {a[k]} + {b[k]}?"},
                                {"role": "assistant", "content": texts[k]},
                            ]
                        )
                        logtree.text(f"reward {reward[k]:.2f} (expected {a[k] + b[k]})")
                logtree.trajectory_stats(
                    t,
                    final_reward=float(reward[k]),
                    steps=[{"ob_len": 7, "ac_len": int(ac_tokens[k]), "reward": 0.0}],
                )


def _train_step(
    policy: Policy, batch: dict[str, np.ndarray], adv: np.ndarray, lr: float, substeps: int
) -> dict[str, float]:
    """Importance-weighted policy gradient over ``substeps`` minibatches of the batch."""
    a, b = batch["a"], batch["b"]
    n, T = batch["tokens"].shape
    # every substep sees part of every group, so from the second on the sampler is stale
    order = np.arange(n).reshape(-1, batch["group_size"]).T.reshape(-1)
    kl1, kl2, count = 0.0, 0.0, 0
    grad_norms = []
    for chunk in np.array_split(order, substeps):
        for pos in range(T):
            m = batch["mask"][chunk, pos]
            if not m.any():
                continue
            rows = chunk[m]
            prev = batch["prev"][rows, pos]
            tok = batch["tokens"][rows, pos]
            p = policy.probs(a[rows], b[rows], pos, prev)
            lp_train = np.log(p[np.arange(len(rows)), tok] + 1e-12)
            diff = batch["logp"][rows, pos] - lp_train
            kl1 += diff.sum()
            kl2 += (0.5 * diff**2).sum()
            count += len(rows)
            ratio = np.exp(-diff)  # pi_train / pi_sample
            onehot = np.zeros_like(p)
            onehot[np.arange(len(rows)), tok] = 1.0
            grad = (adv[rows] * ratio)[:, None] * (onehot - p)
            grad_norms.append(float(np.sqrt((grad**2).sum())))
            np.add.at(policy.w, (a[rows], b[rows], pos, prev), lr * grad)
    return {
        "kl_sample_train_v1": kl1 / max(count, 1),
        "kl_sample_train_v2": kl2 / max(count, 1),
        "optim/grad_norm": float(np.sqrt(np.sum(np.square(grad_norms)))),
    }


def _save(logger: RunLogger, name: str, policy: Policy, rng: np.random.Generator) -> str:
    buf = io.BytesIO()
    np.savez(buf, w=policy.w, rng_state=np.array(json.dumps(rng.bit_generator.state)))
    rel = f"checkpoints/{name}.npz"
    logger.storage.write(rel, buf.getvalue())
    return rel


def _load(logger: RunLogger, rel: str, policy: Policy, rng: np.random.Generator) -> None:
    with np.load(io.BytesIO(logger.storage.read(rel))) as data:
        policy.w = data["w"].copy()
        rng.bit_generator.state = json.loads(str(data["rng_state"]))


def _rollout_groups(
    a: np.ndarray,
    b: np.ndarray,
    mask: np.ndarray,
    reward: np.ndarray,
    correct: np.ndarray,
    formed: np.ndarray,
    texts: list[str],
    group_size: int,
) -> list[list[dict[str, Any]]]:
    """Trajectory groups for the rollout summaries: one single-step trajectory per sampled answer."""
    ac_len = mask.sum(1)
    trajs = [
        {
            "steps": [
                {
                    "reward": reward[k],
                    "ob_len": PROMPT_TOKENS,
                    "ac_len": ac_len[k],
                    "episode_done": True,
                    "metrics": {"correct": correct[k], "format": formed[k]},
                    "logs": {"prompt": f"What is {a[k]} + {b[k]}?", "answer": texts[k]},
                }
            ],
            "final_ob_len": PROMPT_TOKENS + ac_len[k],
        }
        for k in range(len(a))
    ]
    return [trajs[g : g + group_size] for g in range(0, len(trajs), group_size)]


def _evaluate(
    policy: Policy, iteration: int, samples_per_prompt: int = 4
) -> tuple[dict[str, float], list[TrajectorySummary]]:
    """Sampled answers (temperature 1) to all 100 prompts, with a fixed seed: metrics and rollout records."""
    a, b = np.divmod(np.repeat(np.arange(100), samples_per_prompt), 10)
    out = _sample(policy, a, b, np.random.default_rng(12345))
    reward, correct, formed, texts = _grade(a, b, out["tokens"])
    _log_groups(a, b, texts, reward, out["mask"].sum(1), samples_per_prompt)
    groups = _rollout_groups(a, b, out["mask"], reward, correct, formed, texts, samples_per_prompt)
    records = build_rollout_summaries(
        iteration, groups, eval_name="test", tags=["arithmetic"], sampling_client_step=iteration
    )
    return summarize_rollouts(records, prefix="test/"), records


def run_demo(
    cfg: DemoConfig, *, resume: bool = False, quiet: bool = False, **storage_options: Any
) -> dict[str, float]:
    """Run the demo loop, logging to ``cfg.log_path``; returns the last metrics row.

    Prints one progress line per iteration and a closing note to stdout unless ``quiet``
    (warnings go to stderr).
    """
    out = sys.stdout

    def say(msg: str) -> None:
        if not quiet:
            print(msg, file=out, flush=True)

    rng = np.random.default_rng(cfg.seed)
    policy = Policy(cfg, np.random.default_rng(cfg.seed + 1))
    last: dict[str, float] = {}
    with RunLogger(cfg.log_path, config=cfg, resume=resume, **storage_options) as logger:
        start = 0
        if logger.resume_state is not None and logger.resume_state.state_path:
            _load(logger, logger.resume_state.state_path, policy, rng)
            start = logger.resume_state.batch
            say(f"resuming {logger.log_path} from checkpoint {logger.resume_state.name} (batch {start})")
        elif resume:
            say(f"no checkpoint in {logger.log_path}; starting from scratch")
        if start >= cfg.n_batches:
            say(f"the run in {logger.log_path} is already complete ({start} of {cfg.n_batches} batches)")
        t_start = time.monotonic()
        for i in range(start, cfg.n_batches):
            t0 = time.monotonic()
            lr = cfg.learning_rate * (1 - i / cfg.n_batches if cfg.lr_schedule == "linear" else 1.0)
            prompt_ids = rng.integers(0, 100, size=cfg.groups_per_batch)
            a = np.repeat(prompt_ids // 10, cfg.group_size)
            b = np.repeat(prompt_ids % 10, cfg.group_size)
            batch: dict[str, Any] = _sample(policy, a, b, rng)
            batch["a"], batch["b"], batch["group_size"] = a, b, cfg.group_size
            reward, correct, formed, texts = _grade(a, b, batch["tokens"])
            t_sample = time.monotonic() - t0
            with logger.iteration(i, num_groups_to_log=cfg.num_groups_to_log):
                _log_groups(a, b, texts, reward, batch["mask"].sum(1), cfg.group_size)
            groups_r = reward.reshape(cfg.groups_per_batch, cfg.group_size)
            adv = (groups_r - groups_r.mean(axis=1, keepdims=True)).reshape(-1)
            t1 = time.monotonic()
            train_metrics = _train_step(policy, batch, adv, lr, cfg.num_substeps)
            t_train = time.monotonic() - t1
            mask = batch["mask"]
            groups = _rollout_groups(a, b, mask, reward, correct, formed, texts, cfg.group_size)
            records = build_rollout_summaries(i, groups, tags=["arithmetic"], sampling_client_step=i)
            metrics: dict[str, Any] = {
                "progress/batch": i,
                "progress/done_frac": (i + 1) / cfg.n_batches,
                "optim/lr": lr,
                **summarize_rollouts(
                    records
                ),  # env/all/reward/total, env/all/correct, by_group/... (rllog.summarize_rollouts)
                "entropy": float(batch["entropy"][mask].mean()),
                **train_metrics,
                "time/sample": t_sample,
                "time/train": t_train,
            }
            if cfg.eval_every and (i % cfg.eval_every == 0 or i == cfg.n_batches - 1):
                t2 = time.monotonic()
                with logger.evaluation("test", i, num_groups_to_log=cfg.num_groups_to_log):
                    eval_metrics, eval_records = _evaluate(policy, i)
                metrics.update(eval_metrics)
                metrics["time/run_evals"] = time.monotonic() - t2
                logger.log_rollouts(i, eval_records, eval_name="test")
            if cfg.iteration_delay:
                time.sleep(cfg.iteration_delay)
            metrics["time/total"] = time.monotonic() - t0
            logger.log_rollouts(i, records)
            logger.log_metrics(i, metrics)
            last = metrics
            if (i + 1) % cfg.save_every == 0 or i + 1 == cfg.n_batches:
                final = i + 1 == cfg.n_batches
                name = "final" if final else f"{i + 1:06d}"
                logger.log_checkpoint(
                    name, batch=i + 1, state_path=_save(logger, name, policy, rng), final=final
                )
            done = i + 1 - start
            per_iter = (time.monotonic() - t_start) / done
            say(
                f"iter {i + 1:>3}/{cfg.n_batches}  reward {metrics['env/all/reward/total']:.3f}  "
                f"correct {metrics['env/all/correct']:.3f}  entropy {metrics['entropy']:.3f}  "
                f"{per_iter * 1000:.0f} ms/iter  ~{per_iter * (cfg.n_batches - i - 1):.1f} s left"
            )
        path = logger.log_path
    index = logger.index_url
    if path.startswith("memory://"):
        say(
            f"\nDone. The run lived in {path}, which exists only inside this process: it is gone now. "
            "Give a folder (or gs://, s3://) to keep it."
        )
        return last
    say(
        f"\nDone. The run's files are in {path}:\n"
        f"  metrics.jsonl, config.json, checkpoints.jsonl, code.diff, checkpoints/*.npz,\n"
        f"  train_iteration_NNNNNN.html + _logtree.json + _rollout_summaries.jsonl (every iteration),\n"
        f"  eval_test_iteration_NNNNNN.html + _logtree.json + _rollout_summaries.jsonl (every evaluation)\n"
        f"Look at them:\n"
        f"  rllog summary {path}      # key metrics, checkpoints, files\n"
        f"  rllog doctor {path}       # stability checks\n"
        f"  rllog demo {path} --resume   # continues from the last checkpoint\n"
        + (
            f"  open {index}   # charts, findings, config and every iteration's report\n"
            if index and "://" not in index
            else f"  index page: {index} (copy the run folder to a local disk to browse it with its reports)\n"
            if index
            else ""
        )
    )
    return last
