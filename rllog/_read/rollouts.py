"""Reading rollout summaries: :func:`read_rollouts` (typed records) and :func:`rollouts_dataframe`.

The record format is :class:`rllog.TrajectorySummary` (``rllog/_format/records.py``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from rllog._format.layout import parse_iteration_file, safe_eval_name
from rllog._format.records import TrajectorySummary
from rllog.errors import RunFormatError
from rllog.storage import Storage, open_storage

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["read_rollouts", "decode_rollout_summaries", "decode_readable_records", "rollouts_dataframe"]


_DECODER = msgspec.json.Decoder(TrajectorySummary)


def _nan_if_none(x: Any) -> Any:
    return math.nan if x is None else x


def _decode_line(line: bytes) -> TrajectorySummary:
    """One record; NaN tokens, lone surrogates and strict-JSON nulls go through Python's json."""
    try:
        return _DECODER.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    obj = json.loads(line)
    if isinstance(obj, dict):
        for key in ("total_reward", "final_reward"):
            if key in obj:
                obj[key] = _nan_if_none(obj[key])
        for step in obj.get("steps") or ():
            if isinstance(step, dict) and "reward" in step:
                step["reward"] = _nan_if_none(step["reward"])
    return msgspec.convert(obj, TrajectorySummary)


def decode_rollout_summaries(data: bytes, where: str = "rollout summaries") -> list[TrajectorySummary]:
    """Parse the bytes of one ``*_rollout_summaries.jsonl`` file.

    Blank lines are skipped. A last line without its newline that does not parse (a
    torn write by a tool that does not write atomically) is dropped with a
    ``RuntimeWarning``.

    Raises:
        RunFormatError: a complete line that is not a valid record; names ``where``
            and the line number.
    """
    try:
        return _DECODER.decode_lines(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    lines = data.split(b"\n")
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(_decode_line(line))
        except (ValueError, msgspec.ValidationError) as e:
            if i == len(lines) - 1:
                warnings.warn(
                    f"{where}: dropped a torn last line ({len(line)} bytes): {e}",
                    RuntimeWarning,
                    stacklevel=3,
                )
                break
            raise RunFormatError(f"{where}, line {i + 1}: not a rollout summary record: {e}") from None
    return out


def decode_readable_records(data: bytes, where: str) -> tuple[list[TrajectorySummary], list[str]]:
    """Every line of a ``*_rollout_summaries.jsonl`` file's bytes that is a record, and one
    message per line that is not (``"<where> line 3: not a rollout summary record: ..."``):
    for a search, which should find what a damaged file still holds and say what it skipped."""
    records, problems = [], []
    for i, line in enumerate(data.split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            records.append(_decode_line(line))
        except (ValueError, msgspec.ValidationError) as e:
            problems.append(f"{where} line {i}: not a rollout summary record, skipped: {e}")
    return records, problems


def _rollout_files(
    storage: Storage, iteration: int | None, split: str | None, eval_name: str | None
) -> list[str]:
    if split is not None and split.startswith("eval/"):  # a record's own split: "eval/<name>"
        if eval_name is not None and eval_name != split[len("eval/") :]:
            raise ValueError(f"split={split!r} names another evaluator than eval_name={eval_name!r}")
        split, eval_name = "eval", split[len("eval/") :]
    if split not in (None, "train", "eval"):
        raise ValueError(
            f"split must be 'train', 'eval' (every evaluator), 'eval/<name>' (one evaluator, the records' "
            f"own split value) or None (all), got {split!r}"
        )
    if eval_name is not None:
        if split == "train":
            raise ValueError(f"eval_name={eval_name!r} with split='train': evaluator files are split 'eval'")
        split, eval_name = "eval", safe_eval_name(eval_name)
    found = []
    for name in storage.list():
        a = parse_iteration_file(name)
        if (
            a is not None
            and a.kind == "rollout_summaries"
            and (split is None or a.split == split)
            and (eval_name is None or a.eval_name == eval_name)
            and (iteration is None or a.iteration == iteration)
        ):
            found.append(((a.iteration, a.split != "train", a.eval_name or ""), name))
    return [name for _, name in sorted(found)]


def read_rollouts(
    source: str | os.PathLike[str] | Storage,
    iteration: int | None = None,
    *,
    split: str | None = None,
    eval_name: str | None = None,
) -> Iterator[TrajectorySummary]:
    """Iterate the rollout summary records of a run, file by file.

    ``source`` is a run (``log_path`` folder, URL such as ``gs://bucket/run``, or a
    :class:`Storage`), or the path of one local ``*_rollout_summaries.jsonl`` file (then
    the filters are ignored). Files come in order of iteration, train before eval,
    evaluators by name; tinker-cookbook's ``iteration_NNNNNN/train_rollout_summaries.jsonl``
    layout is read too. Filters: ``iteration`` (None = all); ``split``: a record's own
    ``split`` value as written (``"train"`` or ``"eval/<name>"``, the evaluator's raw
    name), ``"eval"`` for every evaluator, None for all; ``eval_name`` (one evaluator,
    raw or file-safe name; the same as ``split="eval/<name>"``).

    Raises:
        RunFormatError: a file holds a line that is not a record.
        FileNotFoundError: ``source`` is a local path that does not exist.
    """
    if iteration is not None and (isinstance(iteration, bool) or not isinstance(iteration, int)):
        raise TypeError(
            f"read_rollouts: iteration must be an int or None, got {type(iteration).__name__}: {iteration!r:.40}"
        )
    if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        with open(source, "rb") as f:
            yield from decode_rollout_summaries(f.read(), os.fspath(source))
        return
    if (
        isinstance(source, (str, os.PathLike))
        and "://" not in os.fspath(source)
        and not os.path.isdir(source)
    ):
        raise FileNotFoundError(f"no run folder or rollout summaries file at {os.fspath(source)!r}")
    storage = source if isinstance(source, Storage) else open_storage(source, mode="r")
    try:
        for name in _rollout_files(storage, iteration, split, eval_name):
            yield from decode_rollout_summaries(storage.read(name), f"{storage.url}/{name}")
    finally:
        if storage is not source:
            storage.close()


def _records(
    source: Any, iteration: int | None, split: str | None, eval_name: str | None
) -> Iterable[TrajectorySummary]:
    if isinstance(source, (list, tuple)):
        return source
    return read_rollouts(source, iteration, split=split, eval_name=eval_name)


def rollouts_dataframe(
    source: str | os.PathLike[str] | Storage | Sequence[TrajectorySummary],
    iteration: int | None = None,
    *,
    split: str | None = None,
    eval_name: str | None = None,
    per: str = "trajectory",
) -> pd.DataFrame:
    """Rollout summaries as a pandas DataFrame.

    ``source`` and the filters are as in :func:`read_rollouts`; a list of records is
    also accepted. ``per="trajectory"`` gives one row per trajectory with columns
    ``split, iteration, group_idx, traj_idx, tags, sampling_client_step, total_reward,
    final_reward, final_ob_len, num_steps, total_ob_tokens, total_ac_tokens`` and
    ``trajectory_metrics/<key>`` for each trajectory metric. ``per="step"`` gives one
    row per step with ``split, iteration, group_idx, traj_idx, tags,
    sampling_client_step, total_reward, final_reward, step_idx, ob_len, ac_len,
    reward, episode_done``, ``metrics/<key>`` and ``logs/<key>``. A key missing in a
    row is NaN/None.

    Raises:
        ValueError: ``per`` is not ``"trajectory"`` or ``"step"``.
    """
    import pandas as pd

    if per not in ("trajectory", "step"):
        raise ValueError(f"per must be 'trajectory' or 'step', got {per!r}")
    rows: list[dict[str, Any]] = []
    for r in _records(source, iteration, split, eval_name):
        head = {
            "split": r.split,
            "iteration": r.iteration,
            "group_idx": r.group_idx,
            "traj_idx": r.traj_idx,
            "tags": r.tags,
            "sampling_client_step": r.sampling_client_step,
            "total_reward": r.total_reward,
            "final_reward": r.final_reward,
        }
        if per == "trajectory":
            head["final_ob_len"] = r.final_ob_len
            head["num_steps"] = len(r.steps)
            head["total_ob_tokens"] = sum(s.ob_len for s in r.steps)
            head["total_ac_tokens"] = sum(s.ac_len for s in r.steps)
            for k, v in r.trajectory_metrics.items():
                head[f"trajectory_metrics/{k}"] = v
            rows.append(head)
            continue
        for s in r.steps:
            row = dict(head)
            row.update(
                step_idx=s.step_idx,
                ob_len=s.ob_len,
                ac_len=s.ac_len,
                reward=s.reward,
                episode_done=s.episode_done,
            )
            for k, v in s.metrics.items():
                row[f"metrics/{k}"] = v
            for k, v in s.logs.items():
                row[f"logs/{k}"] = v
            rows.append(row)
    try:
        return pd.DataFrame.from_records(rows)
    except UnicodeEncodeError:  # pandas 3 with pyarrow keeps strings as UTF-8: no lone surrogates
        with pd.option_context("future.infer_string", False):
            return pd.DataFrame.from_records(rows)
