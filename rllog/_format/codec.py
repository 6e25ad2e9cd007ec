"""JSON encoding and decoding for run files.

Metric rows follow docs/FORMATS.md §1: one JSON object per line, ``"step"`` first, then the
caller's keys in their order; values are numbers, booleans, strings or null. NaN and
±Infinity are kept as values: by default written as the tokens ``NaN``, ``Infinity``
and ``-Infinity`` (what Python's ``json`` and ``pandas.read_json`` read); with
``strict_json=True`` as ``null`` (strict RFC 8259 JSON, the distinction is lost).
Strings with lone surrogates are written with ``\\uXXXX`` escapes, which Python's
``json`` reads back to the same string.

msgspec does the encoding (one Encoder per writer, one reused buffer); it writes
``null`` for non-finite floats by itself, so rows holding them are re-encoded with
``msgspec.Raw`` tokens in their place.
"""

from __future__ import annotations

import decimal
import enum
import json
import math
import numbers
import os
import reprlib
import sys
from typing import Any

import msgspec

__all__ = ["MetricsEncoder", "encode_json", "decode_json", "to_jsonable", "scalar"]

_NoneType = type(None)
_FAST_TYPES = frozenset({float, int, str, bool, _NoneType})
_NUMERIC = frozenset({float, int, bool})
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
#: scalar types whose ``.item()`` always gives a valid plain value (numpy float32, int64...), learnt on first sight
_ITEM: dict[type, Any] = {}
_NAN = msgspec.Raw(b"NaN")
_INF = msgspec.Raw(b"Infinity")
_NINF = msgspec.Raw(b"-Infinity")


def _nonfinite_token(x: float, strict: bool) -> Any:
    if strict:
        return None
    if x != x:
        return _NAN
    return _INF if x > 0 else _NINF


def scalar(value: Any, where: str) -> Any:
    """Convert ``value`` to a plain JSON scalar (int, float, bool, str or None).

    numpy scalars, 0-d arrays and one-element arrays or tensors (anything with
    ``.item()`` and one element) become Python numbers; other ``numbers.Real`` become
    int or float.

    Raises:
        TypeError: naming ``where`` (e.g. ``"metric 'loss' at step 3"``) if ``value``
            cannot be made a number or a string.
    """
    t = type(value)
    if t in _FAST_TYPES:
        if t is int and not _INT_MIN <= value <= _INT_MAX:
            raise TypeError(
                f"{where}: int {value} is outside the signed 64-bit range JSON readers "
                "(pandas, msgspec) accept; log float(x) instead"
            )
        return value
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.generic) and value.dtype.kind in "biuf":
        dtype = value.dtype
        if dtype.kind == "f" and dtype.itemsize <= 8:
            _ITEM[t] = float  # every value of t is a plain float (NaN/inf handled later)
        elif dtype.kind == "b":
            _ITEM[t] = bool
        elif dtype.kind == "i" or dtype.kind == "u" and dtype.itemsize < 8:
            _ITEM[t] = int  # always within int64
        out = value.item()  # the common numpy scalar: one C call
        return scalar(out, where) if type(out) in _FAST_TYPES else float(out)  # float(): longdouble
    if isinstance(value, enum.Enum):
        return scalar(value.value, where)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    kind = getattr(getattr(value, "dtype", None), "kind", None)
    if kind in ("M", "m", "c", "O", "V"):
        what = {"M": "a datetime", "m": "a timedelta", "c": "a complex number"}.get(kind, "an object")
        raise TypeError(
            f"{where}: expected a number, bool, str or None, got {what} ({t.__name__} of dtype "
            f"{value.dtype}); log a float (e.g. seconds) instead"
        )
    mask = getattr(value, "mask", None)
    if mask is not None and getattr(value, "size", None) == 1 and bool(mask):
        return float("nan")  # a masked numpy value: no number
    item = getattr(value, "item", None)
    if item is not None and callable(item):
        size = getattr(value, "size", None)
        if callable(size):  # torch: .size() is a method; .numel() gives the count
            numel = getattr(value, "numel", None)
            size = numel() if callable(numel) else None
        if size is None or size == 1:
            try:
                out = item()
            except (ValueError, RuntimeError, TypeError):
                out = value
            if type(out) in _FAST_TYPES:
                return scalar(out, where)
            if isinstance(out, numbers.Real) and out is not value:  # e.g. numpy longdouble
                return float(out)
        raise TypeError(
            f"{where}: expected a number, bool, str or None (numpy scalars and one-element "
            f"arrays/tensors are converted), got {t.__name__} with {size} elements"
        )
    if isinstance(value, numbers.Integral):
        return scalar(int(value), where)
    if isinstance(value, (numbers.Real, decimal.Decimal)):
        return float(value)
    raise TypeError(
        f"{where}: expected a number, bool, str or None (numpy scalars and one-element "
        f"arrays/tensors are converted), got {t.__name__}: {_short_repr(value)}"
    )


def _short_repr(value: Any) -> str:
    try:
        return reprlib.repr(value)[:80]
    except Exception:  # a broken __repr__ must not hide the real error
        return f"<{type(value).__name__}>"


def _has_surrogate(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class MetricsEncoder:
    """Encodes metric rows to JSONL bytes; build one per writer and reuse it.

    ``encode_row(step, metrics)`` returns the row including its trailing ``\\n``, e.g.
    ``b'{"step":3,"env/all/reward/total":0.5,"entropy":NaN}\\n'``. The returned object is
    a reused buffer: write it before the next call.

    Raises:
        TypeError: ``step`` is not an int (numpy ints are converted), a key is not a
            str, or a value cannot be made a number, bool, str or None; the message
            names the key and the step. Nothing is returned for that row.
        ValueError: ``metrics`` has a key ``"step"`` or ``step`` is negative.
    """

    __slots__ = ("strict_json", "last", "_encode_into", "_buf")

    def __init__(self, strict_json: bool = False) -> None:
        self.strict_json = strict_json
        self.last: dict[str, Any] = {}  # the metrics of the last row encoded (converted values)
        self._encode_into = msgspec.json.Encoder().encode_into
        self._buf = bytearray(4096)

    def encode_row(self, step: int, metrics: dict[str, Any]) -> bytearray:
        if type(step) is not int:
            step = _check_step(step)
        elif not 0 <= step <= _INT_MAX:
            raise ValueError(f"step must be >= 0 and < 2**63, got {step}")
        if type(metrics) is not dict:
            if not isinstance(metrics, dict):
                raise TypeError(
                    f"metrics at step {step} must be a dict of str to scalars, got {type(metrics).__name__}"
                )
        metrics = dict(metrics)  # a snapshot: checks and encoding must see the same values
        values = metrics.values()
        types = set(map(type, values))
        try:
            "".join(metrics)  # raises TypeError on a non-str key, at C speed
        except TypeError:
            types = set()
        if not types <= _FAST_TYPES or not types:
            metrics = self._clean(step, metrics)
            values = metrics.values()
            types = set(map(type, values))
        if "step" in metrics:
            raise ValueError(
                f"metrics at step {step} has a key 'step'; the step is the first argument of log_metrics"
            )
        # Non-finite floats (msgspec would write null) and ints past 64 bits (JSON readers
        # reject them). For all-numeric rows a C-level sum, min and max tell (x - x is 0.0
        # only for finite x); other rows are scanned.
        if types <= _NUMERIC:
            try:
                total = sum(values)
                nonfinite = total - total != 0
            except OverflowError:  # an int too large for a float
                nonfinite = True
            if int in types and not (_INT_MIN <= min(values) and max(values) <= _INT_MAX):
                self._clean(step, metrics)  # raises TypeError naming the key if an int is out of range
        else:
            nonfinite = False
            for v in values:
                if type(v) is float:
                    nonfinite = nonfinite or v - v != 0
                elif type(v) is int and not _INT_MIN <= v <= _INT_MAX:
                    self._clean(step, metrics)
        source = self.last = metrics  # the values as written, for the writer's same-step check
        if nonfinite:
            metrics = self._tokens(metrics)
        prefix = b'{"step":%d' % step
        plen = len(prefix)
        buf = self._buf
        if not metrics:
            buf[:] = prefix + b"}\n"
            return buf
        try:
            self._encode_into(metrics, buf, plen)
        except UnicodeEncodeError:
            return self._encode_slow(step, source)
        buf[:plen] = prefix
        buf[plen] = 0x2C  # the metrics object's "{" becomes the "," after the step
        buf.append(0x0A)
        return buf

    def _tokens(self, metrics: dict[str, Any]) -> dict[str, Any]:
        strict = self.strict_json
        return {
            k: (_nonfinite_token(v, strict) if type(v) is float and v - v != 0 else v)
            for k, v in metrics.items()
        }

    def _clean(self, step: int, metrics: dict[str, Any]) -> dict[str, Any]:
        out = {}
        item = _ITEM.get
        for k, v in metrics.items():
            if type(k) is not str:
                if isinstance(k, str):
                    k = str(k)
                else:
                    raise TypeError(f"metric keys must be str, got {type(k).__name__} {k!r} at step {step}")
            convert = item(type(v))
            out[k] = convert(v) if convert is not None else scalar(v, f"metric {k!r} at step {step}")
        return out

    def _encode_slow(self, step: int, metrics: dict[str, Any]) -> bytearray:
        row: dict[str, Any] = {"step": step}
        for k, v in metrics.items():
            if type(v) is float and not math.isfinite(v) and self.strict_json:
                v = None
            row[k] = v
        buf = self._buf
        buf[:] = json.dumps(row, ensure_ascii=True, separators=(",", ":"), allow_nan=True).encode() + b"\n"
        return buf


def _check_step(step: Any) -> int:
    if isinstance(step, dict):
        raise TypeError("step must be an int, got a dict: log_metrics takes (step, metrics), step first")
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        item = getattr(step, "item", None)
        value = item() if callable(item) else None
        if type(value) is not int:
            raise TypeError(f"step must be an int, got {type(step).__name__}: {step!r:.40}")
        step = value
    step = int(step)
    if not 0 <= step <= _INT_MAX:
        raise ValueError(f"step must be >= 0 and < 2**63, got {step}")
    return step


def to_jsonable(value: Any, where: str = "value", strict_json: bool = False, raw: bool = True) -> Any:
    """Convert a nested value (dicts, lists, tuples, scalars) into JSON-ready Python objects.

    Dict keys must be str; numpy/torch values become numbers or lists, paths strings; non-finite floats
    become ``msgspec.Raw`` tokens (or None with ``strict_json``).

    ``raw=False`` keeps non-finite floats and strings as they are, for Python's ``json``.

    Raises:
        TypeError: naming the path inside ``where`` of a value that is not JSON-able.
    """
    t = type(value)
    if t is float:
        if math.isfinite(value) or not raw:
            return None if strict_json and not math.isfinite(value) else value
        return _nonfinite_token(value, strict_json)
    if t in _FAST_TYPES:
        if raw and t is str and _has_surrogate(value):
            return msgspec.Raw(json.dumps(value).encode())
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be str, got {type(k).__name__} {k!r}")
            if raw and _has_surrogate(k):
                raise TypeError(f"{where}: key {k!r} has a lone surrogate")
            out[k] = to_jsonable(v, f"{where}[{k!r}]", strict_json, raw)
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]", strict_json, raw) for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return to_jsonable(os.fspath(value), where, strict_json, raw)
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and getattr(value, "ndim", False):
        return to_jsonable(tolist(), where, strict_json, raw)
    return to_jsonable(scalar(value, where), where, strict_json, raw)


_ENCODER = msgspec.json.Encoder()


def encode_json(
    value: Any, *, where: str = "value", strict_json: bool = False, indent: int | None = None
) -> bytes:
    """Encode a nested value to JSON bytes (no trailing newline), NaN kept as tokens.

    ``indent`` pretty-prints (used for config.json).

    Raises:
        TypeError: if something inside is not JSON-able (see :func:`to_jsonable`).
    """
    if indent is None:
        return _ENCODER.encode(to_jsonable(value, where, strict_json))
    plain = to_jsonable(value, where, strict_json, raw=False)
    try:
        return json.dumps(plain, indent=indent, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # lone surrogates: escape them
        return json.dumps(plain, indent=indent, ensure_ascii=True).encode()


def decode_json(data: bytes | str) -> Any:
    """Decode one JSON document; accepts the ``NaN``/``Infinity`` tokens and ``\\uD800`` escapes.

    msgspec decodes the common case; documents it rejects (tokens, lone surrogates) go
    through Python's ``json``.

    Raises:
        ValueError: (``json.JSONDecodeError``) if the text is not JSON.
    """
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return json.loads(data)
