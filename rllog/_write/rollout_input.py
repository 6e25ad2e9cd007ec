"""Turning the trajectory shapes RL loops have into rollout summary records.

Accepted shapes (see :func:`rllog.build_rollout_summaries` for the contract):

- groups: a list whose items are trajectory groups, each either a list/tuple of
  trajectories or a tinker-cookbook-like ``TrajectoryGroup`` (``trajectories_G``,
  ``final_rewards_G``, ``metrics_G``), possibly wrapped like ``RolloutSummaryGroup``
  (``trajectory_group``, ``tags``, ``sampling_client_step``);
- a trajectory: a dict with the record's keys, a :class:`TrajectorySummary`, or an object
  with ``transitions`` (tinker-cookbook ``Trajectory``);
- a step: a dict, a :class:`StepSummary`, or an object with ``reward``, ``episode_done``,
  ``metrics``, ``logs`` and either ``ob_len``/``ac_len`` or ``ob``/``ac`` token holders
  (tinker-cookbook ``Transition``: ``ob.length``, ``len(ac.tokens)``);
- records: a flat list of :class:`TrajectorySummary` or dicts that carry ``group_idx``.

The three shapes loops pass most (ready records, lists of plain dict trajectories whose
steps hold all six keys, tinker-cookbook TrajectoryGroups) are built and checked a field
at a time over the whole call (C-level map/chain passes, ``msgspec.convert`` of whole
columns); any other shape or value sends the call to the general path, which builds it a
value at a time: rewards and token counts are converted on the way in, metrics and logs
dicts are checked for the whole batch at once and converted only when that check fails
(numpy/torch scalars become Python numbers). Both give the same records, bytes and
errors. Records holding a non-finite float or a nested log value are noted: only those
take the slower encoding path.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain, islice, repeat
from operator import add, attrgetter, itemgetter
from typing import Annotated, Any, NamedTuple

import msgspec

from rllog._format.codec import scalar, to_jsonable
from rllog._format.records import SCHEMA_VERSION, StepSummary, TrajectorySummary

_FAST = frozenset({float, int, str, bool, type(None)})
_NO_DICT: dict[str, Any] = {}  # a missing metrics/logs key (each step then gets its own {})
_STR = frozenset({str})

_STEP_KEYS = frozenset(StepSummary.__struct_fields__)
#: the record's fields, and "metrics", an alias of trajectory_metrics in loop-made dicts
_TRAJ_KEYS = frozenset(TrajectorySummary.__struct_fields__) | {"metrics"}


_LEN_STYLE: dict[type, str] = {}  # how to count the tokens of each class of observation/action


def _token_len(x: Any, what: str) -> int:
    """Token count of a tinker ModelInput (``.length``), a token holder (``.tokens``) or a sequence."""
    if x is None:
        return 0
    style = _LEN_STYLE.get(type(x)) or _len_style(x)
    n = x.length if style == "length" else len(x.tokens if style == "tokens" else x)
    return n if type(n) is int and n >= 0 else _length(n, what)


def _len_style(x: Any) -> str:
    """How :func:`_token_len` counts the tokens of ``x``'s class, learnt from ``x`` (its first instance)."""
    style = _LEN_STYLE[type(x)] = (
        "length" if hasattr(x, "length") else ("tokens" if hasattr(x, "tokens") else "len")
    )
    return style


def _length(x: Any, what: str) -> int:
    if type(x) is int and x >= 0:
        return x
    v = scalar(x, what)
    if type(v) is float and v.is_integer():
        v = int(v)
    if type(v) is not int or v < 0:
        raise TypeError(f"{what}: expected a token count (int >= 0), got {type(x).__name__}: {x!r:.60}")
    return v


def _reward(x: Any, what: str) -> float:
    """``x`` as a float (numpy/torch scalars converted)."""
    if type(x) is float:
        return x
    if type(x) is int:
        return float(x)
    v = scalar(x, what)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{what}: expected a number, got {type(x).__name__}: {x!r:.60}")
    return float(v)


def _as_dict(d: Any, what: str) -> dict[Any, Any]:
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise TypeError(f"{what}: expected a dict of str to numbers/str, got {type(d).__name__}")
    return dict(d)


def _step_style(s: Any) -> str:
    """How to read a step object: "lens" (``ob_len``/``ac_len``), "tinker" (``ob.length``,
    ``ac.tokens`` and all Transition fields) or "other" (``getattr`` with defaults)."""
    if hasattr(s, "ob_len") and hasattr(s, "ac_len"):
        return "lens"
    if (
        all(hasattr(s, a) for a in ("episode_done", "metrics", "logs"))
        and hasattr(getattr(s, "ob", None), "length")
        and hasattr(getattr(s, "ac", None), "tokens")
    ):
        return "tinker"
    return "other"


def _finite(total: float) -> bool:
    return total - total == 0.0


def _numbers_ok(dicts: Sequence[dict[Any, Any]]) -> bool:
    """Quick check of metric dicts: True if all values are plain numbers and finite.

    One ``sum`` in C over every value. It also passes values msgspec cannot encode
    (a ``Fraction`` next to floats): the encoder then raises TypeError and the caller
    redoes the batch with :meth:`_Builder.check` ``(full=True)``. Keys are left to the
    encoder too (msgspec writes str, int and float keys, and raises on others).
    """
    try:
        total = sum(chain.from_iterable(map(dict.values, dicts)))
    except TypeError:  # None or str values, or not numbers at all
        return _scalars_ok(dicts)
    return type(total) is int or (type(total) is float and _finite(total))


def _scalars_ok(dicts: Sequence[dict[Any, Any]]) -> bool:
    """True if every value is a JSON scalar (str, number, bool, None) and no float is NaN/inf."""
    types = set(map(type, chain.from_iterable(map(dict.values, dicts))))
    if not types <= _FAST:
        return False
    if float not in types:
        return True
    return _finite(sum([v for v in chain.from_iterable(map(dict.values, dicts)) if type(v) is float]))


_REWARD = attrgetter("reward")
_STEPS = attrgetter("steps")
_METRICS = attrgetter("metrics")
_LOGS = attrgetter("logs")
_TRAJ_METRICS = attrgetter("trajectory_metrics")


class _Builder:
    """Builds the records of one call.

    Building only reshapes (and converts rewards and token counts). :meth:`check` then
    checks all metrics and logs dicts of the batch at once; only if that finds a
    non-str key, a value that is not a plain JSON scalar, or a non-finite float does it
    walk the records one by one, converting values (numpy scalars, nested logs) and
    noting which records need the slow encoder.
    """

    __slots__ = ("step_cls", "traj_cls", "iteration", "split", "_styles")

    def __init__(self, iteration: int, split: str) -> None:

        self.step_cls = StepSummary
        self.traj_cls = TrajectorySummary
        self.iteration = iteration
        self.split = split
        self._styles: dict[type, str] = {}  # step object class -> _step_style

    # -- steps ----------------------------------------------------------------------------

    def step(self, s: Any, i: int, last: bool) -> StepSummary:
        if type(s) is dict:
            if not _STEP_KEYS.issuperset(s):
                raise ValueError(
                    f"unknown keys {sorted(set(s) - _STEP_KEYS)}; a step dict has {sorted(_STEP_KEYS)}"
                )
            if "reward" not in s:
                raise ValueError(f"a step dict needs 'reward', got keys {sorted(s)}")
            ob_len = s.get("ob_len", 0)
            ac_len = s.get("ac_len", 0)
            done = s.get("episode_done", last)
            metrics = s.get("metrics")
            logs = s.get("logs")
            reward = s["reward"]
        elif hasattr(s, "reward"):
            cls = type(s)
            style = self._styles.get(cls)
            if style is None:
                style = self._styles[cls] = _step_style(s)
            try:
                if style == "tinker":  # tinker-cookbook Transition: ob.length, len(ac.tokens)
                    ob_len, ac_len = s.ob.length, len(s.ac.tokens)
                    done, metrics, logs = s.episode_done, s.metrics, s.logs
                elif style == "lens":
                    ob_len, ac_len = s.ob_len, s.ac_len
                    done, metrics, logs = (
                        getattr(s, "episode_done", last),
                        getattr(s, "metrics", None),
                        getattr(s, "logs", None),
                    )
                else:
                    raise AttributeError
            except AttributeError:
                ob_len = _token_len(getattr(s, "ob", None), "ob length")
                ac_len = _token_len(getattr(s, "ac", None), "ac length")
                done, metrics, logs = (
                    getattr(s, "episode_done", last),
                    getattr(s, "metrics", None),
                    getattr(s, "logs", None),
                )
            reward = s.reward
        else:
            raise TypeError(
                f"expected a dict, a StepSummary or a transition object with .reward, got {type(s).__name__}"
            )
        if type(ob_len) is not int or ob_len < 0:
            ob_len = _length(ob_len, "ob_len")
        if type(ac_len) is not int or ac_len < 0:
            ac_len = _length(ac_len, "ac_len")
        if type(reward) is not float:
            reward = _reward(reward, "reward")
        return self.step_cls(
            i,
            ob_len,
            ac_len,
            reward,
            done if type(done) is bool else bool(done),
            metrics if type(metrics) is dict else _as_dict(metrics, "metrics"),
            logs if type(logs) is dict else _as_dict(logs, "logs"),
        )

    def steps(self, steps: Any) -> list[StepSummary]:
        if not steps:
            return []
        last = len(steps) - 1
        step = self.step
        cls = self.step_cls
        styles = self._styles  # step class -> _step_style, filled by self.step on a class's first step
        out: list[StepSummary] = []
        append = out.append
        try:
            for i, s in enumerate(steps):
                # the common dict step, inline: known keys, plain values (anything else: self.step)
                if type(s) is dict and s.keys() <= _STEP_KEYS and "reward" in s:
                    reward = s["reward"]
                    ob_len = s.get("ob_len", 0)
                    ac_len = s.get("ac_len", 0)
                    done = s.get("episode_done", i == last)
                    metrics = s.get("metrics", _NO_DICT)
                    logs = s.get("logs", _NO_DICT)
                    if (
                        type(reward) is float
                        and type(ob_len) is int
                        and ob_len >= 0
                        and type(ac_len) is int
                        and ac_len >= 0
                        and type(done) is bool
                        and type(metrics) is dict
                        and type(logs) is dict
                    ):
                        append(
                            cls(
                                i,
                                ob_len,
                                ac_len,
                                reward,
                                done,
                                {} if metrics is _NO_DICT else metrics,
                                {} if logs is _NO_DICT else logs,
                            )
                        )
                        continue
                elif styles.get(type(s)) == "tinker":  # tinker-cookbook Transition, inline
                    try:
                        reward, ob_len, ac_len = s.reward, s.ob.length, len(s.ac.tokens)
                        done, metrics, logs = s.episode_done, s.metrics, s.logs
                    except AttributeError:  # an odd one of the class: self.step says what it lacks
                        reward = None
                    if (
                        type(reward) is float
                        and type(ob_len) is int
                        and ob_len >= 0
                        and type(done) is bool
                        and type(metrics) is dict
                        and type(logs) is dict
                    ):
                        append(cls(i, ob_len, ac_len, reward, done, metrics, logs))
                        continue
                append(step(s, i, i == last))
        except (TypeError, ValueError) as e:
            raise type(e)(f"step {len(out)}: {e}") from None
        return out

    # -- trajectories ---------------------------------------------------------------------

    def trajectory(
        self,
        t: Any,
        group_idx: int,
        traj_idx: int,
        tags: list[str],
        sampling_client_step: int | None,
        final_reward: Any = None,
        metrics: Any = None,
        keep_idx: bool = False,
    ) -> TrajectorySummary:
        """One record; ``keep_idx`` keeps the indices a ready-made record carries."""
        if type(t) is not dict:
            if isinstance(t, self.traj_cls):
                t = {f: getattr(t, f) for f in t.__struct_fields__}
            elif isinstance(t, Mapping):
                t = dict(t)
        if type(t) is dict:
            if not _TRAJ_KEYS.issuperset(t):
                raise ValueError(
                    f"unknown keys {sorted(set(t) - _TRAJ_KEYS)}; a trajectory dict has "
                    f"{sorted(_TRAJ_KEYS - {'metrics'})}"
                )
            if "iteration" in t or "split" in t:
                self._check_meta(t)
            if keep_idx:
                group_idx = _length(t["group_idx"], "group_idx")
                traj_idx = _length(t.get("traj_idx", traj_idx), "traj_idx")
            if "tags" in t:
                tags = _tag_list(t["tags"], "tags")
            if "sampling_client_step" in t:
                sampling_client_step = _opt_step(t["sampling_client_step"])
            steps = self.steps(t.get("steps"))
            final_reward = t.get("final_reward", 0.0)
            total = t.get("total_reward")
            metrics = t.get("trajectory_metrics", t.get("metrics"))
            final_ob_len = t.get("final_ob_len")
        else:
            transitions = getattr(t, "transitions", None)
            if transitions is None:
                raise TypeError(
                    "expected a trajectory: a dict with 'steps', a TrajectorySummary, or an object with "
                    f".transitions (tinker-cookbook Trajectory), got {type(t).__name__}"
                )
            steps = self.steps(transitions)
            if final_reward is None:
                final_reward = getattr(t, "final_reward", 0.0)
            if metrics is None:
                metrics = getattr(t, "metrics", None)
            total = None
            final_ob = getattr(t, "final_ob", None)
            final_ob_len = (
                _token_len(final_ob, "final_ob length")
                if final_ob is not None
                else getattr(t, "final_ob_len", None)
            )
        if type(final_reward) is not float:
            final_reward = _reward(final_reward, "final_reward")
        if total is None:
            total = sum(map(_REWARD, steps)) + final_reward
        elif type(total) is not float:
            total = _reward(total, "total_reward")
        if final_ob_len is not None and (type(final_ob_len) is not int or final_ob_len < 0):
            final_ob_len = _length(final_ob_len, "final_ob_len")
        return self.traj_cls(
            split=self.split,
            iteration=self.iteration,
            group_idx=group_idx,
            traj_idx=traj_idx,
            tags=tags,
            sampling_client_step=sampling_client_step,
            total_reward=total,
            final_reward=final_reward,
            trajectory_metrics=metrics if type(metrics) is dict else _as_dict(metrics, "trajectory_metrics"),
            final_ob_len=final_ob_len,
            steps=steps,
        )

    def _check_meta(self, d: dict[str, Any]) -> None:
        for key, want in (("iteration", self.iteration), ("split", self.split)):
            if key in d and d[key] != want:
                raise ValueError(f"record has {key}={d[key]!r} but this call writes {key}={want!r}")

    # -- values ---------------------------------------------------------------------------

    def check(self, records: list[TrajectorySummary], label: Any, full: bool = False) -> set[int]:
        """Check and convert the metrics/logs of ``records``; the indices needing the slow encoder.

        First one quick check of the whole batch; if it fails, or with ``full``, each
        record is checked and converted. ``label(i, record)`` names a record in errors.

        Raises:
            TypeError: a key that is not a str/int/float, or a value that is not a
                number, bool, str or None (nested lists/dicts are allowed in logs).
        """
        if not full and _quick_ok(records):
            return set()
        dirty = set()
        for i, r in enumerate(records):
            k = -1
            try:
                special = not _finite(r.total_reward + r.final_reward)
                r.trajectory_metrics, bad = _values(r.trajectory_metrics, "trajectory_metrics", False)
                special |= bad
                for k, s in enumerate(r.steps):  # noqa: B007  # k names the failing step in the error below
                    s.metrics, bad = _values(s.metrics, "metrics", False)
                    special |= bad
                    s.logs, bad = _values(s.logs, "logs", True)
                    special |= bad or not _finite(s.reward)
            except (TypeError, ValueError) as e:
                where = label(i, r) + (f": step {k}" if k >= 0 else "")
                raise type(e)(f"rollouts for iteration {self.iteration}, {where}: {e}") from None
            if special:
                dirty.add(i)
        return dirty


def _key(k: Any, what: str) -> str:
    if isinstance(k, str):
        return str(k)
    if isinstance(k, int) and not isinstance(k, bool):
        return str(int(k))
    if isinstance(k, float):
        return repr(float(k))
    raise TypeError(
        f"{what}: keys must be str (or int/float, written as strings), got {type(k).__name__} {k!r:.60}"
    )


def _values(d: dict[Any, Any], what: str, nested: bool) -> tuple[dict[str, Any], bool]:
    """``d`` with str keys and JSON scalar values (nested lists/dicts too if ``nested``), and
    whether it holds a non-finite float or a nested value (which the slow encoder handles)."""
    if _STR.issuperset(map(type, d)) and _scalars_ok([d]):
        return d, False
    out = {}
    special = False
    for k, v in d.items():
        if type(k) is not str:
            k = _key(k, what)
        try:
            v = scalar(v, f"{what}[{k!r}]")
        except TypeError:
            if not (nested and (isinstance(v, (Mapping, Sequence)) or hasattr(v, "tolist"))):
                raise
            v = to_jsonable(v, f"{what}[{k!r}]", raw=False)
            special = True
        if type(v) is float and not _finite(v):
            special = True
        out[k] = v
    return out, special


def _tag_list(tags: Any, what: str) -> list[str]:
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
        raise TypeError(f"{what}: expected a list of str, got {type(tags).__name__}: {tags!r:.60}")
    for t in tags:
        if not isinstance(t, str):
            raise TypeError(f"{what}: expected a list of str, got an item {type(t).__name__}: {t!r:.60}")
    return list(tags)


def _opt_step(x: Any) -> int | None:
    return None if x is None else _length(x, "sampling_client_step")


def _per_group(value: Any, n: int, what: str, convert: Any, is_single: Any) -> list[Any]:
    """``value`` for each of ``n`` groups: one value for all, or a list of one per group."""
    if is_single(value):
        v = convert(value, what)
        return [v] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = f"{len(value)} items" if isinstance(value, (list, tuple)) else type(value).__name__
        raise ValueError(
            f"{what}: expected one value for all groups or a list of one per group ({n}), got {got}"
        )
    return [convert(v, f"{what}[{i}]") for i, v in enumerate(value)]


def _record_label(i: int, r: TrajectorySummary) -> str:
    return f"record {i}"


def _traj_label(i: int, r: TrajectorySummary) -> str:
    return f"group {r.group_idx}, trajectory {r.traj_idx}"


def _is_record(x: Any, traj_cls: type) -> bool:
    return isinstance(x, traj_cls) or (isinstance(x, Mapping) and "group_idx" in x)


# ------------------------------------------------------------- whole columns at once
# The common shapes are built and checked a column at a time (one field of every step or
# trajectory of the call) with C-level map/zip/chain and msgspec.convert, not value by
# value: ready records written as they are (:func:`_as_written`), lists of plain dict
# trajectories whose steps hold all six keys (:func:`_plain_dicts`) and tinker-cookbook
# TrajectoryGroups (:func:`_plain_tinker`). When a column holds anything else (a missing
# key, an int token count given as a float, a numpy scalar, a None), they return None and
# the general path builds the call, converting values and naming what is wrong; the
# records and bytes are the same either way.

_NN = Annotated[int, msgspec.Meta(ge=0)]
_NNS = list[_NN]
_OPT_NNS = list[_NN | None]
_FLOATS = list[float]  # exact floats; ints become floats, as _reward makes them
_BOOLS = list[bool]
_FLOAT = frozenset({float})
_BOOL = frozenset({bool})
_DICT = frozenset({dict})
_LIST = frozenset({list})
_SEQ = frozenset({list, tuple})
_STEP_DICT_KEYS = ("ob_len", "ac_len", "reward", "episode_done", "metrics", "logs")
_STEP_GETTERS = tuple(map(itemgetter, _STEP_DICT_KEYS))
_PLAIN_TRAJ_KEYS = frozenset({"steps", "final_reward", "trajectory_metrics", "metrics", "final_ob_len"})
_TRANSITION_GETTERS = tuple(map(attrgetter, ("ob", "ac", "reward", "episode_done", "metrics", "logs")))
_TRANSITIONS = attrgetter("transitions")
_TOKENS = attrgetter("tokens")
_LENGTH = attrgetter("length")
_CHUNKS = attrgetter("chunks")
_TINKER_GROUP = attrgetter("trajectories_G", "final_rewards_G", "metrics_G")


def _column(items: list[Any], name: str) -> list[Any]:
    """Attribute ``name`` of every item."""
    return list(map(attrgetter(name), items))


def _as_written(
    records: Sequence[Any], iteration: int, split: str, tags: Any, sampling_client_step: Any
) -> list[TrajectorySummary] | None:
    """``records`` when every one is a :class:`TrajectorySummary` that building would
    reproduce field for field (this call's split and iteration, the schema version, value
    types as written, each step's ``step_idx`` its position) and that needs no conversion
    or slow encoding (:func:`_values_ok`), else None.

    Checked a field at a time over all records (one C-level pass each), so ready records
    cost a fraction of rebuilding them; the records are then written as they are, not
    copied (a value the checks let through and the encoder refuses sends the call to the
    rebuilding path).
    """
    if type(records) is not list or tags is not None or sampling_client_step is not None:
        return None
    if set(map(type, records)) != {TrajectorySummary}:
        return None
    try:
        versions, iterations = _column(records, "schema_version"), _column(records, "iteration")
        if (
            set(versions) != {SCHEMA_VERSION}
            or set(iterations) != {iteration}
            or set(_column(records, "split")) != {split}
        ):
            return None
        group_idx, traj_idx = _column(records, "group_idx"), _column(records, "traj_idx")
        msgspec.convert(versions + iterations + group_idx + traj_idx, _NNS)  # exact ints (no bool, no float)
        client_steps, final_ob_lens = (
            _column(records, "sampling_client_step"),
            _column(records, "final_ob_len"),
        )
        msgspec.convert(client_steps + final_ob_lens, _OPT_NNS)
        totals, finals = _column(records, "total_reward"), _column(records, "final_reward")
        traj_metrics, tags_R, steps_R = (
            _column(records, "trajectory_metrics"),
            _column(records, "tags"),
            _column(records, "steps"),
        )
        if not (
            _FLOAT.issuperset(map(type, totals + finals))
            and _DICT.issuperset(map(type, traj_metrics))
            and _LIST.issuperset(map(type, tags_R + steps_R))
            and _STR.issuperset(map(type, chain.from_iterable(tags_R)))
        ):
            return None
        steps = list(chain.from_iterable(steps_R))
        rewards: list[Any] = []
        metrics: list[Any] = []
        logs: list[Any] = []
        if steps:
            if set(map(type, steps)) != {StepSummary}:
                return None
            step_idx = _column(steps, "step_idx")
            msgspec.convert(step_idx + _column(steps, "ob_len") + _column(steps, "ac_len"), _NNS)
            if step_idx != list(chain.from_iterable(map(range, map(len, steps_R)))):
                return None
            rewards, metrics, logs = (
                _column(steps, "reward"),
                _column(steps, "metrics"),
                _column(steps, "logs"),
            )
            if not (
                _FLOAT.issuperset(map(type, rewards))
                and _BOOL.issuperset(map(type, _column(steps, "episode_done")))
                and _DICT.issuperset(map(type, metrics + logs))
            ):
                return None
    except (msgspec.ValidationError, TypeError):  # a value of another type, one that does not hash
        return None
    return records if _values_ok(rewards + totals + finals, metrics, traj_metrics, logs) else None


def _values_ok(
    floats: list[float],
    metrics: Sequence[dict[Any, Any]],
    traj_metrics: Sequence[dict[Any, Any]],
    logs: Sequence[dict[Any, Any]],
) -> bool:
    """The batch check of :meth:`_Builder.check`: every reward finite, every metric a
    finite number, every log value a JSON scalar (then no record needs the slow encoder).

    ``floats`` are the rewards, totals and final rewards to check, or only the totals when
    building just summed them from the others (a finite sum vouches for every term: a NaN
    or infinity, once added, never leaves it); ``metrics``, ``traj_metrics`` and ``logs``
    the steps' and trajectories' dicts.
    """
    return _finite(sum(floats)) and _numbers_ok(metrics) and _numbers_ok(traj_metrics) and _scalars_ok(logs)


def _quick_ok(records: list[TrajectorySummary]) -> bool:
    """:func:`_values_ok` of any records."""
    steps = list(chain.from_iterable(map(_STEPS, records)))
    return _values_ok(
        _column(steps, "reward") + _column(records, "total_reward") + _column(records, "final_reward"),
        list(map(_METRICS, steps)),
        list(map(_TRAJ_METRICS, records)),
        list(map(_LOGS, steps)),
    )


class _Columns(NamedTuple):
    """One call's values a field at a time: steps flat in order, trajectories flat in order."""

    glens: list[int]  # trajectories per group
    lens: list[int]  # steps per trajectory
    ob_lens: Sequence[Any]  # one per step, from here to logs
    ac_lens: Sequence[Any]
    rewards: Sequence[Any]
    dones: Sequence[Any]
    metrics: Sequence[Any]
    logs: Sequence[Any]
    final_rewards: Sequence[Any]  # one per trajectory, from here on
    traj_metrics: Sequence[Any]
    final_ob_lens: Sequence[Any]


def _plain_dicts(groups: Sequence[Any]) -> _Columns | None:
    """The columns of ``groups`` when every group is a list/tuple of plain dict
    trajectories (keys among steps, final_reward, trajectory_metrics/metrics,
    final_ob_len) whose steps are dicts holding exactly the six step keys; else None."""
    if not _SEQ.issuperset(map(type, groups)):
        return None
    glens = list(map(len, groups))
    trajs = list(chain.from_iterable(groups))
    if not _DICT.issuperset(map(type, trajs)) or not _PLAIN_TRAJ_KEYS.issuperset(chain.from_iterable(trajs)):
        return None
    step_lists: list[Any] = list(map(dict.get, trajs, repeat("steps")))
    if not _SEQ.issuperset(map(type, step_lists)):
        return None
    flat = list(chain.from_iterable(step_lists))
    if not _DICT.issuperset(map(type, flat)) or sum(map(len, flat)) != len(_STEP_DICT_KEYS) * len(flat):
        return None
    try:
        ob_lens, ac_lens, rewards, dones, metrics, logs = [list(map(get, flat)) for get in _STEP_GETTERS]
    except KeyError:  # a step without one of the keys (then another one has an unknown key)
        return None
    return _Columns(
        glens,
        list(map(len, step_lists)),
        ob_lens,
        ac_lens,
        rewards,
        dones,
        metrics,
        logs,
        list(map(dict.get, trajs, repeat("final_reward"), repeat(0.0))),
        list(map(dict.get, trajs, repeat("trajectory_metrics"), map(dict.get, trajs, repeat("metrics")))),
        list(map(dict.get, trajs, repeat("final_ob_len"))),
    )


def _plain_tinker(groups: Sequence[Any], tags_P: list[Any], steps_P: list[Any]) -> _Columns | None:
    """The columns of ``groups`` when every group is a tinker-cookbook ``TrajectoryGroup``
    (or wrapped in a ``RolloutSummaryGroup``, whose tags and sampling_client_step then
    replace those in ``tags_P``/``steps_P``) of ``Trajectory`` objects (``transitions``,
    ``final_ob`` with ``.length``) of ``Transition`` objects (:func:`_step_style` "tinker");
    else None. Token counts are ``ob.length`` and ``len(ac.tokens)``, as :meth:`_Builder.step`."""
    parts = []
    for g, group in enumerate(groups):
        wrapped = getattr(group, "trajectory_group", None)
        if wrapped is not None:
            tags_P[g] = _tag_list(getattr(group, "tags", tags_P[g]), f"group {g} tags")
            steps_P[g] = _opt_step(getattr(group, "sampling_client_step", steps_P[g]))
            group = wrapped
        if getattr(group, "trajectories_G", None) is None:
            return None
        parts.append(_TINKER_GROUP(group))
    trajs_P, final_rewards_P, metrics_P = zip(*parts, strict=True) if parts else ((), (), ())
    glens = list(map(len, trajs_P))
    trajs = list(chain.from_iterable(trajs_P))
    final_rewards = list(chain.from_iterable(map(islice, final_rewards_P, glens)))
    metrics = list(chain.from_iterable(map(islice, metrics_P, glens)))
    if len(final_rewards) != len(trajs) or len(metrics) != len(trajs):
        return None  # fewer values than trajectories in a group: the general path says which
    if any(issubclass(cls, (TrajectorySummary, Mapping)) for cls in set(map(type, trajs))):
        return None
    step_lists = list(map(_TRANSITIONS, trajs))
    if not _SEQ.issuperset(map(type, step_lists)):
        return None
    flat = list(chain.from_iterable(step_lists))
    if any(_step_style(s) != "tinker" for s in _first_of_each_class(flat)):
        return None
    final_obs = list(map(getattr, trajs, repeat("final_ob"), repeat(None)))
    for ob in _first_of_each_class(final_obs):
        if ob is None or (_LEN_STYLE.get(type(ob)) or _len_style(ob)) != "length":
            return None
    final_ob_lens = msgspec.convert(_ob_lengths(final_obs), _NNS)  # a count, never None as a dict's may be
    lens = list(map(len, step_lists))
    if not flat:
        return _Columns(glens, lens, (), (), (), (), (), (), final_rewards, metrics, final_ob_lens)
    obs, acs, rewards, dones, step_metrics, logs = [list(map(get, flat)) for get in _TRANSITION_GETTERS]
    ob_lens, ac_lens = _ob_lengths(obs), list(map(len, map(_TOKENS, acs)))
    return _Columns(
        glens,
        lens,
        ob_lens,
        ac_lens,
        rewards,
        dones,
        step_metrics,
        logs,
        final_rewards,
        metrics,
        final_ob_lens,
    )


def _ob_lengths(obs: Sequence[Any]) -> list[Any]:
    """``ob.length`` of each observation. For tinker's own ``ModelInput`` of one
    ``EncodedTextChunk`` (a text prompt) that is ``len(chunk.tokens)`` (``ModelInput.length``
    sums ``chunk.length``, which is ``len(self.tokens)``), read without running the two
    Python properties for each; the first observation is measured both ways to make sure."""
    tinker = sys.modules.get("tinker")
    model_input = getattr(tinker, "ModelInput", None)
    if model_input is not None and obs and set(map(type, obs)) == {model_input}:
        chunk_lists = list(map(_CHUNKS, obs))
        if set(map(len, chunk_lists)) == {1}:
            chunks = list(chain.from_iterable(chunk_lists))
            if set(map(type, chunks)) == {getattr(tinker, "EncodedTextChunk", None)}:
                lengths = list(map(len, map(_TOKENS, chunks)))
                if lengths[0] == obs[0].length:
                    return lengths
    return list(map(_LENGTH, obs))


def _first_of_each_class(items: list[Any]) -> Iterable[Any]:
    """The first item of each class in ``items`` (whose class's style the general path learns from it)."""
    if len(set(map(type, items))) <= 1:
        return items[:1]
    return dict(zip(map(type, reversed(items)), reversed(items), strict=True)).values()


def _from_columns(
    c: _Columns, iteration: int, split: str, tags_P: list[Any], steps_P: list[Any]
) -> tuple[list[TrajectorySummary], bool] | None:
    """The records of ``c`` (from :func:`_plain_dicts` or :func:`_plain_tinker`) and
    whether their values passed :func:`_values_ok`; None when a column holds a value that
    building converts (a float token count, a numpy reward, a None metrics dict...)."""
    try:
        ob_lens = msgspec.convert(c.ob_lens, _NNS)
        ac_lens = msgspec.convert(c.ac_lens, _NNS)
        rewards = msgspec.convert(c.rewards, _FLOATS)
        dones = msgspec.convert(c.dones, _BOOLS)
        final_rewards = msgspec.convert(c.final_rewards, _FLOATS)
        final_ob_lens = msgspec.convert(c.final_ob_lens, _OPT_NNS)
    except msgspec.ValidationError:
        return None
    traj_metrics, glens, lens = c.traj_metrics, c.glens, c.lens
    if None in traj_metrics:  # a trajectory without metrics gets its own {}, as _as_dict(None) gives
        traj_metrics = [{} if m is None else m for m in traj_metrics]
    if not _DICT.issuperset(map(type, chain(c.metrics, c.logs, traj_metrics))):
        return None
    positions = chain.from_iterable(map(range, lens))
    steps = list(map(StepSummary, positions, ob_lens, ac_lens, rewards, dones, c.metrics, c.logs))
    steps_T = map(list, map(islice, repeat(iter(steps)), lens))
    totals = list(map(add, map(sum, map(islice, repeat(iter(rewards)), lens)), final_rewards))
    per_traj = chain.from_iterable(map(repeat, range(len(glens)), glens))
    tags = chain.from_iterable(map(repeat, tags_P, glens))
    client_steps = chain.from_iterable(map(repeat, steps_P, glens))
    cls = TrajectorySummary
    records = [
        cls(
            split=split,
            iteration=iteration,
            group_idx=g,
            traj_idx=t,
            tags=tag_list,
            sampling_client_step=client_step,
            total_reward=total,
            final_reward=final,
            trajectory_metrics=traj_m,
            final_ob_len=final_ob_len,
            steps=steps_t,
        )
        for g, t, tag_list, client_step, total, final, traj_m, final_ob_len, steps_t in zip(
            per_traj,
            chain.from_iterable(map(range, glens)),
            tags,
            client_steps,
            totals,
            final_rewards,
            traj_metrics,
            final_ob_lens,
            steps_T,
            strict=False,
        )
    ]
    return records, _values_ok(totals, c.metrics, traj_metrics, c.logs)


def _plain(
    groups: Sequence[Any], iteration: int, split: str, tags_P: list[Any], steps_P: list[Any]
) -> tuple[list[TrajectorySummary], bool] | None:
    """:func:`_from_columns` of plain dict or tinker-cookbook groups; None for any other
    shape or value, and when reading them raises (the general path then raises its own
    error, naming the group, trajectory, step and key)."""
    tags_P, steps_P = list(tags_P), list(steps_P)  # _plain_tinker sets a wrapper's own
    try:
        columns = _plain_dicts(groups) or _plain_tinker(groups, tags_P, steps_P)
        return None if columns is None else _from_columns(columns, iteration, split, tags_P, steps_P)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        return None


class Rebuild(Exception):
    """Raised by the recheck of reused ready records: the encoder met a value the batch
    check let through; build the records again (``build(..., reuse=False)``), which
    converts it or names it, without touching the caller's records."""


def _rebuild() -> set[int]:
    raise Rebuild


def build(
    groups: Any,
    iteration: int,
    split: str,
    tags: Any = None,
    sampling_client_step: Any = None,
    reuse: bool = True,
) -> tuple[list[TrajectorySummary], set[int], Callable[[], set[int]]]:
    """Records for ``groups``, the indices of records that need the slow encoder, and a
    function that checks every record fully (for when the encoder meets a value the
    quick batch check let through) and returns those indices again.

    Ready :class:`TrajectorySummary` records that building would reproduce exactly are
    returned as they are (``reuse``; see :func:`_as_written`); their recheck raises
    :class:`Rebuild`."""
    if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Sequence):
        raise TypeError(
            f"rollouts for iteration {iteration}: expected a list of trajectory groups or of records, "
            f"got {type(groups).__name__}"
        )
    b = _Builder(iteration, split)
    out: list[TrajectorySummary] = []
    n = len(groups)
    if n and _is_record(groups[0], b.traj_cls):
        ready = _as_written(groups, iteration, split, tags, sampling_client_step) if reuse else None
        if ready is not None:  # already exactly what would be written
            return ready, set(), _rebuild
        tag_default = _tag_list(tags, "tags") if tags is not None else []
        step_default = _opt_step(sampling_client_step) if not isinstance(sampling_client_step, list) else None
        for i, rec in enumerate(groups):
            if not _is_record(rec, b.traj_cls):
                raise TypeError(
                    f"record {i}: expected a TrajectorySummary or a dict with 'group_idx' like record 0"
                )
            try:
                out.append(b.trajectory(rec, 0, i, tag_default, step_default, keep_idx=True))
            except (TypeError, ValueError) as e:
                raise type(e)(f"rollouts for iteration {iteration}, record {i}: {e}") from None
        return out, b.check(out, _record_label), lambda: b.check(out, _record_label, full=True)
    tags_P = _per_group(
        [] if tags is None else tags,
        n,
        "tags",
        _tag_list,
        lambda v: not v or isinstance(v[0], str) if isinstance(v, (list, tuple)) else False,
    )
    steps_P = _per_group(
        sampling_client_step,
        n,
        "sampling_client_step",
        lambda v, _w: _opt_step(v),
        lambda v: not isinstance(v, (list, tuple)),
    )
    plain = _plain(groups, iteration, split, tags_P, steps_P)
    if plain is not None:
        out, values_ok = plain
        dirty = set() if values_ok else b.check(out, _traj_label, full=True)
        return out, dirty, lambda: b.check(out, _traj_label, full=True)
    for g, group in enumerate(groups):
        wrapped = getattr(group, "trajectory_group", None)
        if wrapped is not None:  # tinker-cookbook RolloutSummaryGroup
            tags_P[g] = _tag_list(getattr(group, "tags", tags_P[g]), f"group {g} tags")
            steps_P[g] = _opt_step(getattr(group, "sampling_client_step", steps_P[g]))
            group = wrapped
        trajs = getattr(group, "trajectories_G", None)
        final_rewards: Any = None
        metrics: Any = None
        if trajs is not None:  # tinker-cookbook TrajectoryGroup
            final_rewards = group.final_rewards_G
            metrics = group.metrics_G
        elif isinstance(group, (list, tuple)):
            trajs = group
        else:
            raise TypeError(
                f"rollouts for iteration {iteration}, group {g}: expected a list of trajectories or a "
                f"TrajectoryGroup-like object (.trajectories_G), got {type(group).__name__}"
            )
        for t, traj in enumerate(trajs):
            try:
                record = b.trajectory(
                    traj,
                    g,
                    t,
                    tags_P[g],
                    steps_P[g],
                    None if final_rewards is None else final_rewards[t],
                    None if metrics is None else metrics[t],
                )
            except (TypeError, ValueError) as e:
                raise type(e)(f"rollouts for iteration {iteration}, group {g}, trajectory {t}: {e}") from None
            out.append(record)
    return out, b.check(out, _traj_label), lambda: b.check(out, _traj_label, full=True)
