"""rllog inside real TRL trainers (GRPOTrainer, RLOOTrainer) from the tiny recipe: 4 steps,
eval and save every 2 steps, on CPU. Marked slow (conftest: tests/integrations)."""

from __future__ import annotations

import json
import math
import os
import warnings
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")
from click.testing import CliRunner
from tiny_trl import tokenizer as tiny_tokenizer
from tiny_trl import trainer as tiny_trainer  # after the importorskip
from transformers import TrainerCallback

from rllog import read_run, stats
from rllog.cli import main as cli
from rllog.doctor import check_run
from rllog.integrations.trl import RllogCallback, _token_counts, attach


class Probe(TrainerCallback):
    """Snapshots TRL's gathered completions at every on_log (runs after rllog's callback)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.seen = []  # (step, is_eval, prompts, completions, rewards, advantages)

    def on_log(self, args, state, control, logs=None, **kw):
        if "train_runtime" in logs:
            return
        L = self.trainer._logs
        self.seen.append(
            (
                state.global_step,
                any(k.startswith("eval_") for k in logs),
                list(L["prompt"]),
                list(L["completion"]),
                {k: list(v) for k, v in L["rewards"].items()},
                list(L["advantages"]),
            )
        )


def _chat_ids(tok, conversation):
    ids = tok.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
    return ids["input_ids"] if hasattr(ids, "keys") else ids


class CountingTokenizer:
    """The tiny tokenizer, recording each call rllog makes; ``refuse``: a text it cannot count."""

    def __init__(self, refuse=None):
        self.tok = tiny_tokenizer()
        self.calls = []
        self.refuse = refuse

    def __call__(self, text, **kw):
        self.calls.append("tokenize")
        if self.refuse in (text if isinstance(text, list) else [text]):
            raise ValueError("cannot count this")
        return self.tok(text, **kw)

    def apply_chat_template(self, conversation, **kw):
        self.calls.append("chat_template")
        return self.tok.apply_chat_template(conversation, **kw)


def _log_one_step(path, tok, prompts, completions, strict=True):
    """RllogCallback's on_log at step 1 over TRL-shaped ``_logs`` (groups of 4); the step's rollout records."""
    n = len(completions)
    trainer = SimpleNamespace(
        _logs={
            "prompt": prompts,
            "completion": completions,
            "rewards": {"r": [float(i % 2) for i in range(n)]},
            "advantages": [0.5] * n,
            "extra": {},
            "images": [],
        },
        processing_class=tok,
        num_generations=4,
        reward_weights=None,
    )
    cb = RllogCallback(path, trainer=trainer, code_diff=False)
    args = SimpleNamespace(to_dict=lambda: {"num_generations": 4})
    state = SimpleNamespace(is_world_process_zero=True, global_step=0)
    with warnings.catch_warnings():
        if strict:
            warnings.simplefilter("error", RuntimeWarning)  # a failure of the completions work warns
        cb.on_train_begin(args, state, None)
        state.global_step = 1
        cb.on_log(args, state, None, logs={"loss": 0.5})
        cb.on_train_end(args, state, None)
    with open(os.path.join(path, "train_iteration_000001_rollout_summaries.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_token_counts_take_one_tokenizer_call_per_kind_a_step(tmp_path):
    """A step's prompts (once per group) and completions are counted in one call each, with
    the counts one call per value gives (before: two calls per completion)."""
    questions = ["what is 1+2?", "what is 10+3? think"]
    prompts = [[{"role": "user", "content": q}] for q in questions for _ in range(4)]
    texts = ["3", "it is 3", "", "1+2=3 ok", "13", "13!", "ten plus three", "x"]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    tok = CountingTokenizer()
    recs = _log_one_step(str(tmp_path / "run"), tok, prompts, completions)
    assert tok.calls == ["chat_template", "tokenize"]
    ref = tiny_tokenizer()
    assert [r["steps"][0]["ob_len"] for r in recs] == [len(_chat_ids(ref, p)) for p in prompts]
    assert [r["steps"][0]["ac_len"] for r in recs] == [
        len(ref(t, add_special_tokens=False)["input_ids"]) for t in texts
    ]
    assert len({r["steps"][0]["ob_len"] for r in recs}) == 2  # the two prompts differ in length

    # a text the tokenizer refuses: the batch falls back to one call per value, only that one is left out
    tok = CountingTokenizer(refuse="it is 3")
    counts = _token_counts(tok, completions, prompt=False)
    assert counts[1] is None
    assert counts[:1] + counts[2:] == [
        len(ref(t, add_special_tokens=False)["input_ids"]) for t in texts[:1] + texts[2:]
    ]
    assert tok.calls == ["tokenize"] * (1 + len(texts))


@pytest.mark.parametrize("tok", [None, "refusing"])
def test_a_step_the_tokenizer_cannot_count_still_gets_its_report(tmp_path, tok):
    """Without token counts there can be no rollout summaries (they are in tokens), but the
    step's prompts, completions and rewards must not be lost with them."""
    tok = CountingTokenizer(refuse="it is 3") if tok else None
    prompts = [[{"role": "user", "content": "what is 1+2?"}]] * 4
    texts = ["3", "it is 3", "three", "<img src=x onerror=alert(1)>"]
    completions = [[{"role": "assistant", "content": t}] for t in texts]
    path = str(tmp_path / "run")
    with pytest.warns(RuntimeWarning, match="could not count the tokens of step 1") as caught:
        with pytest.raises(FileNotFoundError):
            _log_one_step(path, tok, prompts, completions, strict=False)
    assert len([w for w in caught if "could not count" in str(w.message)]) == 1
    html = open(os.path.join(path, "train_iteration_000001.html")).read()
    for t in texts[:3]:
        assert f">{t}<" in html or t in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == pytest.approx(b, rel=1e-12, abs=0) if isinstance(a, float) else a == b


def _run(kind, tmp_path, capture=False):
    out = str(tmp_path / kind)
    tr = tiny_trainer(kind, out)
    cb = attach(tr, os.path.join(out, "run"))
    probe = Probe(tr)
    tr.add_callback(probe)
    generated = []
    if capture:
        orig = tr._generate_and_score_completions

        def wrap(inputs):
            o = orig(inputs)
            generated.append((tr.model.training, o, {k: list(v) for k, v in tr._logs["rewards"].items()}))
            return o

        tr._generate_and_score_completions = wrap
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.train()
    return tr, cb, probe, generated, os.path.join(out, "run")


@pytest.mark.parametrize("kind", ["grpo", "rloo"])
def test_trainer_run_is_logged(kind, tmp_path):
    tr, cb, probe, generated, path = _run(kind, tmp_path, capture=kind == "grpo")
    run = read_run(path)

    # metrics: every on_log row, TRL's keys and values, step = global_step; eval rows apart
    with open(os.path.join(path, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == len(tr.state.log_history) == 7  # 4 train + 2 eval + final
    for row, hist in zip(rows, tr.state.log_history, strict=True):
        assert row["step"] == hist["step"]
        assert set(row) - {"step"} == set(hist) - {"step"}
        assert all(_same(row[k], hist[k]) for k in hist), (row, hist)
    assert list(run.eval_metrics["step"]) == [2, 4]
    assert list(run.train_metrics["step"]) == [1, 2, 3, 4]
    assert "train_runtime" in run.metrics.columns

    # config: the GRPOConfig/RLOOConfig and the model config
    cfg = json.loads(open(os.path.join(path, "config.json")).read())
    assert cfg["args"]["num_generations"] == 4 and cfg["args"]["max_steps"] == 4
    assert cfg["model"]["hidden_size"] == 64

    # checkpoints: one record per checkpoint directory
    ckpts = [json.loads(line) for line in open(os.path.join(path, "checkpoints.jsonl"))]
    dirs = sorted(d for d in os.listdir(tr.args.output_dir) if d.startswith("checkpoint-"))
    assert [os.path.basename(c["state_path"]) for c in ckpts] == dirs == ["checkpoint-2", "checkpoint-4"]
    assert [(c["batch"], c["next_step"]) for c in ckpts] == [(2, 3), (4, 5)]
    assert all(os.path.isdir(c["state_path"]) and c["epoch"] > 0 for c in ckpts)

    # completions: each logging step's report and rollout summaries hold what TRL gathered
    assert len(probe.seen) == 6
    for step, is_eval, prompts, completions, rewards, advantages in probe.seen:
        eval_name = "eval" if is_eval else None
        art = run.artifact(step, "rollout_summaries", eval_name)
        recs = [json.loads(line) for line in open(os.path.join(path, art.name))]
        assert len(recs) == len(completions) == 4
        for i, rec in enumerate(recs):
            assert (rec["group_idx"], rec["traj_idx"]) == (i // 4, i % 4)
            assert rec["split"] == ("eval/eval" if is_eval else "train")
            for name, col in rewards.items():
                assert rec["trajectory_metrics"][name] == col[i]
            assert rec["trajectory_metrics"]["advantage"] == advantages[i]
            assert rec["total_reward"] == sum(col[i] for col in rewards.values())
            # tokens re-counted with the trainer's tokenizer: the prompt with the chat template, the completion's text
            assert rec["steps"][0]["ob_len"] == len(_chat_ids(tr.processing_class, prompts[i]))
            text = completions[i][0]["content"]
            assert rec["steps"][0]["ac_len"] == len(
                tr.processing_class(text, add_special_tokens=False)["input_ids"]
            )
        tree = run.logtree(step, eval_name)
        text = json.dumps(tree)
        assert all(c[0]["content"] in text for c in completions)
        assert prompts[0][0]["content"] in text
        assert text.count(json.dumps(prompts[0][0]["content"])) >= 1
        flat = len({sum(col[i] for col in rewards.values()) for i in range(4)}) == 1
        assert ("zero reward std" in text) == flat
    # eval completions did not overwrite the train ones of the same step
    train2 = [json.loads(x) for x in open(os.path.join(path, run.artifact(2, "rollout_summaries").name))]
    train_seen = next(s for s in probe.seen if s[0] == 2 and not s[1])
    assert [r["trajectory_metrics"]["advantage"] for r in train2] == train_seen[5]

    # the reader, summary, doctor and index work on the run
    res = CliRunner().invoke(cli, ["summary", path])
    assert res.exit_code == 0, res.output
    assert "reward" in res.output
    findings = check_run(path)
    assert not [f for f in findings if f.severity == "error"], findings
    assert os.path.exists(os.path.join(path, "index.html"))

    if kind == "grpo":
        # rllog.stats on the tensors TRL generated gives the values TRL logged (GRPOTrainer's own paths)
        train = [g for g in generated if g[0]]
        hist = [h for h in tr.state.log_history if "loss" in h and "eval_loss" not in h]
        assert len(train) == len(hist) == 4
        pad, eos = tr.processing_class.pad_token_id, tr.processing_class.eos_token_id
        for (_, o, rew), h in zip(train, hist, strict=True):
            lengths = o["completion_mask"].sum(1)
            truncated = [int(ids[-1]) not in (eos, pad) for ids in o["completion_ids"]]
            got = stats.completion_stats(lengths, truncated)
            got.update(stats.reward_stats(rew, group_size=4))
            for key, value in got.items():
                if not key.endswith("/count"):
                    assert value == pytest.approx(h[key], rel=1e-6, abs=1e-9), key


def test_resume_from_checkpoint_has_no_step_twice(tmp_path):
    out = str(tmp_path / "grpo")
    path = os.path.join(out, "run")
    tr = tiny_trainer("grpo", out)
    attach(tr, path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.train()
        tr2 = tiny_trainer("grpo", out)
        attach(tr2, path)
        tr2.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
    rows = [json.loads(line) for line in open(os.path.join(path, "metrics.jsonl"))]
    train_steps = [r["step"] for r in rows if "loss" in r]
    assert train_steps == [1, 2, 3, 4]  # the first attempt's 3 and 4 were moved aside
    moved = [json.loads(line) for line in open(os.path.join(path, "metrics.superseded.jsonl"))]
    assert sorted({r["step"] for r in moved}) == [3, 4]
    assert len(read_run(path).restarts) == 0
    assert list(read_run(path).train_metrics["step"]) == [1, 2, 3, 4]


def test_report_to_rllog_after_register(tmp_path, monkeypatch):
    """``register()`` then ``report_to=["rllog"]``: transformers builds rllog's callback itself
    (no trainer handle, so no completions); the run goes to ``$RLLOG_DIR/<run_name>``."""
    from transformers.integrations import integration_utils

    from rllog.integrations.trl import register

    monkeypatch.setitem(integration_utils.INTEGRATION_TO_CALLBACK, "rllog", None)  # undone after the test
    register()
    monkeypatch.setenv("RLLOG_DIR", str(tmp_path / "runs"))
    tr = tiny_trainer("grpo", str(tmp_path / "out"), steps=2, report_to=["rllog"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.train()
    path = tmp_path / "runs" / "grpo_tiny"
    rows = [json.loads(line) for line in open(path / "metrics.jsonl")]
    assert len(rows) == len(tr.state.log_history) == 4  # 2 train + 1 eval + final
    for row, hist in zip(rows, tr.state.log_history, strict=True):
        assert row["step"] == hist["step"] and all(_same(row[k], hist[k]) for k in hist)
    assert json.loads((path / "config.json").read_text())["args"]["report_to"] == ["rllog"]
    ckpts = [json.loads(line) for line in open(path / "checkpoints.jsonl")]
    assert [os.path.basename(c["state_path"]) for c in ckpts] == ["checkpoint-2"]
    assert not [f for f in check_run(str(path)) if f.severity == "error"]
