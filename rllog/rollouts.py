"""Rollout summaries: one JSON object per trajectory, one file per iteration and split.

Files (DESIGN.md §1, names from :func:`rllog._names.artifact_name`)::

    train_iteration_000010_rollout_summaries.jsonl
    eval_<name>_iteration_000010_rollout_summaries.jsonl

One line per trajectory, keys in this order (the format tinker-cookbook's
``serialize_rollout_summaries`` writes, schema version 1)::

    {"schema_version":1,"split":"train","iteration":10,"group_idx":0,"traj_idx":1,
     "tags":["arith"],"sampling_client_step":10,"total_reward":1.0,"final_reward":1.0,
     "trajectory_metrics":{"correct":1.0},"final_ob_len":57,
     "steps":[{"step_idx":0,"ob_len":41,"ac_len":16,"reward":0.0,"episode_done":true,
               "metrics":{"format":1.0},"logs":{"answer":"42"}}]}

- ``split`` is ``"train"`` for training rollouts and ``"eval/<name>"`` for evaluator
  ``<name>`` (the raw name; the file name holds its file-safe form).
- ``group_idx`` is the group's position in the iteration's batch, ``traj_idx`` the
  trajectory's position in its group, ``step_idx`` the step's position in the episode.
- ``total_reward`` = sum of the step rewards + ``final_reward`` (the group-level reward).
- ``ob_len``/``ac_len``/``final_ob_len`` are token counts; ``final_ob_len`` is null when
  the loop did not give it.
- NaN and ±Infinity rewards or metrics are kept: written as the tokens ``NaN``,
  ``Infinity``, ``-Infinity`` (Python's ``json`` and pandas read them), or as ``null``
  with ``strict_json``; the reader turns a null reward back into NaN.
- Strings with lone surrogates are written as ``\\uXXXX`` escapes.

Each file is written whole and atomically through :meth:`Storage.write`; writing the
same iteration and split again (a resumed run re-doing an iteration) replaces it.
Readers ignore keys they do not know, so files from a newer ``schema_version`` with
extra fields still read.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from rllog._names import artifact_name, safe_eval_name
from rllog._rollout_input import build
from rllog.encoding import to_jsonable
from rllog.errors import RunFormatError
from rllog.storage import Storage, open_for_reading

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "SCHEMA_VERSION",
    "StepSummary",
    "TrajectorySummary",
    "build_rollout_summaries",
    "write_rollouts",
    "read_rollouts",
    "decode_rollout_summaries",
    "rollouts_dataframe",
    "summarize_rollouts",
]

#: version of the record layout written by this rllog; readers accept newer files
SCHEMA_VERSION = 1


class StepSummary(msgspec.Struct, gc=False):
    """One step (turn) of a trajectory.

    Attributes:
        step_idx: position of the step in the episode, from 0.
        ob_len: observation (prompt) length in tokens.
        ac_len: action (sampled completion) length in tokens.
        reward: the step's reward.
        episode_done: whether this step ended the episode.
        metrics: the env's numeric per-step metrics (str -> number/bool/str/None).
        logs: diagnostic values for people (str -> str/number; nested lists/dicts allowed).
    """

    step_idx: int
    ob_len: int
    ac_len: int
    reward: float
    episode_done: bool
    metrics: dict[str, Any] = {}
    logs: dict[str, Any] = {}


class TrajectorySummary(msgspec.Struct, kw_only=True, gc=False):
    """One trajectory (episode); one line of a ``*_rollout_summaries.jsonl`` file.

    Attributes:
        schema_version: record layout version (1).
        split: ``"train"`` or ``"eval/<evaluator name>"``.
        iteration: the training iteration (batch) the rollouts belong to.
        group_idx: the group's position in the iteration's batch.
        traj_idx: the trajectory's position in its group.
        tags: the group's logging tags (e.g. the env or dataset name).
        sampling_client_step: training step of the sampler's weights, or None.
        total_reward: sum of step rewards plus ``final_reward``.
        final_reward: the group-level reward given at the end (0.0 if none).
        trajectory_metrics: the group-level metrics of this trajectory.
        final_ob_len: length in tokens of the observation after the last step, or None.
        steps: the steps in order.
    """

    schema_version: int = SCHEMA_VERSION
    split: str
    iteration: int
    group_idx: int
    traj_idx: int
    tags: list[str] = []
    sampling_client_step: int | None = None
    total_reward: float
    final_reward: float = 0.0
    trajectory_metrics: dict[str, Any] = {}
    final_ob_len: int | None = None
    steps: list[StepSummary] = []


# ------------------------------------------------------------------------------- writing


def _split_for(split: str | None, eval_name: str | None) -> str:
    if split is None:
        return "train" if eval_name is None else f"eval/{eval_name}"
    if not isinstance(split, str) or not split:
        raise TypeError(f"split must be a non-empty str, got {split!r:.60}")
    if eval_name is None and split != "train":
        raise ValueError(
            f"split {split!r} without eval_name: training rollouts have split 'train'; for an "
            "evaluator pass eval_name=<name> (the split then defaults to 'eval/<name>')"
        )
    return split


def build_rollout_summaries(
    groups: Sequence[Any],
    iteration: int,
    *,
    split: str | None = None,
    eval_name: str | None = None,
    tags: Sequence[str] | Sequence[Sequence[str]] | None = None,
    sampling_client_step: int | Sequence[int | None] | None = None,
) -> list[TrajectorySummary]:
    """Records for one iteration's rollouts, in the order given.

    ``groups`` is either

    - a list of trajectory groups (``groups_P``): each a list of trajectories, or a
      tinker-cookbook-like ``TrajectoryGroup`` (``trajectories_G``, ``final_rewards_G``,
      ``metrics_G``; also wrapped as ``RolloutSummaryGroup`` with ``tags`` and
      ``sampling_client_step``). ``group_idx``/``traj_idx`` are the positions. A
      trajectory is a dict ``{"steps": [...], "final_reward": 0.0,
      "trajectory_metrics": {}, "final_ob_len": None}`` (all optional; ``"metrics"`` is
      accepted for ``trajectory_metrics``; ``total_reward`` is computed when absent), a
      :class:`TrajectorySummary`, or an object with ``.transitions`` (tinker-cookbook
      ``Trajectory``). A step is a dict ``{"reward": r, "ob_len": 0, "ac_len": 0,
      "episode_done": <is last>, "metrics": {}, "logs": {}}`` (only ``reward``
      required), a :class:`StepSummary`, or an object with ``.reward``,
      ``.episode_done``, ``.metrics``, ``.logs`` and ``.ob_len``/``.ac_len`` or
      ``.ob``/``.ac`` (tinker ``ModelInput.length``, ``len(ac.tokens)``);
    - or ready-made records: a flat list of :class:`TrajectorySummary` or dicts with
      ``group_idx`` (e.g. what tinker-cookbook's ``serialize_rollout_summaries``
      returns); their ``group_idx``/``traj_idx`` are kept.

    ``tags`` is one tag list for every group or one list per group;
    ``sampling_client_step`` one int/None for all or one per group. Values given in a
    trajectory dict or a wrapper win. numpy/torch scalars become Python numbers. The
    records reference the caller's metrics/logs dicts when they need no conversion.

    Raises:
        TypeError: a value of the wrong type (a metric that is not a number/str, a
            token count that is not an int >= 0, ...); the message names the group,
            trajectory, step and key.
        ValueError: unknown keys in a dict, a record whose iteration or split differs
            from this call's, per-group lists of the wrong length, a bad ``split``.
    """
    return build(groups, iteration, _split_for(split, eval_name), tags, sampling_client_step)[0]


_ENCODER = msgspec.json.Encoder()


def _encode_slow(record: TrajectorySummary, strict_json: bool) -> bytes:
    """Python's json for records with non-finite floats (tokens or null) or lone surrogates."""
    plain = to_jsonable(msgspec.to_builtins(record), "rollout summary", strict_json, raw=False)
    text = json.dumps(plain, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        return json.dumps(plain, separators=(",", ":"), ensure_ascii=True).encode()


def _encode(records: list[TrajectorySummary], dirty: set[int], strict_json: bool) -> bytes:
    if not dirty:
        try:
            return _ENCODER.encode_lines(records)
        except UnicodeEncodeError:
            pass
    out = bytearray()
    for i, rec in enumerate(records):
        if i in dirty:
            out += _encode_slow(rec, strict_json)
        else:
            try:
                out += _ENCODER.encode(rec)
            except UnicodeEncodeError:
                out += _encode_slow(rec, strict_json)
        out += b"\n"
    return bytes(out)


def write_rollouts(
    storage: Storage,
    iteration: int,
    groups: Sequence[Any],
    *,
    split: str | None = None,
    eval_name: str | None = None,
    tags: Sequence[str] | Sequence[Sequence[str]] | None = None,
    sampling_client_step: int | Sequence[int | None] | None = None,
    strict_json: bool = False,
) -> list[TrajectorySummary]:
    """Write one iteration's rollout summaries to ``storage``; return the records.

    The file is ``train_iteration_NNNNNN_rollout_summaries.jsonl``, or
    ``eval_<name>_iteration_NNNNNN_rollout_summaries.jsonl`` with ``eval_name``. It is
    written whole and atomically; a second call for the same iteration and split
    replaces it. ``groups``, ``tags`` and ``sampling_client_step`` are as in
    :func:`build_rollout_summaries`. ``strict_json`` writes non-finite floats as null.

    Raises:
        TypeError, ValueError: as :func:`build_rollout_summaries`; nothing is written.
        OSError: from ``storage.write`` (``StorageError`` for backend failures).
    """
    name, records, data = encode_rollouts(
        iteration, groups, split=split, eval_name=eval_name, tags=tags,
        sampling_client_step=sampling_client_step, strict_json=strict_json,
    )
    storage.write(name, data)
    return records


def encode_rollouts(
    iteration: int,
    groups: Sequence[Any],
    *,
    split: str | None = None,
    eval_name: str | None = None,
    tags: Any = None,
    sampling_client_step: Any = None,
    strict_json: bool = False,
) -> tuple[str, list[TrajectorySummary], bytes]:
    """``(file name, records, file bytes)`` that :func:`write_rollouts` writes (same arguments)."""
    name = artifact_name(iteration, "rollout_summaries", eval_name)
    records, dirty, recheck = build(groups, iteration, _split_for(split, eval_name), tags, sampling_client_step)
    try:
        data = _encode(records, dirty, strict_json)
    except TypeError:  # a value the quick batch check let through (numpy scalar, odd key)
        data = _encode(records, recheck(), strict_json)
    return name, records, data


# ------------------------------------------------------------------------------- reading

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
                warnings.warn(f"{where}: dropped a torn last line ({len(line)} bytes): {e}", RuntimeWarning, stacklevel=3)
                break
            raise RunFormatError(f"{where}, line {i + 1}: not a rollout summary record: {e}") from None
    return out


def _rollout_files(
    storage: Storage, iteration: int | None, split: str | None, eval_name: str | None
) -> list[str]:
    if split not in (None, "train", "eval"):
        raise ValueError(f"split must be 'train', 'eval' or None (both), got {split!r}")
    if eval_name is not None:
        if split == "train":
            raise ValueError(f"eval_name={eval_name!r} with split='train': evaluator files are split 'eval'")
        split, eval_name = "eval", safe_eval_name(eval_name)
    from rllog.reader import parse_iteration_file  # also knows tinker-cookbook's iteration_NNNNNN/ layout

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
    layout is read too. Filters: ``iteration`` (None = all), ``split`` (``"train"``,
    ``"eval"``, None = both), ``eval_name`` (one evaluator, raw or file-safe name).

    Raises:
        RunFormatError: a file holds a line that is not a record.
        FileNotFoundError: ``source`` is a local path that does not exist.
    """
    if isinstance(source, (str, os.PathLike)) and os.path.isfile(source):
        with open(source, "rb") as f:
            yield from decode_rollout_summaries(f.read(), os.fspath(source))
        return
    if isinstance(source, (str, os.PathLike)) and "://" not in os.fspath(source) and not os.path.isdir(source):
        raise FileNotFoundError(f"no run folder or rollout summaries file at {os.fspath(source)!r}")
    storage = source if isinstance(source, Storage) else open_for_reading(source)
    try:
        for name in _rollout_files(storage, iteration, split, eval_name):
            yield from decode_rollout_summaries(storage.read(name), f"{storage.url}/{name}")
    finally:
        if storage is not source:
            storage.close()


def _records(source: Any, iteration: int | None, split: str | None, eval_name: str | None) -> Iterable[TrajectorySummary]:
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
            row.update(step_idx=s.step_idx, ob_len=s.ob_len, ac_len=s.ac_len, reward=s.reward, episode_done=s.episode_done)
            for k, v in s.metrics.items():
                row[f"metrics/{k}"] = v
            for k, v in s.logs.items():
                row[f"logs/{k}"] = v
            rows.append(row)
    return pd.DataFrame.from_records(rows)


# ------------------------------------------------------------------------ summary metrics


def _numeric(v: Any) -> bool:
    return type(v) in (float, int, bool)


def _batch_metrics(records: list[TrajectorySummary], groups: list[list[TrajectorySummary]], good_threshold: float) -> dict[str, float]:
    steps = [s for r in records for s in r.steps]
    turns = len(steps)
    episodes = len(records)
    ac = sum(s.ac_len for s in steps)
    ob = sum(s.ob_len for s in steps)
    out: dict[str, float] = {
        "ac_tokens_per_turn": ac / turns if turns else 0.0,
        "ob_tokens_per_turn": ob / turns if turns else 0.0,
        "turns_per_episode": turns / episodes if episodes else 0.0,
        "total_episodes": episodes,
        "total_turns": turns,
        "total_ac_tokens": ac,
        "total_ob_tokens": ob,
        "reward/total": sum(r.total_reward for r in records) / episodes if episodes else 0.0,
    }
    sums: dict[str, list[float]] = {}
    for d in [s.metrics for s in steps] + [r.trajectory_metrics for r in records]:
        for k, v in d.items():
            if _numeric(v):
                acc = sums.setdefault(k, [0.0, 0])
                acc[0] += v
                acc[1] += 1
    out.update({k: total / n for k, (total, n) in sums.items()})
    mixed = good = bad = 0
    for g in groups:
        first = g[0].total_reward
        if all(r.total_reward == first for r in g):
            if first >= good_threshold:
                good += 1
            else:
                bad += 1
        else:
            mixed += 1
    n = len(groups)
    out["by_group/frac_mixed"] = mixed / n if n else 0.0
    out["by_group/frac_all_good"] = good / n if n else 0.0
    out["by_group/frac_all_bad"] = bad / n if n else 0.0
    return out


def summarize_rollouts(
    rollouts: Sequence[Any],
    *,
    tags: Sequence[str] | Sequence[Sequence[str]] | None = None,
    good_threshold: float = 0.5,
    prefix: str = "",
) -> dict[str, float]:
    """The standard per-iteration rollout metrics an RL loop logs, as tinker-cookbook names them.

    ``rollouts`` is a list of :class:`TrajectorySummary` (e.g. from
    :func:`write_rollouts` or :func:`read_rollouts`) or anything
    :func:`build_rollout_summaries` accepts (``tags`` then applies as there). Groups are
    the records sharing ``(split, iteration, group_idx)``; a group's tags are those of
    its first record. Keys, for ``<scope>`` = ``all`` and, when some tag covers only part
    of the groups, each tag (``env/<tag>/...``, before the ``env/all/...`` keys):

    - ``env/<scope>/ac_tokens_per_turn`` = Σ ac_len / number of steps (0.0 if no steps);
      ``ob_tokens_per_turn`` likewise with ob_len.
    - ``turns_per_episode`` = number of steps / number of trajectories (0.0 if none).
    - ``total_episodes``, ``total_turns``, ``total_ac_tokens``, ``total_ob_tokens``: counts.
    - ``reward/total`` = mean of ``total_reward`` over trajectories (0.0 if none; NaN
      if any is NaN).
    - ``<metric>`` for every key in step ``metrics`` or ``trajectory_metrics``: the
      mean over the dicts that hold it with a number or bool (None and strings skipped).
    - ``by_group/frac_all_good`` = fraction of groups whose total rewards are all equal
      and ``>= good_threshold``; ``frac_all_bad``: all equal and below it;
      ``frac_mixed``: not all equal (a NaN makes a group mixed). 0.0 with no groups.

    These follow tinker-cookbook's ``compute_trajectory_metrics``
    (``tinker_cookbook/rl/metric_util.py``), except ``total_cached_ob_tokens``, which
    summaries do not record. ``prefix`` is put before every key, e.g. ``"test/"`` for
    an evaluator.

    Raises:
        TypeError, ValueError: as :func:`build_rollout_summaries` for raw groups.
    """
    records = list(rollouts)
    if records and not all(isinstance(r, TrajectorySummary) for r in records):
        records = build_rollout_summaries(records, 0, tags=tags)
    groups: dict[tuple[str, int, int], list[TrajectorySummary]] = {}
    for r in records:
        groups.setdefault((r.split, r.iteration, r.group_idx), []).append(r)
    tag_groups: dict[str, list[list[TrajectorySummary]]] = {}
    for g in groups.values():
        for tag in g[0].tags:
            tag_groups.setdefault(tag, []).append(g)
    out: dict[str, float] = {}
    if any(len(gs) < len(groups) for gs in tag_groups.values()):
        for tag, gs in tag_groups.items():
            recs = [r for g in gs for r in g]
            out.update({f"{prefix}env/{tag}/{k}": v for k, v in _batch_metrics(recs, gs, good_threshold).items()})
    out.update({f"{prefix}env/all/{k}": v for k, v in _batch_metrics(records, list(groups.values()), good_threshold).items()})
    return out
