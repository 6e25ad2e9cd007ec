"""rllog inside a TRL (or any transformers ``Trainer``) run: metrics, config, checkpoints and completions.

One line::

    from rllog.integrations.trl import attach

    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), ...)
    attach(trainer, "runs/grpo1")            # RunLogger options go after the path
    trainer.train()                          # resume_from_checkpoint=... resumes the rllog run too

or ``GRPOTrainer(..., callbacks=[RllogCallback("runs/grpo1")])``, which logs everything
but the completions (the callback needs the trainer for those: ``RllogCallback(path,
trainer=trainer)`` or :func:`attach`).

What the run gets (docs/FORMATS.md §1 for the files):

- ``config.json``: ``{"args": TrainingArguments.to_dict(), "model": model.config.to_dict()}``
  (``to_dict`` already masks ``*_token`` fields; rllog's config writer redacts secrets).
- ``code.diff`` at start (RunLogger's).
- ``metrics.jsonl``: one row per ``on_log`` call with TRL's keys unchanged and
  ``step = state.global_step``: train rows, ``eval_*`` rows (their own rows at the same
  step, as the reader expects) and the final ``train_runtime`` row. A value that is not
  a number, bool, string or None is left out of its row, with a warning once per key.
- ``checkpoints.jsonl``: on ``on_save``, ``{"name": "checkpoint-<step>", "batch": step,
  "epoch": state.epoch, "state_path": "<output_dir>/checkpoint-<step>", "next_step":
  step + 1}``. ``trainer.train(resume_from_checkpoint=...)`` opens the rllog run with
  ``resume=True``: the rows at or past the resumed step + 1 are moved to
  ``metrics.superseded.jsonl`` as RunLogger does (also when an older checkpoint than
  the last is resumed), so no step stands twice.
- Completions (GRPOTrainer, RLOOTrainer and other trainers that keep TRL's ``_logs``:
  prompts, completions, per-function rewards, advantages, ``log_extra`` columns,
  images) at every logging step: an iteration report (``train_iteration_<step>.html``
  and ``_logtree.json``; evaluation rows write ``eval_eval_iteration_<step>...``): the
  prompt once per group, then each completion with its rewards and advantage; groups
  whose rewards are all equal (zero std: no learning signal) are marked; and rollout
  summaries (one trajectory per completion: ``total_reward`` = the weighted sum of the
  reward functions (TRL's ``reward_weights``; NaN when none scored it),
  ``trajectory_metrics`` = each function's reward and ``advantage``, ``ob_len``/``ac_len``
  = prompt and completion tokens re-counted with the trainer's tokenizer (the chat
  template applied for conversations; special tokens such as EOS not counted)).
  Train and eval completions are written apart (TRL's own parquet file of a step is
  overwritten by the eval completions on eval steps; these are not). A group is the
  ``num_generations`` (``num_generations_eval`` on eval) consecutive completions of one prompt.
- Only the world's process zero writes (``state.is_world_process_zero``): under
  accelerate/torchrun the other ranks do nothing.

``report_to=["rllog"]``: :func:`register` adds the name to transformers'
``INTEGRATION_TO_CALLBACK`` table (transformers has no registry API; the table is a
public module-level dict), only when called, never at import. The run then goes to
``$RLLOG_DIR/<run_name>`` (default ``rllog_runs/<run_name>``) and gets no completions.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Mapping
from typing import Any

from rllog import logtree
from rllog._run import RunLogger
from rllog._write.resume import supersede
from rllog.storage import open_storage

try:  # the base class; without transformers the module still imports (attach says what to install)
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover - exercised in environments without transformers
    _Base = object  # type: ignore[assignment,misc]  # a placeholder base when transformers is missing

__all__ = ["RllogCallback", "attach", "register"]

_SCALARS = (int, float, str, bool, type(None))


class RllogCallback(_Base):  # type: ignore[misc,valid-type]  # transformers' TrainerCallback, untyped
    """A transformers ``TrainerCallback`` that writes the run to ``log_path`` with :class:`rllog.RunLogger`.

    Args:
        log_path: folder or URL of the run (``gs://``, ``s3://``, ``memory://``).
        trainer: the trainer, to log its completions (TRL's ``_logs``); :func:`attach` sets it.
        completions: write iteration reports and rollout summaries of the completions.
        num_groups_to_log: groups with full content in each report (every group is in its
            "Trajectory Details").
        **options: RunLogger options (``strict_json``, ``code_diff``, ``console``,
            ``index``, ``storage_options``...). ``config``, ``resume`` and ``resume_key``
            are set by the callback.

    The RunLogger is opened at ``on_train_begin`` and closed at ``on_train_end``
    (:attr:`logger`). A failing backend never stops training (RunLogger's rules); a
    failure inside the callback's own work on completions is warned about once and skipped.

    Raises:
        ImportError: transformers is not installed (``pip install rllog[trl]``).
        TypeError: an option that the callback sets itself.
    """

    def __init__(
        self,
        log_path: str | os.PathLike[str],
        *,
        trainer: Any = None,
        completions: bool = True,
        num_groups_to_log: int = 4,
        **options: Any,
    ) -> None:
        if _Base is object:
            raise ImportError("rllog.integrations.trl needs transformers: pip install 'rllog[trl]'")
        taken = sorted({"config", "resume", "resume_key"} & set(options))
        if taken:
            raise TypeError(f"RllogCallback sets {taken} itself (from the trainer); do not pass them")
        self.log_path = log_path
        self.trainer = trainer
        self.completions = completions
        self.num_groups_to_log = num_groups_to_log
        self.options = options
        self.logger: RunLogger | None = None
        self._warned: set[str] = set()

    # -- hooks ------------------------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.logger is not None:
            return
        resumed = state.global_step > 0  # Trainer loaded trainer_state.json of the checkpoint
        model_config = getattr(model, "config", None)
        config = {
            "args": args.to_dict(),
            "model": model_config.to_dict()
            if model_config is not None and hasattr(model_config, "to_dict")
            else None,
        }
        if resumed:
            self._supersede_from(state.global_step + 1)
        self.logger = RunLogger(
            self.log_path, config=config, resume=resumed, resume_key="next_step", rank=0, **self.options
        )

    def _supersede_from(self, step: int) -> None:
        """Move rows at or past ``step`` aside before the RunLogger opens (which does the same
        from its last checkpoint record): a Trainer may resume an older checkpoint than the last."""
        named = set(inspect.signature(RunLogger.__init__).parameters)
        storage = open_storage(self.log_path, **{k: v for k, v in self.options.items() if k not in named})
        try:
            supersede(storage, step, lambda message, problem=True: None)
        finally:
            storage.close()

    def on_log(
        self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> None:
        logger = self.logger
        if logger is None or not logs:
            return
        row = {}
        for key, value in logs.items():
            if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
                value = value.item()
            if isinstance(value, _SCALARS):
                row[key] = value
            else:
                self._warn(
                    f"key:{key}",
                    f"rllog: left {key!r} out of metrics (a {type(value).__name__}, not a number)",
                )
        logger.log_metrics(state.global_step, row)
        if "train_runtime" in logs or not self.completions or self.trainer is None:
            return
        is_eval = any(k.startswith("eval_") for k in logs)
        try:
            self._log_completions(state.global_step, is_eval)
        except Exception as exc:  # telemetry never kills training
            self._warn(
                "completions", f"rllog: could not log the completions of step {state.global_step}: {exc!r}"
            )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.logger is None:
            return
        step = state.global_step
        self.logger.log_checkpoint(
            f"checkpoint-{step}",
            batch=step,
            epoch=state.epoch,
            state_path=os.path.join(args.output_dir, f"checkpoint-{step}"),
            next_step=step + 1,
        )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.logger is not None:
            self.logger.close()
            for message in self.logger.warnings:
                self._warn(message, f"rllog: {message}")
            self.logger = None

    # -- completions ----------------------------------------------------------------------

    def _warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            import warnings

            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _log_completions(self, step: int, is_eval: bool) -> None:
        trainer, logger = self.trainer, self.logger
        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, Mapping) or not logs.get("completion") or logger is None:
            return
        prompts = list(logs["prompt"])
        completions = list(logs["completion"])
        rewards = {name: [_num(v) for v in col] for name, col in logs.get("rewards", {}).items()}
        advantages = [_num(v) for v in logs.get("advantages", [])]
        extra = {name: list(col) for name, col in logs.get("extra", {}).items()}
        images = list(logs.get("images") or [])
        n = len(completions)
        weights = _weights(trainer, list(rewards))
        g = (getattr(trainer, "num_generations_eval", None) if is_eval else None) or getattr(
            trainer, "num_generations", None
        )
        groups = _groups(prompts, g if isinstance(g, int) and g > 0 else 1)
        tok = getattr(trainer, "processing_class", None)
        tok = getattr(tok, "tokenizer", tok)  # a processor wraps its tokenizer
        # one tokenizer call per kind for the step; a group's completions share its prompt
        ob_len_G = _token_counts(tok, [prompts[idx[0]] for idx in groups], prompt=True)
        ac_len_N = _token_counts(tok, completions, prompt=False)
        trajectories: list[list[dict[str, Any]]] = []
        for gi, idx in enumerate(groups):
            trajs: list[dict[str, Any]] = []
            for i in idx:
                per_func = {name: col[i] for name, col in rewards.items() if i < len(col)}
                total = _weighted(per_func, weights)
                metrics = dict(per_func)
                if i < len(advantages):
                    metrics["advantage"] = advantages[i]
                trajs.append(
                    {
                        "steps": [
                            {
                                "reward": total,
                                "ob_len": ob_len_G[gi],
                                "ac_len": ac_len_N[i],
                                "episode_done": True,
                                "logs": {k: _text(v[i]) for k, v in extra.items() if i < len(v)},
                            }
                        ],
                        "trajectory_metrics": metrics,
                    }
                )
            trajectories.append(trajs)
        eval_name = "eval" if is_eval else None
        counted = None not in ob_len_G and None not in ac_len_N
        if counted:
            logger.log_rollouts(step, trajectories, eval_name=eval_name)
        else:  # summaries are in tokens; the report with the text is still written
            self._warn(
                "token-counts",
                f"rllog: the trainer's processing_class ({type(tok).__name__}) could not count the tokens of "
                f"step {step}'s prompts or completions, so that step has no rollout summaries file (it and "
                "every such step still get their report with the prompts, completions and rewards)",
            )
        title = f"{'Eval' if is_eval else 'Train'} completions at step {step} ({n} completions, {len(groups)} prompts)"
        report = (
            logger.evaluation("eval", step, num_groups_to_log=self.num_groups_to_log, title=title)
            if is_eval
            else logger.iteration(step, num_groups_to_log=self.num_groups_to_log, title=title)
        )
        with report:
            for gi, idx in enumerate(groups):
                totals = [t["steps"][0]["reward"] for t in trajectories[gi]]
                finite = [x for x in totals if not math.isnan(x)]
                flat = len(idx) > 1 and len(finite) == len(totals) and max(finite) - min(finite) <= 1e-8
                head = f"Prompt {gi}" + (
                    " · zero reward std: every completion scored the same" if flat else ""
                )
                with logtree.group(gi, title=head):
                    _show(prompts[idx[0]], "Prompt")
                    for t, i in enumerate(idx):
                        traj = trajectories[gi][t]
                        with logtree.scope(f"Completion {t}: reward {_fmt(totals[t])}"):
                            _show(completions[i], None)
                            logtree.table({k: v for k, v in traj["trajectory_metrics"].items()})
                            if traj["steps"][0]["logs"]:
                                logtree.table(traj["steps"][0]["logs"])
                            if i < len(images) and images[i]:
                                logtree.text(f"{len(images[i])} image(s) (not stored by rllog)")
                        logtree.trajectory_stats(
                            t,
                            total_reward=totals[t],
                            steps=traj["steps"] if counted else None,
                            metrics=traj["trajectory_metrics"],
                        )


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _fmt(x: float) -> str:
    return "NaN" if math.isnan(x) else f"{x:.4g}"


def _text(v: Any) -> Any:
    return v if isinstance(v, (int, float, str, bool)) or v is None else repr(v)


def _weights(trainer: Any, names: list[str]) -> list[float]:
    w = getattr(trainer, "reward_weights", None)
    try:
        values = [float(x) for x in (w.tolist() if hasattr(w, "tolist") else w)]  # type: ignore[union-attr]  # None handled below
    except TypeError:
        values = []
    return values if len(values) == len(names) else [1.0] * len(names)


def _weighted(per_func: Mapping[str, float], weights: list[float]) -> float:
    """TRL's ``nansum(rewards_per_func * reward_weights)``, NaN when no function scored."""
    vals = [(v, w) for v, w in zip(per_func.values(), weights, strict=False) if not math.isnan(v)]
    return math.fsum(v * w for v, w in vals) if vals else math.nan


def _groups(prompts: list[Any], g: int) -> list[list[int]]:
    """Indices of each group: ``g`` consecutive completions of one prompt (TRL's
    RepeatSampler); runs of equal prompts when the batch is not made of such blocks."""
    n = len(prompts)
    if n % g == 0 and all(prompts[s] == prompts[s + j] for s in range(0, n, g) for j in range(g)):
        return [list(range(s, s + g)) for s in range(0, n, g)]
    out: list[list[int]] = []
    for i, p in enumerate(prompts):
        if out and prompts[out[-1][0]] == p:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def _token_counts(tok: Any, values: list[Any], *, prompt: bool) -> list[int | None]:
    """Tokens in each of ``values`` (prompts with ``prompt``, else completions), as
    :func:`_count_tokens` counts them, in one tokenizer call per kind (conversation
    prompts through the chat template, texts) instead of one per value: a batch costs
    about what two single calls do. When a batch call fails, each value of it is counted
    alone, so one value the tokenizer cannot count is the only one left out (None).

    Returns:
        one count per value (``len(values)``), None where it could not be counted.
    """
    out: list[int | None] = [None] * len(values)
    if tok is None or not values:
        return out
    chats = [i for i, v in enumerate(values) if prompt and isinstance(v, list)]
    texts = [i for i, v in enumerate(values) if not (prompt and isinstance(v, list))]
    for idx, chat in ((chats, True), (texts, False)):
        if not idx:
            continue
        try:
            if chat:
                ids = tok.apply_chat_template(
                    [values[i] for i in idx], add_generation_prompt=True, tokenize=True
                )
            else:
                ids = tok([_plain(values[i]) for i in idx], add_special_tokens=False)
            if isinstance(ids, Mapping):  # a BatchEncoding (__call__; transformers 5's chat template)
                ids = ids["input_ids"]
            counts: list[int | None] = [len(x) for x in ids]
            if len(counts) != len(idx):  # not one sequence per value
                raise ValueError("not a batch")
        except Exception:  # count each alone: only a value the tokenizer cannot count is left out
            counts = [_count_tokens(tok, values[i], prompt=prompt) for i in idx]
        for i, n in zip(idx, counts, strict=True):
            out[i] = n
    return out


def _plain(value: Any) -> str:
    """The text of a completion (a conversation's message contents joined) or of a text prompt."""
    if isinstance(value, list):
        return "".join(str(m.get("content") or "") for m in value if isinstance(m, Mapping))
    return str(value)


def _count_tokens(tok: Any, value: Any, *, prompt: bool) -> int | None:
    """Tokens of one prompt or completion: a conversation prompt with the chat template and
    generation prompt, anything else as plain text without special tokens; None when
    ``tok`` is None or cannot count it."""
    if tok is None:
        return None
    try:
        if prompt and isinstance(value, list):  # a conversation
            ids = tok.apply_chat_template(value, add_generation_prompt=True, tokenize=True)
        else:
            ids = tok(_plain(value), add_special_tokens=False)["input_ids"]
        if isinstance(ids, Mapping):  # BatchEncoding from apply_chat_template in transformers 5
            ids = ids["input_ids"]
        return len(ids)
    except Exception:  # a tokenizer that cannot count this: leave the length out
        return None


def _show(value: Any, label: str | None) -> None:
    if isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m for m in value):
        logtree.conversation(value)
    else:
        logtree.text(f"{label}: {value}" if label else str(value))


def attach(trainer: Any, log_path: str | os.PathLike[str], **options: Any) -> RllogCallback:
    """Add an :class:`RllogCallback` writing to ``log_path`` to ``trainer`` (completions
    included) and return it. ``options``: :class:`RllogCallback`'s keyword arguments and
    RunLogger options.

    Raises:
        TypeError: ``trainer`` has no ``add_callback`` (not a transformers Trainer).
    """
    if not hasattr(trainer, "add_callback"):
        raise TypeError(
            f"attach(trainer, log_path): expected a transformers Trainer, got {type(trainer).__name__}"
        )
    callback = RllogCallback(log_path, trainer=trainer, **options)
    trainer.add_callback(callback)
    return callback


class _ReportToCallback(RllogCallback):
    """What ``report_to=["rllog"]`` instantiates (transformers calls it with no argument)."""

    def __init__(self) -> None:
        super().__init__(os.environ.get("RLLOG_DIR", "rllog_runs"))

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        name = str(getattr(args, "run_name", None) or os.path.basename(os.path.normpath(args.output_dir)))
        self.log_path = os.path.join(os.fspath(self.log_path), name)
        super().on_train_begin(args, state, control, model=model, **kwargs)


def register() -> None:
    """Make ``report_to=["rllog"]`` work: add ``"rllog"`` to transformers'
    ``INTEGRATION_TO_CALLBACK`` (call it before building the ``TrainingArguments``).

    Raises:
        ImportError: transformers is not installed.
    """
    from transformers.integrations import integration_utils

    integration_utils.INTEGRATION_TO_CALLBACK["rllog"] = _ReportToCallback
