"""A tiny TRL setup built in code (no downloads), after /work/shared/recipes/trl_tiny:
a 2-layer Qwen2 (hidden 64), a char-level tokenizer, 16 arithmetic prompts, two reward
functions (one calls ``log_extra``)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<pad>", "<eos>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789 .,?!+-*/=:"))
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(SPECIALS + chars)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[3:],
    )
    fast.chat_template = TEMPLATE
    fast.padding_side = "left"
    return fast


def model_dir(out: str) -> str:
    """Save the tiny model and tokenizer under ``out`` (GRPO's reference model loads from a path)."""
    tok = tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    path = os.path.join(out, "tiny_model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def dataset() -> Dataset:
    qs = [(a, b) for a in range(4) for b in range(4)]
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": f"what is {a}+{b}?"}] for a, b in qs],
            "answer": [str(a + b) for a, b in qs],
        }
    )


def _text(c):
    return c[0]["content"] if isinstance(c, list) else c


def has_digit(prompts, completions, log_extra=None, **kw):
    texts = [_text(c) for c in completions]
    if log_extra is not None:
        log_extra("chars", [len(t) for t in texts])
    return [float(any(ch.isdigit() for ch in t)) for t in texts]


def correct(prompts, completions, answer, **kw):
    return [1.0 if a in _text(c) else 0.0 for c, a in zip(completions, answer, strict=True)]


def trainer(kind: str, out: str, steps: int = 4, **overrides):
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    torch.set_num_threads(2)
    path = model_dir(out)
    Config, Trainer = (GRPOConfig, GRPOTrainer) if kind == "grpo" else (RLOOConfig, RLOOTrainer)
    settings = dict(
        output_dir=out,
        run_name=f"{kind}_tiny",
        max_steps=steps,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        learning_rate=1e-3,
        beta=0.04,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        save_strategy="steps",
        save_steps=2,
        report_to="none",
        log_completions=False,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
        seed=0,
        temperature=1.0,
    )
    settings.update(overrides)  # any setting can be overridden
    cfg = Config(**settings)
    ds = dataset()
    return Trainer(
        model=AutoModelForCausalLM.from_pretrained(path),
        processing_class=tokenizer(),
        reward_funcs=[has_digit, correct],
        args=cfg,
        train_dataset=ds,
        eval_dataset=ds.select(range(4)),
    )
