"""config.json: the serialized training config, and rebuilding a chz config from it.

:func:`config_to_dict` accepts chz objects, dataclasses, pydantic models (v1 and v2),
``attrs`` classes, mappings, ``argparse.Namespace`` and anything with ``__dict__``.
Leaves become JSON values:

- enums -> their member name (``"RED"``), which chz casts back to the member;
- paths -> ``str``; callables and classes -> ``"module:qualname"``;
- sets -> sorted lists; bytes -> a short description; anything else -> ``repr``.

Nothing raises on an odd value: one that fails to convert becomes a
``"<unrepresentable T: Error>"`` note, arrays over 1,000 elements a
``"<ndarray shape (..) dtype ..>"`` description, plain objects their attributes.

Secrets are redacted, as ``"<redacted>"``, by :mod:`rllog._format.redact` (the one
redaction layer of every writer): values under secret-looking names (``api_key``,
``openaiApiKey``, ``password``, ``wandb.key``...; not ``max_tokens``), pydantic
``SecretStr``, and credential-shaped text anywhere (PEM keys, JWTs, URL passwords,
connection strings, webhook URLs, provider key prefixes, detect-secrets' detectors).

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
import reprlib
import threading
import types
from collections.abc import Mapping
from typing import Any, TypeVar

from rllog._format.records import TYPE_KEY as _TYPE_KEY
from rllog._format.redact import REDACTED, is_secret_key, redact_text, redact_tree
from rllog.errors import ConfigError

__all__ = ["config_to_dict", "REDACTED"]

_MAX_DEPTH = 32

T = TypeVar("T")


_MAX_ITEMS = 1000


def _is_secret(key: str) -> bool:
    return is_secret_key(key)


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
    with _PATH_LOCK:
        _ON_PATH.clear()
        out = redact_tree(_convert(config, None, 0))  # key-in-section and whole-value rules
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


_ON_PATH: set[int] = set()  # ids of the containers being converted (cycle detection; one thread at a time)
_PATH_LOCK = threading.RLock()


def _convert(value: Any, key: str | None, depth: int) -> Any:
    """Convert one value; never raises (a value that fails becomes a ``<...>`` note)."""
    container = isinstance(value, (dict, list, tuple, set, frozenset)) or hasattr(value, "__dict__")
    if container and id(value) in _ON_PATH:
        return f"<cycle: this {type(value).__name__} contains itself>"
    try:
        if container:
            _ON_PATH.add(id(value))
        return _convert_value(value, key, depth)
    except RecursionError:
        return "<too deeply nested>"
    except Exception as exc:  # an odd object (raising property, __repr__...) must not stop the run
        return f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"
    finally:
        if container:
            _ON_PATH.discard(id(value))


def _scrub(text: str) -> str:
    """Redact secret-looking spans inside free text (a repr, a header value, a URL's password)."""
    return redact_text(text)


def _convert_value(value: Any, key: str | None, depth: int) -> Any:
    if key is not None and _is_secret(key) and not isinstance(value, enum.Enum):
        if isinstance(value, (str, bytes)):
            return REDACTED if value else value
        if isinstance(value, (dict, list, tuple)) or hasattr(value, "__dict__"):
            return _redact_all(_convert_value(value, None, depth))  # a secret's parts are secret too
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _scrub(str(value))
    if isinstance(value, float):
        return value  # NaN/Infinity are written as tokens
    if depth > _MAX_DEPTH:
        return "<too deeply nested>"
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    secret = getattr(value, "get_secret_value", None)  # pydantic SecretStr / SecretBytes
    if callable(secret):
        return REDACTED
    if isinstance(value, type) or callable(value) and not hasattr(value, "__dict__") or _is_function(value):
        return _qualname(value)
    if _is_chz(value):
        return _convert_chz(value, depth)
    fields = _fields_of(value)
    if fields is not None:
        out = {}
        for i, (k, v) in enumerate(fields.items()):
            if i >= _MAX_ITEMS:
                out["<more>"] = f"<{len(fields) - _MAX_ITEMS} more entries left out>"
                break
            k = k if isinstance(k, str) else _safe_str(k)
            out[k] = _convert(v, k, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        items = [_convert(v, key, depth + 1) for v in value[:_MAX_ITEMS]]
        if len(value) > _MAX_ITEMS:
            items.append(f"<{len(value) - _MAX_ITEMS} more items left out>")
        return items
    if isinstance(value, (set, frozenset)):
        items = [_convert(v, key, depth + 1) for v in list(value)[:_MAX_ITEMS]]
        try:
            return sorted(items)
        except TypeError:
            return sorted(items, key=repr)
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    shape = getattr(value, "shape", None)
    size = getattr(value, "size", None)
    size = size() if callable(size) and hasattr(value, "numel") else size
    if shape is not None and isinstance(size, int) and size > 1 and hasattr(value, "dtype"):
        if size > _MAX_ITEMS:  # a large array or tensor: describe it, do not dump it
            return f"<{type(value).__name__} shape {tuple(shape)} dtype {value.dtype}>"
        return _convert(value.tolist(), key, depth + 1)
    item = getattr(value, "item", None)  # numpy / torch scalars
    if callable(item):
        out = item()
        if isinstance(out, (int, float, bool, str)):
            return out
    if (
        isinstance(value, types.SimpleNamespace)
        or type(value).__repr__ is object.__repr__
        and hasattr(value, "__dict__")
    ):
        return _convert(vars(value), key, depth + 1)  # plain objects: their attributes, redacted per key
    if callable(value):
        return _qualname(value)
    return _scrub(reprlib.repr(value))


def _is_chz(value: Any) -> bool:
    import sys

    chz = sys.modules.get("chz")
    return chz is not None and not isinstance(value, type) and chz.is_chz(value)


def _convert_chz(value: Any, depth: int) -> dict[str, Any]:
    """A chz object's fields; a nested chz object whose class is not the field's declared
    one (a subclass, or a field typed ``object``) gets ``"__chz_type__": "module:Class"``
    so :func:`load_config` rebuilds the same class."""
    import typing

    import chz

    out: dict[str, Any] = {}
    for name, field in chz.chz_fields(value).items():
        v = getattr(value, name)
        declared = field.x_type
        conv = _convert(v, name, depth + 1)
        if _is_chz(v) and type(v) is not declared:
            conv = {_TYPE_KEY: _qualname(type(v)), **conv}
        elif isinstance(v, (list, tuple, dict)) and isinstance(conv, (list, dict)):
            args = typing.get_args(declared)
            items = v.values() if isinstance(v, dict) else v
            item_type = args[-1] if args and args[-1] is not Ellipsis else (args[0] if args else None)
            keys = list(conv) if isinstance(conv, dict) else range(len(conv))
            for item, k in zip(items, keys, strict=False):
                c = conv[k]
                if _is_chz(item) and isinstance(c, dict) and type(item) is not item_type:
                    conv[k] = {_TYPE_KEY: _qualname(type(item)), **c}
        out[name] = conv
    return out


def _redact_all(value: Any) -> Any:
    """Every string leaf of an already converted value replaced by ``<redacted>``."""
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, dict):
        return {k: _redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v) for v in value]
    return value


def _safe_str(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _is_function(value: Any) -> bool:
    import types

    return isinstance(
        value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType)
    )
