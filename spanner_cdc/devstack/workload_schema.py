"""Tables of the workload generator: their DDL in both dialects, random values and their change stream encoding."""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from functools import cached_property
from typing import Any

from spanner_cdc.errors import ConfigError
from spanner_cdc.names import IMMUTABLE_KEY_RANGE, PARTITION_MODES, VALUE_CAPTURE_TYPES
from spanner_cdc.times import parse_rfc3339

GOOGLE_STANDARD_SQL, POSTGRESQL = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
_GSQL_TYPES = {"STRING": "STRING(MAX)", "BYTES": "BYTES(MAX)", "ARRAY<STRING>": "ARRAY<STRING(MAX)>"}
_PG_TYPES = {
    "INT64": "bigint",
    "STRING": "varchar",
    "FLOAT64": "double precision",
    "BOOL": "boolean",
    "NUMERIC": "numeric",
    "TIMESTAMP": "timestamptz",
    "DATE": "date",
    "BYTES": "bytea",
    "JSON": "jsonb",
    "ARRAY<STRING>": "varchar[]",
    "ARRAY<INT64>": "bigint[]",
}
_WORDS = ("blue", "Zoë", "o'clock", "night", "río", "echo", '"quoted"', "sun", "moon", "雨")
_VENUES = ("Arena", "Hall", "Club", "Park", "Dome", "Forum", "Stage", "Barn")
_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # INT64, STRING, FLOAT64, BOOL, NUMERIC, TIMESTAMP, DATE, BYTES, JSON, ARRAY<STRING>, ARRAY<INT64>


@dataclass(frozen=True)
class Table:
    name: str
    keys: tuple[Column, ...]
    values: tuple[Column, ...]
    weight: int  # how often a row change picks this table

    @cached_property
    def types(self) -> dict[str, str]:
        """The non-key columns' types by name, in schema order."""
        return {c.name: c.type for c in self.values}

    def random_key(self, rng: random.Random) -> tuple[Any, ...]:
        if self.name == "singers":
            return (rng.randint(1, 300),)
        if self.name == "albums":
            return (rng.randint(1, 100), rng.randint(1, 4))
        return (rng.choice(_VENUES), rng.randint(1, 40))


# Lower-case names work unquoted in both dialects, so mutations are the same for both.
TABLES: tuple[Table, ...] = (
    Table(
        "singers",
        (Column("singer_id", "INT64"),),
        (
            Column("first_name", "STRING"),
            Column("last_name", "STRING"),
            Column("rating", "FLOAT64"),
            Column("active", "BOOL"),
            Column("info", "JSON"),
            Column("updated_at", "TIMESTAMP"),
        ),
        weight=3,
    ),
    Table(
        "albums",
        (Column("singer_id", "INT64"), Column("album_id", "INT64")),
        (
            Column("title", "STRING"),
            Column("price", "NUMERIC"),
            Column("tags", "ARRAY<STRING>"),
            Column("release_date", "DATE"),
            Column("cover", "BYTES"),
        ),
        weight=3,
    ),
    Table(
        "concerts",
        (Column("venue", "STRING"), Column("concert_id", "INT64")),
        (Column("starts_at", "TIMESTAMP"), Column("ticket_prices", "ARRAY<INT64>"), Column("notes", "JSON")),
        weight=2,
    ),
)
TABLES_BY_NAME = {t.name: t for t in TABLES}


def ddl_statements(
    dialect: str, stream: str, value_capture_type: str = "OLD_AND_NEW_VALUES", partition_mode: str = IMMUTABLE_KEY_RANGE
) -> list[str]:
    """CREATE TABLE for the workload's tables and CREATE CHANGE STREAM `stream` FOR ALL."""
    if value_capture_type not in VALUE_CAPTURE_TYPES:
        raise ConfigError("value_capture_type", value_capture_type, " | ".join(VALUE_CAPTURE_TYPES))
    if partition_mode not in PARTITION_MODES:
        raise ConfigError("partition_mode", partition_mode, " | ".join(PARTITION_MODES))
    # the default mode is left unsaid, as most streams do
    options = f"value_capture_type = '{value_capture_type}'" + (
        f", partition_mode = '{partition_mode}'" if partition_mode != IMMUTABLE_KEY_RANGE else ""
    )
    if dialect == GOOGLE_STANDARD_SQL:
        statements = [
            f"CREATE TABLE {t.name} ("
            + ", ".join(
                [f"{c.name} {_GSQL_TYPES.get(c.type, c.type)} NOT NULL" for c in t.keys]
                + [f"{c.name} {_GSQL_TYPES.get(c.type, c.type)}" for c in t.values]
            )
            + f") PRIMARY KEY ({', '.join(c.name for c in t.keys)})"
            for t in TABLES
        ]
        return [
            *statements,
            f"CREATE CHANGE STREAM {stream} FOR ALL OPTIONS ({options})",
        ]
    if dialect == POSTGRESQL:
        statements = [
            f"CREATE TABLE {t.name} ("
            + ", ".join(
                [f"{c.name} {_PG_TYPES[c.type]} NOT NULL" for c in t.keys]
                + [f"{c.name} {_PG_TYPES[c.type]}" for c in t.values]
            )
            + f", PRIMARY KEY ({', '.join(c.name for c in t.keys)}))"
            for t in TABLES
        ]
        return [
            *statements,
            f"CREATE CHANGE STREAM {stream} FOR ALL WITH ({options})",
        ]
    raise ConfigError("dialect", dialect, f"{GOOGLE_STANDARD_SQL} or {POSTGRESQL}")


def random_value(column: Column, rng: random.Random) -> Any:
    """A value for the client's mutations (None now and then)."""
    if rng.random() < 0.08:
        return None
    kind = column.type
    if kind == "INT64":
        return rng.randint(-(10**12), 10**12)
    if kind == "STRING":
        return f"{rng.choice(_WORDS)} {rng.randint(0, 999)}"
    if kind == "FLOAT64":
        return round(rng.uniform(-1000, 1000), 3)
    if kind == "BOOL":
        return rng.random() < 0.5
    if kind == "NUMERIC":
        cents = rng.randint(0, 10**7) * 10 + rng.randint(1, 9)  # no trailing zero: one canonical text
        return Decimal(f"{cents // 1000}.{cents % 1000:03d}")
    if kind == "TIMESTAMP":
        return _EPOCH + timedelta(microseconds=rng.randint(0, 10**15))
    if kind == "DATE":
        return date(2000, 1, 1) + timedelta(days=rng.randint(0, 20000))
    if kind == "BYTES":
        return base64.b64encode(rng.randbytes(rng.randint(0, 24)))  # the client takes BYTES base64-encoded
    if kind == "JSON":
        from google.cloud.spanner_v1 import JsonObject

        return JsonObject(
            {"n": rng.randint(0, 99), "word": rng.choice(_WORDS), "list": [1, "two", None], "ok": rng.random() < 0.5}
        )
    if kind == "ARRAY<STRING>":
        return [rng.choice(_WORDS) for _ in range(rng.randint(0, 3))]
    if kind == "ARRAY<INT64>":
        return [rng.randint(0, 500) for _ in range(rng.randint(0, 4))]
    raise ValueError(f"no generator for {kind}")


def encode(column_type: str, value: Any) -> Any:
    """A value as a change stream carries it: INT64 / NUMERIC as strings, BYTES base64, TIMESTAMP RFC 3339,
    DATE YYYY-MM-DD, JSON as text. Accepts values as sent (random_value) and as the client decodes them."""
    if value is None:
        return None
    if column_type.startswith("ARRAY<"):
        return [encode(column_type[6:-1], v) for v in value]
    if column_type in ("INT64", "NUMERIC"):
        return str(value)
    if column_type == "TIMESTAMP":
        if isinstance(value, str):
            return value
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if column_type == "DATE":
        return value if isinstance(value, str) else value.isoformat()
    if column_type == "BYTES":
        return value.decode() if isinstance(value, bytes) else value
    if column_type == "JSON":
        return value if isinstance(value, str) else json.dumps(dict(value), sort_keys=True, separators=(",", ":"))
    if column_type == "FLOAT64":
        return float(value)
    return value


def comparable(column_type: str | dict[str, Any], value: Any) -> Any:
    """A change stream value in a form where equal values compare equal whatever their text: numbers
    parsed, JSON parsed, timestamps as datetimes. `column_type` is a type name or Spanner's JSON type."""
    if isinstance(column_type, dict):
        code = str(column_type.get("code", ""))
        if code == "ARRAY":
            element = column_type.get("array_element_type", {})
            return None if value is None else [comparable(element, v) for v in value]
        return comparable(code, value)
    if value is None:
        return None
    if column_type.startswith("ARRAY<"):
        return [comparable(column_type[6:-1], v) for v in value]
    if column_type == "INT64":
        return int(value)
    if column_type == "NUMERIC":
        return Decimal(value)
    if column_type == "FLOAT64":
        return float(value)
    if column_type == "TIMESTAMP":
        return parse_rfc3339(value)
    if column_type == "JSON":
        return json.loads(value) if isinstance(value, str) else value
    return value


