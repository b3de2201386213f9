"""Strict JSON in and out: orjson on the fast path, exact checks only when a cheap test fails.

orjson rejects invalid UTF-8 and NaN/Infinity, but keeps the last of duplicate keys, turns
integers beyond 64 bits into floats and nests to 1024. All three are ruled out in C in the
common case. A text of at most 2 * MAX_DEPTH + 1 bytes cannot nest deeper (nor can one of at
most MAX_DEPTH brackets). A text equal to orjson's re-encoding of its value (compact JSON, as
most producers write it) dropped no pair and turned no integer into a float. Otherwise: an
integer out of range has at least 19 digits in a row; and every key/value pair puts one
``:`` in the text, as in the re-encoding, so equal colon counts (with no ``\\u`` escape that
could hide a colon) mean no pair was dropped. When a test fails, a walk of the value and the
stdlib parser re-check exactly.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

__all__ = ["MAX_DEPTH", "SHALLOW_BYTES", "JSONError", "check_value", "dumps", "loads"]

MAX_DEPTH = 128
"""Deepest nesting accepted in envelopes, decisions and results (orjson encodes up to 254)."""

_INT_MIN = -(1 << 63)
_INT_MAX = (1 << 64) - 1
_BIG_FLOAT = float(1 << 63)
_FOLD = bytes.maketrans(b"123456789{", b"000000000[")
"""Digits to 0 and braces to brackets, so one count and one search test depth and length."""
_LONG_RUN = b"0" * 19
SHALLOW_BYTES = 2 * MAX_DEPTH + 1
"""A text this short cannot nest deeper than MAX_DEPTH (each level takes two brackets)."""


class JSONError(ValueError):
    """The value is not the strict JSON this project accepts; the text is safe to show."""


def _scan(value: Any, depth: int) -> tuple[int, int, bool]:
    """Validate a decoded JSON value; return (keys, colons in strings, has a huge float)."""
    if depth > MAX_DEPTH:
        raise JSONError(f"nesting deeper than {MAX_DEPTH}")
    tp = type(value)
    if tp is str:
        return 0, value.count(":"), False
    if tp is dict:
        keys, colons, huge = len(value), 0, False
        for k, v in value.items():
            if type(k) is not str:
                raise JSONError("object keys must be strings")
            colons += k.count(":")
            if type(v) is str:
                colons += v.count(":")
            elif not (v is None or type(v) is bool or type(v) is int):
                k2, c2, h2 = _scan(v, depth + 1)
                keys, colons, huge = keys + k2, colons + c2, huge or h2
            elif type(v) is int and not _INT_MIN <= v <= _INT_MAX:
                raise JSONError("integer out of 64-bit range")
        return keys, colons, huge
    if tp is list or tp is tuple:
        keys, colons, huge = 0, 0, False
        for v in value:
            k2, c2, h2 = _scan(v, depth + 1)
            keys, colons, huge = keys + k2, colons + c2, huge or h2
        return keys, colons, huge
    if tp is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise JSONError("integer out of 64-bit range")
        return 0, 0, False
    if tp is float:
        if not math.isfinite(value):
            raise JSONError("NaN and Infinity are not JSON")
        return 0, 0, abs(value) >= _BIG_FLOAT
    if value is None or tp is bool:
        return 0, 0, False
    raise JSONError(f"{tp.__name__} is not a JSON type")


def check_value(value: Any) -> None:
    """Raise JSONError unless value is plain JSON (dict/list/str/int/finite float/bool/None)."""
    try:
        _scan(value, 0)
    except RecursionError:
        raise JSONError(f"nesting deeper than {MAX_DEPTH}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise JSONError("duplicate object key")
    return out


def _reject_constant(name: str) -> Any:
    raise JSONError("NaN and Infinity are not JSON")


def _exact_int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise JSONError("integer out of 64-bit range")
    return value


def loads(data: bytes | str, max_bytes: int) -> Any:
    """Decode strict JSON of at most max_bytes; JSONError on anything else."""
    if isinstance(data, str):
        if len(data) > max_bytes:
            raise JSONError(f"payload larger than {max_bytes} bytes")
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError:
            raise JSONError("payload is not valid UTF-8") from None
    if len(data) > max_bytes:
        raise JSONError(f"payload larger than {max_bytes} bytes")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise JSONError("payload is not valid JSON") from None
    folded = None
    if len(data) > SHALLOW_BYTES:
        folded = data.translate(_FOLD)
        if folded.count(b"[") > MAX_DEPTH:
            _check_exactly(data, value)
            return value
    encoded = orjson.dumps(value)  # at most MAX_DEPTH deep here, within orjson's limit
    if encoded == data:
        return value
    if folded is None:
        folded = data.translate(_FOLD)
    if _LONG_RUN in folded or b"\\u" in data or data.count(b":") != encoded.count(b":"):
        _check_exactly(data, value)
    return value


def _check_exactly(data: bytes, value: Any) -> None:
    """The slow path of loads: walk the value, and re-parse with the stdlib if still unsure."""
    keys, colons, huge = _scan(value, 0)
    if huge or b"\\u" in data or data.count(b":") != keys + colons:
        try:
            json.loads(
                data,
                object_pairs_hook=_no_duplicates,
                parse_constant=_reject_constant,
                parse_int=_exact_int,
            )
        except JSONError:
            raise
        except (ValueError, RecursionError):
            raise JSONError("payload is not valid JSON") from None


def dumps(value: Any) -> bytes:
    """Encode plain JSON (checked first, so NaN never becomes null); JSONError otherwise."""
    check_value(value)
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        raise JSONError("value is not JSON-safe") from None
