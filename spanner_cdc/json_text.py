"""The JSON text of change values as json.dumps(value, separators=(",", ":"), ensure_ascii=False) writes it, faster
for values that cannot hold a float (the lake's envelope rows and the local server's change records both write it)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgspec

_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_msgspec = msgspec.json.encode
# msgspec writes text, integers of any size, booleans and null exactly as json does (tests hold them equal over every
# code point), ~10x faster; floats differ (1e16 for json's 1e+16, 0.00001 for 1e-05, null for NaN). A column whose type
# names one of these codes (FLOAT32/64, JSON, arrays of them) may hold floats.
_FLOAT_CODES = ('"FLOAT', '"JSON"')
# ... but a finite float that repr() writes without an exponent (0, and 1e-4 <= |x| < 1e16) msgspec writes as repr(),
# which is json's text of it (tests compare them over random bit patterns and the boundaries)
_FLOAT_LOW, _FLOAT_HIGH = 1e-4, 1e16
_SCALARS = frozenset({str, int, bool, type(None)})


def may_hold_floats(types: Iterable[Any]) -> bool:
    """Whether values of columns of these Spanner types (JSON type objects, e.g. {"code": "INT64"}) may be floats."""
    text = json.dumps(list(types))
    return any(code in text for code in _FLOAT_CODES)


def float_free_text(value: Any) -> bytes:
    """json's UTF-8 text of a value that holds no float, written by msgspec (by json where msgspec refuses it)."""
    try:
        return _msgspec(value)
    except (msgspec.EncodeError, TypeError, UnicodeEncodeError, OverflowError):  # e.g. a lone surrogate
        return _json(value).encode()


def value_text(value: Any) -> bytes:
    """json's UTF-8 text of any value: by msgspec when each float in it is one msgspec writes as json does, else by json."""
    return float_free_text(value) if _floats_agree(value) else _json(value).encode()


def _floats_agree(value: Any) -> bool:
    """Whether every float in `value` (dicts and lists of plain values, as JSON decodes them) is written the same by both."""
    kind = type(value)
    if kind is dict:
        if not _SCALARS.issuperset(map(type, value)):  # a float key is written as a float is
            return False
        items: Any = value.values()
    else:
        items = value if kind is list else (value,)
    for item in items:
        kind = type(item)
        if kind in _SCALARS:
            continue
        if kind is float:
            if not (_FLOAT_LOW <= abs(item) < _FLOAT_HIGH or item == 0.0):  # NaN and infinities fail both tests
                return False
        elif kind is dict or kind is list:
            if not _floats_agree(item):
                return False
        else:  # another type (a subclass): json decides how it is written
            return False
    return True
