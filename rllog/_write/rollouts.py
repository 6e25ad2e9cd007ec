"""Writing rollout summaries: one JSON object per trajectory, one file per iteration and split.

Files (docs/FORMATS.md §1, names from :func:`rllog._format.layout.artifact_name`)::

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
- Lone surrogates in strings are written as U+FFFD (the rule of :mod:`rllog._format.codec`).

Each file is written whole and atomically through :meth:`Storage.write`; writing the
same iteration and split again (a resumed run re-doing an iteration) replaces it.
Readers ignore keys they do not know, so files from a newer ``schema_version`` with
extra fields still read.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from rllog._format.codec import to_jsonable
from rllog._format.layout import artifact_name
from rllog._format.records import TrajectorySummary
from rllog._write.rollout_input import Rebuild, build
from rllog.storage import Storage

__all__ = [
    "build_rollout_summaries",
    "encode_rollouts",
    "write_rollouts",
    "summarize_rollouts",
    "RolloutFiles",
]

# ------------------------------------------------------------------------------- writing


def _split_for(split: str | None, eval_name: str | None) -> str:
    if split is None:
        return "train" if eval_name is None else f"eval/{eval_name}"
    if not isinstance(split, str) or not split:
        raise TypeError(f"split must be a non-empty str, got {split!r:.60}")
    want = "train" if eval_name is None else f"eval/{eval_name}"
    if split != want:
        raise ValueError(
            f"split {split!r} with eval_name={eval_name!r}: a record's split is 'train' for training "
            f"rollouts and 'eval/<eval_name>' for an evaluator (here {want!r}), the same value "
            "read_rollouts(split=...) selects; leave split out to get it"
        )
    return split


def build_rollout_summaries(
    iteration: int,
    groups: Sequence[Any],
    *,
    split: str | None = None,
    eval_name: str | None = None,
    tags: Sequence[str] | Sequence[Sequence[str]] | None = None,
    sampling_client_step: int | Sequence[int | None] | None = None,
) -> list[TrajectorySummary]:
    """Records for one iteration's rollouts, in the order given.

    ``iteration`` comes first, as in :meth:`rllog.RunLogger.log_rollouts` and
    :func:`write_rollouts`. ``groups`` is either

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
    _check_order(iteration, groups, "build_rollout_summaries")
    return build(groups, iteration, _split_for(split, eval_name), tags, sampling_client_step)[0]


def _check_order(iteration: Any, groups: Any, call: str) -> None:
    """Fail fast, with the fix, when a caller passes ``(groups, iteration)`` (the order before 0.2)."""
    if isinstance(groups, int) and not isinstance(groups, bool) and not isinstance(iteration, int):
        raise TypeError(
            f"{call}(iteration, groups): got a {type(iteration).__name__} for iteration and the int {groups} "
            f"for groups; the iteration comes first (as in log_rollouts), e.g. {call}({groups}, groups)"
        )


_ENCODER = msgspec.json.Encoder()


def _encode_slow(record: TrajectorySummary, strict_json: bool) -> bytes:
    """Python's json for records with non-finite floats (tokens or null) or lone surrogates
    (U+FFFD, the rule of :mod:`rllog._format.codec`)."""
    plain = to_jsonable(msgspec.to_builtins(record), "rollout summary", strict_json, raw=False)
    return json.dumps(plain, separators=(",", ":"), ensure_ascii=False).encode()


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
        iteration,
        groups,
        split=split,
        eval_name=eval_name,
        tags=tags,
        sampling_client_step=sampling_client_step,
        strict_json=strict_json,
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
    layout: str = "flat",
) -> tuple[str, list[TrajectorySummary], bytes]:
    """``(file name, records, file bytes)`` that :func:`write_rollouts` writes (same arguments;
    ``layout`` names the file as :func:`rllog._format.layout.artifact_name`)."""
    _check_order(iteration, groups, "encode_rollouts")
    name = artifact_name(iteration, "rollout_summaries", eval_name, layout)
    split = _split_for(split, eval_name)
    records, dirty, recheck = build(groups, iteration, split, tags, sampling_client_step)
    try:
        data = _encode(records, dirty, strict_json)
    except TypeError:  # a value the quick batch check let through (numpy scalar, odd key)
        try:
            data = _encode(records, recheck(), strict_json)
        except Rebuild:  # ready records written as they were: build copies, converting
            records, dirty, recheck = build(groups, iteration, split, tags, sampling_client_step, reuse=False)
            try:
                data = _encode(records, dirty, strict_json)
            except TypeError:
                data = _encode(records, recheck(), strict_json)
    return name, records, data


# ------------------------------------------------------------------------ summary metrics


def _numeric(v: Any) -> bool:
    return type(v) in (float, int, bool)


def _batch_metrics(
    records: list[TrajectorySummary], groups: list[list[TrajectorySummary]], good_threshold: float
) -> dict[str, float]:
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
        records = build_rollout_summaries(0, records, tags=tags)
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
            out.update(
                {f"{prefix}env/{tag}/{k}": v for k, v in _batch_metrics(recs, gs, good_threshold).items()}
            )
    out.update(
        {
            f"{prefix}env/all/{k}": v
            for k, v in _batch_metrics(records, list(groups.values()), good_threshold).items()
        }
    )
    return out


class RolloutFiles:
    """Whole files (rollout summaries, logtree reports) a backend refused, kept in memory
    and written again later.

    ``add(name, data)`` replaces an unwritten file of the same name (a newer one wins);
    ``write()`` writes every kept file, oldest first, keeps the ones refused and returns
    False if any was (``warn(kind, message)`` is told once per error kind, naming the
    files kept); ``save_elsewhere()`` puts what is still unwritten into a local temp
    folder at close and returns a message naming every file.

    ``durable=False`` writes each file with ``storage.write(..., durable=False)``: no
    fsync per file locally; the run's next durable flush (the checkpoint barrier, close)
    fsyncs them all before a checkpoint record is appended. Only for the run's own writer:
    its checkpoints are what order these files. A worker's files are written durably
    (the learner's checkpoint cannot wait for another process's files).

    Thread-safe: the loop, user threads and the checkpoint committer's thread call it at
    once; one lock guards :attr:`unwritten` and the writes (a write of one file is never
    raced by a second write of the same bytes).
    """

    def __init__(self, storage: Storage, warn: Callable[[str, str], None], *, durable: bool = True) -> None:
        self._storage = storage
        self._warn = warn
        self._durable = durable
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.unwritten: dict[str, bytes] = {}

    def _locked(self) -> threading.Lock:
        """The lock (a new one in a forked child: the parent's may have been held at the fork)."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
        return self._lock

    def add(self, name: str, data: bytes) -> bool:
        """Keep ``data`` for ``name`` and write every kept file; False if one was refused."""
        with self._locked():
            self.unwritten.pop(name, None)  # re-added last: the newest goes after older files
            self.unwritten[name] = data
            return self._write()

    def write(self) -> bool:
        """Write every kept file; True when none is left."""
        with self._locked():
            return self._write()

    def _write(self) -> bool:
        unwritten = self.unwritten
        refused: list[str] = []
        for name in list(unwritten):
            try:
                if self._durable:  # the default: also what a storage without the keyword does
                    self._storage.write(name, unwritten[name])
                else:
                    self._storage.write(name, unwritten[name], durable=False)
            except OSError as exc:
                refused.append(name)
                self._warn(
                    f"files:{type(exc).__name__}",
                    f"could not write {self._storage.url}/{name}: {exc}. Training goes on; the file is kept "
                    "in memory with every other rollout summary file or report refused, and retried on the next write, checkpoint, "
                    "flush and at close (which names what was never written).",
                )
                continue
            del unwritten[name]
        return not refused

    def writer(self) -> KeptWriter:
        """A write-only view for whole-file writers (logtree reports): its ``write``
        keeps the file here and never raises, so a refused report is retried like a row."""
        return KeptWriter(self)

    def save_elsewhere(self) -> str | None:
        """After a last :meth:`write`: save what is still unwritten to a temp folder.
        Returns what happened, naming every file (for the logger's warnings), None when
        nothing was left."""
        with self._locked():
            if not self.unwritten or self._write():
                return None
            names = sorted(self.unwritten)
            what = f"{len(names)} file(s) could not be written to {self._storage.url}: {names}"
            try:
                folder = tempfile.mkdtemp(prefix="rllog-unwritten-files-")
                for name, data in self.unwritten.items():
                    path = os.path.join(folder, name)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(data)
            except OSError as exc:
                return f"{what}; nor to a temp folder ({exc}): they are lost"
            return f"{what}; they were saved to {folder}"


class KeptWriter:
    """``url`` and ``write(name, data)`` of a storage, through :meth:`RolloutFiles.add`:
    a refused file is kept and retried, and warned about once per error kind."""

    def __init__(self, files: RolloutFiles) -> None:
        self._files = files
        self.url = files._storage.url

    def write(self, name: str, data: bytes) -> None:
        self._files.add(name, data)
