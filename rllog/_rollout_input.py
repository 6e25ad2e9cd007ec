"""Turning the trajectory shapes RL loops have into rollout summary records.

Accepted shapes (see :func:`rllog.rollouts.build_rollout_summaries` for the contract):

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

Values are checked and converted on the way in (numpy/torch scalars become Python
numbers). While converting, the builder notes which records may hold a non-finite
float or a nested log value; only those take the slower encoding path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rllog.encoding import scalar, to_jsonable

if TYPE_CHECKING:
    from rllog.rollouts import StepSummary, TrajectorySummary

_FAST = frozenset({float, int, str, bool, type(None)})
_STR = frozenset({str})
_EMPTY: dict[str, Any] = {}

_STEP_KEYS = frozenset({"step_idx", "ob_len", "ac_len", "reward", "episode_done", "metrics", "logs"})
_TRAJ_KEYS = frozenset(
    {
        "schema_version",
        "split",
        "iteration",
        "group_idx",
        "traj_idx",
        "tags",
        "sampling_client_step",
        "total_reward",
        "final_reward",
        "trajectory_metrics",
        "metrics",  # alias of trajectory_metrics in loop-made dicts
        "final_ob_len",
        "steps",
    }
)


def _token_len(x: Any, what: str) -> int:
    """Token count of a tinker ModelInput (``.length``), a token holder (``.tokens``) or a sequence."""
    if x is None:
        return 0
    n = getattr(x, "length", None)
    if n is None:
        tokens = getattr(x, "tokens", None)
        n = len(tokens if tokens is not None else x)
    return _Builder.length(n, what)


class _Builder:
    """Builds records for one call; ``dirty`` holds indices of records needing the slow encoder."""

    __slots__ = ("step_cls", "traj_cls", "iteration", "split", "dirty", "_d")

    def __init__(self, iteration: int, split: str) -> None:
        from rllog.rollouts import StepSummary, TrajectorySummary

        self.step_cls = StepSummary
        self.traj_cls = TrajectorySummary
        self.iteration = iteration
        self.split = split
        self.dirty: set[int] = set()
        self._d = False  # the current record may hold a non-finite float or a nested value

    # -- scalars ------------------------------------------------------------------------

    def reward(self, x: Any, what: str) -> float:
        if type(x) is float:
            if x - x != 0.0:  # NaN or +-inf
                self._d = True
            return x
        if type(x) is int:
            return float(x)
        v = scalar(x, what)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise TypeError(f"{what}: expected a number, got {type(x).__name__}: {x!r:.60}")
        return self.reward(float(v), what)

    @staticmethod
    def length(x: Any, what: str) -> int:
        if type(x) is int and x >= 0:
            return x
        v = scalar(x, what)
        if type(v) is float and v.is_integer():
            v = int(v)
        if type(v) is not int or v < 0:
            raise TypeError(f"{what}: expected a token count (int >= 0), got {type(x).__name__}: {x!r:.60}")
        return v

    def values(self, d: Any, what: str, nested: bool = False) -> dict[str, Any]:
        """A dict of str to JSON scalars (and, if ``nested``, lists/dicts) from ``d``."""
        if d is None:
            return {}
        if type(d) is not dict:
            if not isinstance(d, Mapping):
                raise TypeError(f"{what}: expected a dict of str to numbers/str, got {type(d).__name__}")
            d = dict(d)
        if _FAST.issuperset(map(type, d.values())) and _STR.issuperset(map(type, d)):
            if not self._d:
                for v in d.values():
                    if type(v) is float and v - v != 0.0:
                        self._d = True
                        break
            return d
        out = {}
        for k, v in d.items():
            if type(k) is not str:
                if not isinstance(k, str):
                    raise TypeError(f"{what}: keys must be str, got {type(k).__name__} {k!r:.60}")
                k = str(k)
            try:
                v = scalar(v, f"{what}[{k!r}]")
            except TypeError:
                if not (nested and (isinstance(v, (Mapping, Sequence)) or hasattr(v, "tolist"))):
                    raise
                v = to_jsonable(v, f"{what}[{k!r}]", raw=False)
                self._d = True  # nested: the slow encoder checks what is inside
            if type(v) is float and v - v != 0.0:
                self._d = True
            out[k] = v
        return out

    # -- steps ----------------------------------------------------------------------------

    def step(self, s: Any, i: int, last: bool) -> StepSummary:
        if type(s) is dict:
            if not _STEP_KEYS.issuperset(s):
                raise ValueError(
                    f"step {i}: unknown keys {sorted(set(s) - _STEP_KEYS)}; a step dict has {sorted(_STEP_KEYS)}"
                )
            if "reward" not in s:
                raise ValueError(f"step {i}: a step dict needs 'reward', got keys {sorted(s)}")
            return self.step_cls(
                step_idx=i,
                ob_len=self.length(s.get("ob_len", 0), f"step {i} ob_len"),
                ac_len=self.length(s.get("ac_len", 0), f"step {i} ac_len"),
                reward=self.reward(s["reward"], f"step {i} reward"),
                episode_done=bool(s.get("episode_done", last)),
                metrics=self.values(s.get("metrics"), f"step {i} metrics"),
                logs=self.values(s.get("logs"), f"step {i} logs", nested=True),
            )
        if not hasattr(s, "reward"):
            raise TypeError(
                f"step {i}: expected a dict, a StepSummary or a transition object with .reward, "
                f"got {type(s).__name__}"
            )
        ob_len = getattr(s, "ob_len", None)
        ac_len = getattr(s, "ac_len", None)
        return self.step_cls(
            step_idx=i,
            ob_len=self.length(ob_len, f"step {i} ob_len")
            if ob_len is not None
            else _token_len(getattr(s, "ob", None), f"step {i} ob length"),
            ac_len=self.length(ac_len, f"step {i} ac_len")
            if ac_len is not None
            else _token_len(getattr(s, "ac", None), f"step {i} ac length"),
            reward=self.reward(s.reward, f"step {i} reward"),
            episode_done=bool(getattr(s, "episode_done", last)),
            metrics=self.values(getattr(s, "metrics", None), f"step {i} metrics"),
            logs=self.values(getattr(s, "logs", None), f"step {i} logs", nested=True),
        )

    def steps(self, steps: Any) -> list[StepSummary]:
        if steps is None:
            return []
        n = len(steps)
        return [self.step(s, i, i == n - 1) for i, s in enumerate(steps)]

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
        if isinstance(t, self.traj_cls):
            t = {f: getattr(t, f) for f in t.__struct_fields__}
        if isinstance(t, Mapping):
            return self._from_dict(t, group_idx, traj_idx, tags, sampling_client_step, keep_idx)
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
        fr = self.reward(final_reward, "final_reward")
        final_ob = getattr(t, "final_ob", None)
        final_ob_len = getattr(t, "final_ob_len", None)
        return self.traj_cls(
            split=self.split,
            iteration=self.iteration,
            group_idx=group_idx,
            traj_idx=traj_idx,
            tags=tags,
            sampling_client_step=sampling_client_step,
            total_reward=sum([s.reward for s in steps]) + fr,
            final_reward=fr,
            trajectory_metrics=self.values(metrics, "trajectory metrics"),
            final_ob_len=self.length(final_ob_len, "final_ob_len")
            if final_ob_len is not None
            else (_token_len(final_ob, "final_ob length") if final_ob is not None else None),
            steps=steps,
        )

    def _from_dict(
        self,
        d: Mapping[str, Any],
        group_idx: int,
        traj_idx: int,
        tags: list[str],
        sampling_client_step: int | None,
        keep_idx: bool,
    ) -> TrajectorySummary:
        if not _TRAJ_KEYS.issuperset(d):
            raise ValueError(
                f"unknown keys {sorted(set(d) - _TRAJ_KEYS)}; a trajectory dict has {sorted(_TRAJ_KEYS - {'metrics'})}"
            )
        for key, want in (("iteration", self.iteration), ("split", self.split)):
            if key in d and d[key] != want:
                raise ValueError(f"record has {key}={d[key]!r} but this call writes {key}={want!r}")
        if keep_idx:
            group_idx = self.length(d["group_idx"], "group_idx")
            traj_idx = self.length(d.get("traj_idx", traj_idx), "traj_idx")
        if "tags" in d:
            tags = _tag_list(d["tags"], "tags")
        if "sampling_client_step" in d:
            sampling_client_step = _opt_step(d["sampling_client_step"])
        steps = self.steps(d.get("steps"))
        fr = self.reward(d.get("final_reward", 0.0), "final_reward")
        total = d.get("total_reward")
        total = sum([s.reward for s in steps]) + fr if total is None else self.reward(total, "total_reward")
        metrics = d.get("trajectory_metrics", d.get("metrics"))
        final_ob_len = d.get("final_ob_len")
        return self.traj_cls(
            split=self.split,
            iteration=self.iteration,
            group_idx=group_idx,
            traj_idx=traj_idx,
            tags=tags,
            sampling_client_step=sampling_client_step,
            total_reward=total,
            final_reward=fr,
            trajectory_metrics=self.values(metrics, "trajectory_metrics"),
            final_ob_len=None if final_ob_len is None else self.length(final_ob_len, "final_ob_len"),
            steps=steps,
        )

    def add(self, out: list[TrajectorySummary], *args: Any, **kwargs: Any) -> None:
        self._d = False
        out.append(self.trajectory(*args, **kwargs))
        if self._d:
            self.dirty.add(len(out) - 1)


def _tag_list(tags: Any, what: str) -> list[str]:
    if isinstance(tags, str) or not isinstance(tags, (list, tuple)):
        raise TypeError(f"{what}: expected a list of str, got {type(tags).__name__}: {tags!r:.60}")
    for t in tags:
        if not isinstance(t, str):
            raise TypeError(f"{what}: expected a list of str, got an item {type(t).__name__}: {t!r:.60}")
    return list(tags)


def _opt_step(x: Any) -> int | None:
    return None if x is None else _Builder.length(x, "sampling_client_step")


def _per_group(value: Any, n: int, what: str, convert: Any, is_single: Any) -> list[Any]:
    """``value`` for each of ``n`` groups: one value for all, or a list of one per group."""
    if is_single(value):
        v = convert(value, what)
        return [v] * n
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = f"{len(value)} items" if isinstance(value, (list, tuple)) else type(value).__name__
        raise ValueError(f"{what}: expected one value for all groups or a list of one per group ({n}), got {got}")
    return [convert(v, f"{what}[{i}]") for i, v in enumerate(value)]


def _is_record(x: Any, traj_cls: type) -> bool:
    return isinstance(x, traj_cls) or (isinstance(x, Mapping) and "group_idx" in x)


def build(
    groups: Any,
    iteration: int,
    split: str,
    tags: Any = None,
    sampling_client_step: Any = None,
) -> tuple[list[TrajectorySummary], set[int]]:
    """Records for ``groups`` and the indices of records that need the slow encoder."""
    if isinstance(groups, (str, bytes, Mapping)) or not isinstance(groups, Sequence):
        raise TypeError(
            f"rollouts for iteration {iteration}: expected a list of trajectory groups or of records, "
            f"got {type(groups).__name__}"
        )
    b = _Builder(iteration, split)
    out: list[TrajectorySummary] = []
    n = len(groups)
    if n and _is_record(groups[0], b.traj_cls):
        tag_default = _tag_list(tags, "tags") if tags is not None else []
        step_default = _opt_step(sampling_client_step) if not isinstance(sampling_client_step, list) else None
        for i, rec in enumerate(groups):
            if not _is_record(rec, b.traj_cls):
                raise TypeError(f"record {i}: expected a TrajectorySummary or a dict with 'group_idx' like record 0")
            try:
                b.add(out, rec, 0, i, tag_default, step_default, keep_idx=True)
            except (TypeError, ValueError) as e:
                raise type(e)(f"rollouts for iteration {iteration}, record {i}: {e}") from None
        return out, b.dirty
    tags_P = _per_group(
        [] if tags is None else tags,
        n,
        "tags",
        _tag_list,
        lambda v: not v or isinstance(v[0], str) if isinstance(v, (list, tuple)) else False,
    )
    steps_P = _per_group(
        sampling_client_step, n, "sampling_client_step", lambda v, _w: _opt_step(v), lambda v: not isinstance(v, (list, tuple))
    )
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
                b.add(
                    out,
                    traj,
                    g,
                    t,
                    tags_P[g],
                    steps_P[g],
                    final_reward=None if final_rewards is None else final_rewards[t],
                    metrics=None if metrics is None else metrics[t],
                )
            except (TypeError, ValueError) as e:
                raise type(e)(f"rollouts for iteration {iteration}, group {g}, trajectory {t}: {e}") from None
    return out, b.dirty
