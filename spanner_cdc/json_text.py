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
# code point), ~10x faster; floats differ (1e16 for json's 1e+16, null for NaN). A column whose type names one of these
# codes (FLOAT32/64, JSON, arrays of them) may hold floats.
_FLOAT_CODES = ('"FLOAT', '"JSON"')


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
