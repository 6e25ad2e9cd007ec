"""Every file name of a run (docs/FORMATS.md §1): the fixed files and the per-iteration artifacts.

Pure: no I/O. The write side builds names with :func:`artifact_name`; the read side
parses them with :func:`parse_iteration_file`.

``train_iteration_000012.html``, ``eval_<name>_iteration_000012_logtree.json``, ...
The iteration is zero-padded to 6 digits; larger numbers keep all their digits.

Evaluator names are made safe with :func:`safe_eval_name`: a name that is already
lower-case ``[a-z0-9._-]``, starts with a letter or digit, is at most 64 characters and
does not end like a hashed name is kept as it is; any other name is reduced to those
characters, cut to 40, and given the suffix ``-h`` + 10 hex digits of its SHA-256.
Kept names never end in that suffix, so two different raw names never share a file
name (up to a 40-bit hash collision among hashed names), even on case-insensitive
file systems, and no name can leave ``log_path``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "METRICS_FILE",
    "SUPERSEDED_FILE",
    "SUPERSEDED_DIR",
    "CONFIG_FILE",
    "CODE_DIFF_FILE",
    "CHECKPOINTS_FILE",
    "LOCK_FILE",
    "STATUS_FILE",
    "RUN_STATES",
    "INDEX_FILE",
    "TORN_SUFFIX",
    "DOCTOR_FILE",
    "TRACKERS_FILE",
    "TIMING_SPANS_FILE",
    "TENSORBOARD_DIR",
    "artifact_copy_name",
    "ARTIFACT_KINDS",
    "LAYOUTS",
    "check_layout",
    "Artifact",
    "safe_eval_name",
    "artifact_name",
    "parse_artifact_name",
    "parse_iteration_file",
    "rank_file_name",
    "parse_rank_file_name",
    "artifact_rank",
    "parse_superseded_file",
]

#: one JSON object per logged step, ``"step"`` first
METRICS_FILE = "metrics.jsonl"
#: rows moved out of metrics.jsonl on resume (steps at or past the resume point), byte for byte
SUPERSEDED_FILE = "metrics.superseded.jsonl"
#: folder the crashed run's iteration reports and rollout summaries are moved to on resume
#: (``superseded/train_iteration_000012.html``; a second copy of one name gets ``.2``...)
SUPERSEDED_DIR = "superseded"
#: the training config, indented JSON; an older copy is kept as ``config.<UTC time>.json``
CONFIG_FILE = "config.json"
#: commit, ``git diff HEAD`` and untracked files at start
CODE_DIFF_FILE = "code.diff"
#: one record per checkpoint
CHECKPOINTS_FILE = "checkpoints.jsonl"
#: held (``flock``) by the live writer of a local run; holds its pid
LOCK_FILE = ".rllog.lock"
#: the writer's own account of the run: ``{"state", "starts", "started_at", "first_started_at",
#: "ended_at", "pid", "host"}`` (JSON object), rewritten whole at start and at close.
#: ``state`` is one of :data:`RUN_STATES`; ``starts`` counts the writers that opened the run
#: (so a run resumed twice has 3); times are ISO 8601 UTC. A reader tells a live writer from
#: a killed one by ``state == "running"`` plus the lock (local runs; see :data:`LOCK_FILE`).
STATUS_FILE = "run_status.json"
#: ``running`` (a writer opened the run and has not closed it), ``finished`` (closed),
#: ``failed`` (closed while an exception left the ``with`` block)
RUN_STATES = ("running", "finished", "failed")
#: the run's overview page
INDEX_FILE = "index.html"
#: the live doctor's findings (``RunLogger(doctor=True)``), one JSON object per finding
DOCTOR_FILE = "doctor.jsonl"
#: the trackers' run ids (wandb, trackio, TensorBoard file), so a resume continues the same tracker runs
TRACKERS_FILE = "trackers.json"
#: timer spans ``{"name", "start", "end", "step"}`` (``RunLogger(timing_spans=True)``)
TIMING_SPANS_FILE = "timing_spans.jsonl"
#: the default folder of TensorBoard event files inside a run
TENSORBOARD_DIR = "tensorboard"
#: torn fragments of ``X`` are appended to ``X`` + this suffix, one per line
TORN_SUFFIX = ".torn"

_KEEP = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_HASHED = re.compile(r".*-h[0-9a-f]{10}")
_BAD = re.compile(r"[^a-z0-9._-]+")

#: suffix of each artifact kind after ``..._iteration_NNNNNN``
ARTIFACT_KINDS = {
    "html": ".html",
    "logtree": "_logtree.json",
    "rollout_summaries": "_rollout_summaries.jsonl",
}

#: how per-iteration files are named: ``"flat"`` (the seed's names, the default) or
#: ``"tinker"`` (tinker-cookbook 0.6: ``iteration_NNNNNN/train.html``,
#: ``iteration_NNNNNN/eval_<name>_rollout_summaries.jsonl``; its ``TrainingRunStore``
#: paths ``_iter_dir(i)/f"{base_name}_logtree.json"`` etc., tinker_cookbook/stores/training_store.py)
LAYOUTS = ("flat", "tinker")

_ARTIFACT_RE = re.compile(
    r"^(?:(?P<train>train)|eval_(?P<eval>.+))_iteration_(?P<iteration>\d{6,})(?:-(?P<copy>[2-9]|[1-9]\d+))?"
    r"(?:\.rank(?P<rank>[1-9]\d*))?(?P<kind>\.html|_logtree\.json|_rollout_summaries\.jsonl)$"
)


def safe_eval_name(name: str) -> str:
    """The file-name-safe form of evaluator ``name`` (see the module docstring).

    Raises:
        TypeError: if ``name`` is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"evaluator name must be a str, got {type(name).__name__}")
    if _KEEP.fullmatch(name) and not _HASHED.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    base = _BAD.sub("_", name.lower()).lstrip("._-")[:40].rstrip("._-")
    return f"{base or 'unnamed'}-h{digest}"


def check_layout(layout: str) -> str:
    """``layout`` if it is one of :data:`LAYOUTS`.

    Raises:
        ValueError: any other value (the message lists the valid ones).
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    return layout


def artifact_name(iteration: int, kind: str, eval_name: str | None = None, layout: str = "flat") -> str:
    """``train_iteration_NNNNNN<suffix>`` or ``eval_<safe name>_iteration_NNNNNN<suffix>``;
    with ``layout="tinker"`` ``iteration_NNNNNN/train<suffix>`` or
    ``iteration_NNNNNN/eval_<safe name><suffix>``.

    ``kind`` is ``"html"``, ``"logtree"`` or ``"rollout_summaries"``.

    Raises:
        ValueError: unknown kind or layout, or an iteration outside ``0 <= iteration < 2**63``
            (the range every JSON reader reads back as an int).
        TypeError: iteration not an int, or ``eval_name`` neither None nor a str.
    """
    if isinstance(iteration, bool) or not isinstance(iteration, int):
        raise TypeError(f"iteration must be an int, got {type(iteration).__name__}: {iteration!r:.40}")
    if not 0 <= iteration < 2**63:
        shown = str(iteration) if iteration.bit_length() < 100 else f"an int of {iteration.bit_length()} bits"
        raise ValueError(f"iteration must be >= 0 and < 2**63, got {shown}")
    try:
        suffix = ARTIFACT_KINDS[kind]
    except KeyError:
        raise ValueError(f"artifact kind must be one of {sorted(ARTIFACT_KINDS)}, got {kind!r}") from None
    head = "train" if eval_name is None else f"eval_{safe_eval_name(eval_name)}"
    if check_layout(layout) == "tinker":
        return f"iteration_{iteration:06d}/{head}{suffix}"
    return f"{head}_iteration_{iteration:06d}{suffix}"


def parse_artifact_name(file_name: str) -> tuple[str, str | None, int, str] | None:
    """``(split, eval_name, iteration, kind)`` for an artifact file name, else None.

    ``split`` is ``"train"`` or ``"eval"``; ``eval_name`` is the safe name in the file.
    Both layouts parse (``iteration_NNNNNN/train.html`` too). A second writer's copy
    (:func:`artifact_copy_name`, ``..._iteration_NNNNNN-2.html`` or
    ``iteration_NNNNNN-2/train.html``) parses as the same iteration and kind.
    """
    if "/" in file_name:
        n = _NESTED.fullmatch(file_name)
        if n is None:
            return None
        file_name = f"{n['head']}_iteration_{n['iteration']}{n['rank'] or ''}{n['kind']}"
    m = _ARTIFACT_RE.match(file_name)
    if m is None:
        return None
    kind = {v: k for k, v in ARTIFACT_KINDS.items()}[m["kind"]]
    split = "train" if m["train"] else "eval"
    return split, m["eval"], int(m["iteration"]), kind


def artifact_copy_name(name: str, copy: int) -> str:
    """The name of copy ``copy`` (>= 2) of artifact ``name``: a second writer of the same
    iteration and split (two rollout workers) writes ``train_iteration_000003-2.html``,
    ``..._000003-2_logtree.json``, ``..._000003-2_rollout_summaries.jsonl`` instead of
    replacing the first one's file.

    In the tinker layout the folder gets the number: ``iteration_000003-2/train.html``
    (tinker-cookbook's readers list only ``iteration_NNNNNN``, so they see the first writer's).

    Raises:
        ValueError: ``name`` is not an artifact name, or ``copy`` < 2.
    """
    n = _NESTED.fullmatch(name) if copy >= 2 else None
    if n is not None:
        return f"iteration_{n['iteration']}-{copy}/{name.split('/', 1)[1]}"
    m = _ARTIFACT_RE.match(name)
    if m is None or copy < 2:
        raise ValueError(
            f"artifact_copy_name: expected an artifact name and a copy >= 2, got {name!r}, {copy!r}"
        )
    return f"{name[: m.end('iteration')]}-{copy}{m['kind']}"


@dataclass(frozen=True)
class Artifact:
    """One per-iteration file: ``name`` inside the run, ``split`` ``"train"``/``"eval"``,
    ``eval_name`` (the safe evaluator name, None for train), ``kind`` in
    ``"html"``, ``"logtree"``, ``"rollout_summaries"``."""

    name: str
    split: str
    eval_name: str | None
    iteration: int
    kind: str


_FLAT_HTML = re.compile(r"iteration_(\d{6,})\.html")  # old tinker-cookbook: no train_ prefix
_NESTED = re.compile(
    r"iteration_(?P<iteration>\d{6,})(?:-(?:[2-9]|[1-9]\d+))?(?P<rank>\.rank[1-9]\d*)?/(?P<head>train|eval_.+?)"
    r"(?P<kind>\.html|_logtree\.json|_rollout_summaries\.jsonl)"
)


def parse_iteration_file(name: str) -> Artifact | None:
    """The :class:`Artifact` a run file name stands for, else None.

    Knows the rllog names (``train_iteration_000012.html``,
    ``eval_<name>_iteration_000012_logtree.json``, ...), the old flat tinker-cookbook
    ``iteration_000012.html`` (train) and the nested ``iteration_000012/train.html``,
    ``iteration_000012/eval_<name>_rollout_summaries.jsonl`` layout.
    """
    if "/" not in name:
        parsed = parse_artifact_name(name)
        if parsed is None:
            m = _FLAT_HTML.fullmatch(name)
            return Artifact(name, "train", None, int(m[1]), "html") if m else None
    else:
        parsed = parse_artifact_name(name)
        if parsed is None:
            return None
    split, eval_name, iteration, kind = parsed
    return Artifact(name, split, eval_name, iteration, kind)


# -- per-rank files (RunLogger(all_ranks=True) on rank r > 0) ---------------------------

_RANK_RE = re.compile(r"^(?P<stem>\.?[^./]+)\.rank(?P<rank>[1-9]\d*)(?P<rest>\.[^/]*)?$")


def rank_file_name(name: str, rank: int) -> str:
    """The file rank ``rank`` writes for the run-level file ``name``: ``.rank<r>`` after the
    name's first part (``metrics.jsonl`` -> ``metrics.rank1.jsonl``,
    ``metrics.superseded.jsonl`` -> ``metrics.rank1.superseded.jsonl``, ``metrics.jsonl.torn``
    -> ``metrics.rank1.jsonl.torn``, ``config.json`` -> ``config.rank1.json``,
    ``.rllog.lock`` -> ``.rllog.rank1.lock``), so a reader that knows a rank's metrics
    file finds its siblings by the same rule; ``name`` itself for rank 0. Names in
    sub-folders and per-iteration artifacts are not run-level files and are returned
    unchanged.

    Raises:
        ValueError: ``rank`` is not an int >= 0.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be an int >= 0, got {rank!r}")
    if rank == 0:
        return name
    if parse_artifact_name(name) is not None:
        return _rank_artifact_name(name, rank)
    if "/" in name or parse_iteration_file(name) is not None:
        return name
    dot = name.find(".", 1)
    if dot < 0:
        return f"{name}.rank{rank}"
    return f"{name[:dot]}.rank{rank}{name[dot:]}"


def _rank_artifact_name(name: str, rank: int) -> str:
    """``train_iteration_000003.rank1_rollout_summaries.jsonl``; in the tinker layout the
    folder gets the tag: ``iteration_000003.rank1/train.html``."""
    n = _NESTED.fullmatch(name)
    if n is not None:
        return f"{name[: n.start('head') - 1]}.rank{rank}/{name.split('/', 1)[1]}"
    m = _ARTIFACT_RE.match(name)
    assert m is not None  # parse_artifact_name matched it
    return f"{name[: m.start('kind')]}.rank{rank}{m['kind']}"


def artifact_rank(name: str) -> int:
    """The rank tag of an artifact name (``..._000003.rank2.html`` -> 2), 0 for none."""
    if "/" in name:
        n = _NESTED.fullmatch(name)
        return int(n["rank"][len(".rank") :]) if n is not None and n["rank"] else 0
    m = _ARTIFACT_RE.match(name)
    return int(m["rank"]) if m is not None and m["rank"] else 0


def parse_rank_file_name(name: str) -> tuple[str, int] | None:
    """``(run-level name, rank)`` of a file :func:`rank_file_name` made, else None
    (``metrics.rank2.jsonl`` -> ``("metrics.jsonl", 2)``)."""
    m = _RANK_RE.fullmatch(name)
    if m is None:
        return None
    return m["stem"] + (m["rest"] or ""), int(m["rank"])


_COPY_SUFFIX = re.compile(r"\.([2-9]|[1-9]\d+)$")


def parse_superseded_file(name: str) -> Artifact | None:
    """The :class:`Artifact` of a report moved aside on resume
    (``superseded/train_iteration_000012.html`` or ``...html.2``; ``name`` is the full
    name inside the run), else None."""
    folder, sep, base = name.partition("/")
    if folder != SUPERSEDED_DIR or not sep or "/" in base:
        return None
    parsed = parse_artifact_name(_COPY_SUFFIX.sub("", base))
    if parsed is None:
        return None
    split, eval_name, iteration, kind = parsed
    return Artifact(name, split, eval_name, iteration, kind)
