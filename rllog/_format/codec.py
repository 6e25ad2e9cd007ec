"""JSON encoding and decoding for run files.

Metric rows follow docs/FORMATS.md §1: one JSON object per line, ``"step"`` first, then the
caller's keys in their order; values are numbers, booleans, strings or null. NaN and
±Infinity are kept as values: by default written as the tokens ``NaN``, ``Infinity``
and ``-Infinity`` (what Python's ``json`` and ``pandas.read_json`` read); with
``strict_json=True`` as ``null`` (strict RFC 8259 JSON, the distinction is lost).
Lone surrogates (``"\\ud83d"`` without its pair, e.g. from a tokenizer cut mid-emoji) have one
rule in every file rllog writes (metrics, config, loop state, rollout summaries, logtree
JSON): in a string value each one becomes U+FFFD (:func:`clean_text`), so every file is
valid UTF-8 that every reader reads (ours, ``json``, ``pandas.read_json`` with or without
pyarrow); a key (a metric, config or loop-state name) holding one is refused at the call
with a TypeError naming it. HTML pages show U+FFFD marked (:func:`encode_html`). Files
written before this rule, holding ``\\udXXX`` escapes, are read with the same replacement.

msgspec does the encoding (one Encoder per writer, one reused buffer); it writes
``null`` for non-finite floats by itself, so rows holding them are re-encoded with
``msgspec.Raw`` tokens in their place.
"""

from __future__ import annotations

import decimal
import enum
import functools
import json
import math
import numbers
import os
import re
import reprlib
import sys
from typing import Any

import msgspec

__all__ = [
    "MetricsEncoder",
    "encode_json",
    "decode_json",
    "to_jsonable",
    "scalar",
    "clean_text",
    "clean_strings",
    "encode_html",
]

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
    if isinstance(value, decimal.Decimal) and value.is_snan():
        raise ValueError(
            f"{where}: Decimal('sNaN') (a signaling NaN) cannot be written; log float('nan') for a missing value"
        )
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


def clean_text(s: str) -> str:
    """``s`` with each lone surrogate replaced by U+FFFD (a high and low surrogate side by
    side are joined into their character); ``s`` itself when it is valid text."""
    if not _has_surrogate(s):
        return s
    return s.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def clean_strings(value: Any) -> Any:
    """``value`` (decoded JSON: dicts, lists, scalars) with :func:`clean_text` applied to
    every string, keys included."""
    t = type(value)
    if t is str:
        return clean_text(value)
    if t is dict:
        return {clean_text(k): clean_strings(v) for k, v in value.items()}
    if t is list:
        return [clean_strings(v) for v in value]
    return value


_TEXT_ONLY = ("title", "textarea", "script", "style")  # elements whose content is not markup
_LONE = re.compile("[\ud800-\udfff]")
_BAD_CHAR_MARK = (
    '<mark class="rllog-bad-char" title="lone surrogate U+{:04X}: not valid text, shown as U+FFFD">'
    "\ufffd</mark>"
)


def encode_html(page: str) -> bytes:
    """An HTML page as UTF-8 bytes; each lone surrogate is shown as a marked U+FFFD
    (``<mark class="rllog-bad-char" title="lone surrogate U+D835...">``) in text, or a bare
    U+FFFD inside a tag or a text-only element (``<title>``...), never as the six
    characters ``\\ud835`` a model could have written.

    Every logged string reaches the page escaped, so a ``<`` after the last ``>`` before a
    character means it is inside a tag (an attribute value)."""
    try:
        return page.encode("utf-8")
    except UnicodeEncodeError:
        pass
    page = page.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")  # join pairs

    def mark(m: re.Match[str]) -> str:
        i = m.start()
        in_tag = page.rfind("<", 0, i) > page.rfind(">", 0, i)
        in_text_only = any(page.rfind(f"<{t}", 0, i) > page.rfind(f"</{t}", 0, i) for t in _TEXT_ONLY)
        return "\ufffd" if in_tag or in_text_only else _BAD_CHAR_MARK.format(ord(m.group()))

    return _LONE.sub(mark, page).encode("utf-8")


class MetricsEncoder:
    """Encodes metric rows to JSONL bytes; build one per writer and reuse it.

    ``encode_row(step, metrics)`` returns the row including its trailing ``\\n``, e.g.
    ``b'{"step":3,"env/all/reward/total":0.5,"entropy":NaN}\\n'``. The returned object is
    a reused buffer: write it before the next call. String values pass through
    `rllog._format.redact.redact_metric` (a secret in a logged string becomes
    ``<redacted>``, as in config.json).

    Raises:
        TypeError: ``step`` is not an int (numpy ints are converted), a key is not a
            str, or a value cannot be made a number, bool, str or None; the message
            names the key and the step. Nothing is returned for that row.
        ValueError: ``metrics`` has a key ``"step"`` or an empty key ``""``, ``step`` is
            negative, or a value is ``Decimal('sNaN')`` (the key is named).
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
        if "" in metrics:
            raise ValueError(f"metrics at step {step} has an empty key ''; every metric needs a name")
        if "step" in metrics:
            raise ValueError(
                f"metrics at step {step} has a key 'step'; the step is the first argument of log_metrics"
            )
        # Non-finite floats (msgspec would write null) and ints past 64 bits (JSON readers
        # reject them). For all-numeric rows a C-level sum, min and max tell (x - x is 0.0
        # only for finite x); other rows are scanned.
        if str in types:
            metrics = {k: _redacted(k, v) if type(v) is str else v for k, v in metrics.items()}
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
        """Rows with lone surrogates: refused in a key, U+FFFD in a value (module docstring)."""
        row: dict[str, Any] = {"step": step}
        for k, v in metrics.items():
            if _has_surrogate(k):
                raise TypeError(
                    f"metric key {k!r} at step {step} has a lone surrogate (not valid text); name it with valid text"
                )
            if type(v) is float and not math.isfinite(v) and self.strict_json:
                v = None
            elif type(v) is str:
                v = clean_text(v)
            row[k] = v
        buf = self._buf
        buf[:] = json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode() + b"\n"
        return buf


@functools.lru_cache(maxsize=4096)
def _redacted(key: str, value: str) -> str:
    """A metric's string value with secrets replaced (:func:`rllog._format.redact.redact_metric`):
    a label repeated every row costs one cache lookup; a new long string ~50 us."""
    from rllog._format.redact import redact_metric  # its patterns compile on first use, not at import

    return redact_metric(key, value)


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
        return clean_text(value) if t is str else value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be str, got {type(k).__name__} {k!r}")
            if _has_surrogate(k):
                raise TypeError(f"{where}: key {k!r} has a lone surrogate (not valid text)")
            out[k] = to_jsonable(v, f"{where}[{k!r}]", strict_json, raw)
        return out
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]", strict_json, raw) for i, v in enumerate(value)]
    if isinstance(value, os.PathLike):
        return to_jsonable(os.fspath(value), where, strict_json, raw)
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and getattr(value, "ndim", False) and _element_count(value) != 1:
        return to_jsonable(tolist(), where, strict_json, raw)
    # one-element arrays/tensors become numbers, as in metric rows (scalar's rule)
    return to_jsonable(scalar(value, where), where, strict_json, raw)


def _element_count(value: Any) -> int | None:
    """Elements of a numpy array (``.size``) or torch tensor (``.numel()``); None if unknown."""
    size = getattr(value, "size", None)
    if callable(size):
        numel = getattr(value, "numel", None)
        size = numel() if callable(numel) else None
    return size if isinstance(size, int) else None


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
    return json.dumps(plain, indent=indent, ensure_ascii=False).encode()


def decode_json(data: bytes | str) -> Any:
    """Decode one JSON document; accepts the ``NaN``/``Infinity`` tokens and ``\\uD800`` escapes
    (read as U+FFFD, the rule of the module docstring).

    msgspec decodes the common case; documents it rejects (tokens, lone surrogates) go
    through Python's ``json``.

    Raises:
        ValueError: (``json.JSONDecodeError``) if the text is not JSON.
    """
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return clean_strings(json.loads(data))  # files from before the one rule hold \\udXXX escapes
