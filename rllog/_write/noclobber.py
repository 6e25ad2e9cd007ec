"""A storage view for worker loggers: an iteration artifact another writer already wrote
is kept, and this writer's file goes next to it as a numbered copy.

Rollout workers each hold a pickled :class:`rllog.RunLogger` of the same run. When two of
them write the same iteration and split (a retried task, two samplers given the same
number), the second one's report or rollout summaries would replace the first's. Through
:class:`NoClobberStorage` the second write goes to ``..._iteration_NNNNNN-2...`` (then
``-3``...; :func:`rllog._format.layout.artifact_copy_name`), which the reader lists as
the same iteration, and a warning names both files.

The check is "exists, then write": two writers that both write the same name before
either one's file is visible (on a bucket: within one upload interval) can still
replace each other. A file this view wrote itself is replaced as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rllog._format.layout import artifact_copy_name, parse_artifact_name
from rllog.storage import Storage

__all__ = ["NoClobberStorage"]


class NoClobberStorage:
    """Wraps ``storage``: :meth:`write` of an iteration artifact that exists and was not
    written through this view goes to the first free numbered copy, and ``warn(kind,
    message)`` is told. Every other call goes to ``storage`` unchanged."""

    def __init__(self, storage: Storage, warn: Callable[[str, str], None]) -> None:
        self._storage = storage
        self._warn = warn
        self._renamed: dict[str, str] = {}  # artifact name -> the copy this view writes it to
        self._mine: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def write(self, name: str, data: bytes, *, durable: bool = True) -> None:
        """Write ``name`` (or its numbered copy when another writer's file is there);
        ``durable`` as :meth:`rllog.storage.Storage.write`.

        Raises:
            OSError: from the storage (nothing is remembered as written then).
        """
        target = self._target(name)
        self._storage.write(target, data, durable=durable)
        self._mine.add(target)

    def _target(self, name: str) -> str:
        if name in self._renamed:
            return self._renamed[name]
        if name in self._mine or parse_artifact_name(name) is None or not self._storage.exists(name):
            return name
        copy = 2
        while self._storage.exists(artifact_copy_name(name, copy)):
            copy += 1
        target = self._renamed[name] = artifact_copy_name(name, copy)
        self._warn(
            f"clobber:{name}",
            f"{self._storage.url}/{name} was already written by another writer of this run; "
            f"kept it and wrote this one to {target}",
        )
        return target
