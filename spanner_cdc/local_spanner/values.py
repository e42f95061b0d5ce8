"""Column values of the local server: checking mutation values against column types, key ordering, timestamps."""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from google.protobuf import struct_pb2, timestamp_pb2

from spanner_cdc.local_spanner.model import QueryError

COMMIT_TIMESTAMP_PLACEHOLDER = "spanner.commit_timestamp()"
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NON_FINITE = {"NaN", "Infinity", "-Infinity"}
_TIMESTAMP = re.compile(r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$")


def pb_to_python(value: struct_pb2.Value) -> Any:
    """A protobuf Value as plain Python: str / float / bool / None / list."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "list_value":
        return [pb_to_python(v) for v in value.list_value.values]
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    if kind == "struct_value":
        return {k: pb_to_python(v) for k, v in value.struct_value.fields.items()}
    return None


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)


def pb_timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    """A datetime (naive = UTC) as a protobuf Timestamp; Timestamp.FromDatetime's result, for a fraction of its cost
    (every commit answers with one)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds, micros = divmod((value - _EPOCH) // _ONE_US, 1_000_000)
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=micros * 1000)


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with 'Z', microseconds only when non-zero (as Spanner prints them)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z"


def parse_timestamp(text: str) -> datetime:
    """An RFC 3339 timestamp as an aware UTC datetime (precision beyond µs is truncated)."""
    match = _TIMESTAMP.match(text.strip())
    if match is None:
        raise ValueError(f"invalid timestamp {text!r}: expected RFC 3339 such as 2024-01-31T12:00:00.123456Z")
    day, clock, fraction, zone = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    zone = "+00:00" if zone in ("Z", "z") else zone
    return datetime.fromisoformat(f"{day}T{clock}.{micros}{zone}").astimezone(UTC)


def _canonical_timestamp(text: str) -> str:
    match = _TIMESTAMP.match(text.strip())
    if match is None:
        raise ValueError(text)
    day, clock, fraction, zone = match.groups()
    if zone not in ("Z", "z", "+00:00", "-00:00"):
        parsed = parse_timestamp(text)
        nanos = (fraction or "").ljust(9, "0")
        day, clock = parsed.strftime("%Y-%m-%d"), parsed.strftime("%H:%M:%S")
        fraction = nanos
    fraction = (fraction or "").rstrip("0")
    return f"{day}T{clock}{'.' + fraction if fraction else ''}Z"


def _canonical_numeric(text: str) -> str:
    number = Decimal(text)
    if not number.is_finite():
        if number.is_nan():
            return "NaN"
        raise ValueError(text)
    formatted = format(number, "f")
    if "." in formatted:
        formatted = formatted.rstrip("0").rstrip(".")
    return "0" if formatted in ("-0", "") else formatted


def _canonical_json(text: str) -> str:
    # small values memoised: parsing and re-serialising is most of a JSON value's commit cost, and values repeat
    return _canonical_small_json(text) if len(text) <= 1024 else _reserialised_json(text)


def _reserialised_json(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


_canonical_small_json = lru_cache(maxsize=4096)(_reserialised_json)


def _pg_numeric(text: str) -> str:
    """PostgreSQL's numeric keeps the scale it was given (12.3400), unlike GoogleSQL's NUMERIC."""
    number = Decimal(text)
    if number.is_nan():
        return "NaN"
    if not number.is_finite():
        raise ValueError(text)
    return format(number.copy_abs() if number.is_zero() else number, "f")


def _jsonb_ordered(value: Any) -> Any:
    if isinstance(value, dict):  # jsonb orders an object's keys by length, then bytewise
        return {k: _jsonb_ordered(value[k]) for k in sorted(value, key=lambda k: (len(k.encode()), k.encode()))}
    if isinstance(value, list):
        return [_jsonb_ordered(v) for v in value]
    return value


@lru_cache(maxsize=4096)
def _pg_jsonb(text: str) -> str:
    """jsonb's text as PostgreSQL (and Spanner's PostgreSQL dialect) prints it: keys by length, then bytewise;
    ', ' and ': ' between items."""
    return json.dumps(_jsonb_ordered(json.loads(text)), separators=(", ", ": "), ensure_ascii=False)


def normalize(type_: dict[str, Any], value: Any, where: str) -> Any:
    """A value received on the wire (already pb_to_python'd) in change stream JSON encoding; raises QueryError."""
    if value is None:
        return None
    code = type_["code"]
    # the commit path's common cases first: already canonical text of a STRING or an INT64
    if type(value) is str:
        if code == "STRING" and "_max_length" not in type_:
            return value
        if code == "INT64" and value.isascii() and value.isdigit() and value[0] != "0" and len(value) < 19:
            return value
    try:
        if code == "ARRAY":
            if not isinstance(value, list):
                raise ValueError("expected a list")
            element = type_["array_element_type"]
            return [normalize(element, item, where) for item in value]
        if code == "INT64":
            if isinstance(value, bool):
                raise ValueError(value)
            number = int(value) if isinstance(value, str) else int(value) if float(value).is_integer() else None
            if number is None or not _INT64_MIN <= number <= _INT64_MAX:
                raise ValueError(value)
            return str(number)
        if code in ("FLOAT64", "FLOAT32"):
            if isinstance(value, str):
                if value not in _NON_FINITE:
                    raise ValueError(value)
                return value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(value)
            if math.isnan(value):
                return "NaN"
            if math.isinf(value):
                return "Infinity" if value > 0 else "-Infinity"
            return float(value)
        if code == "BOOL":
            if not isinstance(value, bool):
                raise ValueError(value)
            return value
        if not isinstance(value, str):
            raise ValueError(value)
        if code == "STRING":
            limit = type_.get("_max_length")
            if limit is not None and len(value) > limit:
                raise QueryError("FAILED_PRECONDITION", f"New value exceeds the maximum size limit for {where}: {len(value)} > {limit}")
            return value
        if code == "BYTES":
            base64.b64decode(value, validate=True)
            return value
        if code == "TIMESTAMP":
            return value if value == COMMIT_TIMESTAMP_PLACEHOLDER else _canonical_timestamp(value)
        if code == "DATE":
            return date.fromisoformat(value).isoformat()
        if code == "NUMERIC":
            return _pg_numeric(value) if type_.get("type_annotation") == "PG_NUMERIC" else _canonical_numeric(value)
        if code == "JSON":
            return _pg_jsonb(value) if type_.get("type_annotation") == "PG_JSONB" else _canonical_json(value)
    except QueryError:
        raise
    except (ValueError, TypeError, InvalidOperation, binascii.Error, OverflowError) as exc:
        raise QueryError("FAILED_PRECONDITION", f"Invalid value for {where}: expected {type_name(type_)}, got {value!r}") from exc
    raise QueryError("INVALID_ARGUMENT", f"Unsupported type {type_name(type_)} of {where}")


def type_name(type_: dict[str, Any]) -> str:
    if type_["code"] == "ARRAY":
        return f"ARRAY<{type_name(type_['array_element_type'])}>"
    return str(type_["code"])


def public_type(type_: dict[str, Any]) -> dict[str, Any]:
    """The Spanner JSON type without the server's private hints (keys starting with '_')."""
    out = {k: v for k, v in type_.items() if not k.startswith("_")}
    if "array_element_type" in out:
        out["array_element_type"] = public_type(out["array_element_type"])
    return out


def to_pb_value(value: Any) -> struct_pb2.Value:
    """A stored value as the protobuf Value a query result carries."""
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, (int, float)):
        out.number_value = value
    elif isinstance(value, list):
        out.list_value.values.extend(to_pb_value(v) for v in value)
    else:
        raise TypeError(f"cannot encode {value!r}")
    return out


class _Descending:
    """Inverts the order of a sort key for DESC key columns."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Descending) -> bool:
        return bool(other.key < self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.key == other.key

    def __le__(self, other: _Descending) -> bool:
        return bool(other.key <= self.key)


def sort_key(type_: dict[str, Any], value: Any, descending: bool = False) -> Any:
    """Spanner's order of a key value (NULL first, numbers numerically, timestamps by time)."""
    if value is None:
        key: Any = (0,)
    else:
        code = type_["code"]
        if code == "INT64":
            key = (1, int(value))
        elif code in ("FLOAT64", "FLOAT32"):
            key = (1, float(value) if not isinstance(value, str) else float(value.lower().replace("infinity", "inf")))
        elif code == "NUMERIC":
            key = (1, Decimal(value))
        elif code == "BYTES":
            key = (1, base64.b64decode(value))
        elif code == "TIMESTAMP":
            day_clock, _, fraction = value.rstrip("Z").partition(".")
            key = (1, day_clock, fraction.ljust(9, "0"))
        else:
            key = (1, value)
    return _Descending(key) if descending else key
