"""Rebuilding a run's config: :func:`load_config` reads config.json, optionally into a chz class."""

from __future__ import annotations

import warnings
from typing import Any, TypeVar

from rllog._format.codec import decode_json
from rllog._format.layout import CONFIG_FILE
from rllog._format.records import REDACTED
from rllog._format.records import TYPE_KEY as _TYPE_KEY
from rllog.errors import ConfigError
from rllog.storage import open_storage

__all__ = ["load_config"]

T = TypeVar("T")


def load_config(log_path: Any, cls: type[T] | None = None, **storage_options: Any) -> T | dict[str, Any]:
    """Read ``config.json`` of a run; with ``cls`` (a chz class) rebuild the config object.

    Redacted secrets come back as the string ``"<redacted>"`` (a RuntimeWarning names
    them; set them again with ``chz.replace``), and values for fields ``cls`` does not
    have (renamed or removed since the run) are left out with a RuntimeWarning.

    Args:
        log_path: the run's folder or URL, or a Storage.
        cls: a chz class; when given, returns ``cls`` built from the file with chz's
            casting (``chz.Blueprint(cls).apply(values).make()``), else the dict.

    Raises:
        FileNotFoundError: the run has no config.json.
        ConfigError: the file is not a JSON object, or chz cannot build ``cls`` from it
            (the chz message is included).
    """
    storage = open_storage(log_path, mode="r", **storage_options)
    data = decode_json(storage.read(CONFIG_FILE))
    if not isinstance(data, dict):
        raise ConfigError(f"{storage.url}/config.json: expected a JSON object, got {type(data).__name__}")
    if cls is None:
        return data
    import chz

    if not chz.is_chz(cls):
        raise ConfigError(f"load_config: cls must be a chz class, got {cls!r}")
    values: dict[str, Any] = {}
    dropped: list[str] = []
    _flatten(cls, data, "", values, dropped)
    try:
        config = chz.Blueprint(cls).apply(values).make()
    except Exception as exc:
        raise ConfigError(
            f"could not rebuild {cls.__qualname__} from {storage.url}/config.json: {exc}"
        ) from exc
    if dropped:
        warnings.warn(
            f"rllog: {storage.url}/config.json has values {cls.__qualname__} has no field for, left out "
            f"(renamed fields keep their defaults): {', '.join(dropped)}",
            RuntimeWarning,
            stacklevel=2,
        )
    redacted = sorted(k for k, v in values.items() if getattr(v, "value", v) == REDACTED)
    if redacted:
        warnings.warn(
            f"rllog: {', '.join(redacted)} came back as {REDACTED!r} (secrets are not written to config.json); "
            "set them again, e.g. with chz.replace",
            RuntimeWarning,
            stacklevel=2,
        )
    return config


def _flatten(cls: Any, data: dict[str, Any], prefix: str, out: dict[str, Any], dropped: list[str]) -> None:
    """chz blueprint values (``"optim.lr"``, ``"evals.0.name"``) for the fields of ``cls`` in
    ``data``; keys the class has no field for go to ``dropped``."""
    import chz

    fields = chz.chz_fields(cls)
    for key, value in data.items():
        if key == _TYPE_KEY:
            continue
        if key not in fields:
            dropped.append(f"{prefix}{key}")
            continue
        _flatten_value(fields[key].x_type, value, f"{prefix}{key}", out, dropped)


def _flatten_value(ftype: Any, value: Any, path: str, out: dict[str, Any], dropped: list[str]) -> None:
    import typing

    import chz

    origin, args = typing.get_origin(ftype), typing.get_args(ftype)
    if isinstance(value, dict):
        marked = value.get(_TYPE_KEY)
        target = _import_type(marked) if isinstance(marked, str) else ftype
        if isinstance(target, type) and chz.is_chz(target):
            if marked:
                out[path] = chz.Castable(marked)
            _flatten(target, value, f"{path}.", out, dropped)
            return
        if origin in (dict, typing.Mapping) or (isinstance(origin, type) and issubclass(origin, dict)):
            item_type = args[1] if len(args) == 2 else Any
            if any(isinstance(v, dict) for v in value.values()):
                for k, v in value.items():
                    _flatten_value(item_type, v, f"{path}.{k}", out, dropped)
                return
        out[path] = value
        return
    if isinstance(value, list):
        item_type = args[0] if args and args[-1] is not Ellipsis or len(args) == 2 else Any
        if value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                _flatten_value(
                    args[i] if origin is tuple and len(args) > i and args[-1] is not Ellipsis else item_type,
                    v,
                    f"{path}.{i}",
                    out,
                    dropped,
                )
            return
        out[path] = tuple(value) if origin is tuple else value
        return
    if isinstance(value, str) and ftype is not str and str not in args:
        out[path] = chz.Castable(value)  # enums, paths, callables: chz casts the text
    else:
        out[path] = value


def _import_type(name: str) -> Any:
    """The class named ``"module:qualname"``, or None."""
    import importlib

    module, _, qualname = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj
