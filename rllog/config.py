"""config.json: the serialized training config, and rebuilding a chz config from it.

:func:`config_to_dict` accepts chz objects, dataclasses, pydantic models (v1 and v2),
``attrs`` classes, mappings, ``argparse.Namespace`` and anything with ``__dict__``.
Leaves become JSON values:

- enums -> their member name (``"RED"``), which chz casts back to the member;
- paths -> ``str``; callables and classes -> ``"module:qualname"``;
- sets -> sorted lists; bytes -> a short description; anything else -> ``repr``.

Nothing raises on an odd value. String values of secret-looking fields (names ending in
``api_key``, ``apikey``, ``token``, ``secret``, ``password``, ``passwd``,
``access_key``, ``secret_key``, ``private_key``, ``credentials``, ``auth`` …) are written
as ``"<redacted>"``; numbers and booleans under such names (``max_tokens`` is not one:
plural) are kept.

Example config.json::

    {
      "learning_rate": 0.0001,
      "model_name": "Qwen/Qwen3-4B",
      "loss_fn": "importance_sampling",
      "wandb_api_key": "<redacted>"
    }
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from rllog.errors import ConfigError

__all__ = ["config_to_dict", "load_config", "REDACTED"]

REDACTED = "<redacted>"
_SECRET = re.compile(
    r"(?:^|[_\-.])(?:api_?key|apikey|token|secret|secret_?key|password|passwd|pass_?phrase|"
    r"access_?key|private_?key|credentials?|auth|auth_?token|bearer)$",
    re.IGNORECASE,
)
_MAX_DEPTH = 32

T = TypeVar("T")


def _is_secret(key: str) -> bool:
    return bool(_SECRET.search(key)) or key.lower() in ("token", "secret", "password", "apikey", "api_key")


def _qualname(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or "?"
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return f"{mod}:{name}"


def config_to_dict(config: Any) -> dict[str, Any]:
    """Convert a config object into a dict of JSON values (see the module docstring).

    Raises:
        ConfigError: if ``config`` does not convert to a mapping at the top level (a
            list, a number, a string).
    """
    out = _convert(config, None, 0)
    if not isinstance(out, dict):
        raise ConfigError(
            f"config must be a chz object, dataclass, pydantic model, argparse.Namespace or mapping, "
            f"got {type(config).__name__}"
        )
    return out


def _fields_of(obj: Any) -> Mapping[str, Any] | None:
    import sys

    chz = sys.modules.get("chz")
    if chz is not None and chz.is_chz(obj):
        return {name: getattr(obj, name) for name in chz.chz_fields(obj)}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    dump = getattr(obj, "model_dump", None)  # pydantic v2
    if callable(dump) and not isinstance(obj, type):
        try:
            return {k: getattr(obj, k, v) for k, v in dump().items()}
        except Exception:  # a broken model_dump: fall through to __dict__
            pass
    if hasattr(obj, "__fields__") and hasattr(obj, "dict") and not isinstance(obj, type):  # pydantic v1
        try:
            return {k: getattr(obj, k) for k in obj.__fields__}
        except Exception:
            pass
    attrs_fields = getattr(type(obj), "__attrs_attrs__", None)
    if attrs_fields is not None:
        return {a.name: getattr(obj, a.name) for a in attrs_fields}
    if isinstance(obj, Mapping):
        return obj
    import argparse

    if isinstance(obj, argparse.Namespace):
        return vars(obj)
    return None


def _convert(value: Any, key: str | None, depth: int) -> Any:
    if key is not None and isinstance(value, str) and _is_secret(key):
        return REDACTED if value else value
    if value is None or isinstance(value, (bool, int, str)):
        if isinstance(value, enum.Enum):
            return value.name
        return value
    if isinstance(value, float):
        return value  # NaN/Infinity are written as tokens
    if depth > _MAX_DEPTH:
        return repr(value)[:200]
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, type) or callable(value) and not hasattr(value, "__dict__") or _is_function(value):
        return _qualname(value)
    fields = _fields_of(value)
    if fields is not None:
        out = {}
        for k, v in fields.items():
            k = k if isinstance(k, str) else str(k)
            out[k] = _convert(v, k, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_convert(v, key, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [_convert(v, key, depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        try:
            out = item()
            if isinstance(out, (int, float, bool, str)):
                return out
        except Exception:
            pass
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        try:
            return _convert(tolist(), key, depth + 1)
        except Exception:
            pass
    if callable(value):
        return _qualname(value)
    return repr(value)[:1000]


def _is_function(value: Any) -> bool:
    import types

    return isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType))


def load_config(log_path: Any, cls: type[T] | None = None, **storage_options: Any) -> T | dict[str, Any]:
    """Read ``config.json`` of a run; with ``cls`` (a chz class) rebuild the config object.

    Redacted secrets come back as the string ``"<redacted>"``; pass the real value
    again by building with ``chz.replace`` if the rebuilt config needs it.

    Args:
        log_path: the run's folder or URL, or a Storage.
        cls: a chz class; when given, returns ``cls`` built from the file with chz's
            casting (``chz.Blueprint(cls).apply(values).make()``), else the dict.

    Raises:
        FileNotFoundError: the run has no config.json.
        ConfigError: the file is not a JSON object, or chz cannot build ``cls`` from it
            (the chz message is included).
    """
    from rllog.encoding import decode_json
    from rllog.storage import open_storage

    storage = open_storage(log_path, **storage_options)
    data = decode_json(storage.read("config.json"))
    if not isinstance(data, dict):
        raise ConfigError(f"{storage.url}/config.json: expected a JSON object, got {type(data).__name__}")
    if cls is None:
        return data
    import chz

    if not chz.is_chz(cls):
        raise ConfigError(f"load_config: cls must be a chz class, got {cls!r}")
    values: dict[str, Any] = {}
    _flatten(cls, data, "", values)
    try:
        return chz.Blueprint(cls).apply(values).make()
    except Exception as exc:
        raise ConfigError(f"could not rebuild {cls.__qualname__} from {storage.url}/config.json: {exc}") from exc


def _flatten(cls: Any, data: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
    import chz

    fields = chz.chz_fields(cls) if chz.is_chz(cls) else {}
    for key, value in data.items():
        if key.startswith("__chz"):
            continue
        if key not in fields and fields:
            continue  # a field the class no longer has
        ftype = getattr(fields.get(key), "x_type", None)
        if isinstance(value, dict) and isinstance(ftype, type) and chz.is_chz(ftype):
            _flatten(ftype, value, f"{prefix}{key}.", out)
        elif isinstance(value, str):
            out[f"{prefix}{key}"] = chz.Castable(value)
        elif isinstance(value, list) and getattr(ftype, "__origin__", None) is tuple:
            out[f"{prefix}{key}"] = tuple(value)
        else:
            out[f"{prefix}{key}"] = value
