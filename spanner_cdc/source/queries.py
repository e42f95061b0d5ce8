"""Change stream query text and bound parameters for both SQL dialects, with the argument checks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1 import param_types

from spanner_cdc.errors import ConfigError, UsageError
from spanner_cdc.names import DIALECTS, GOOGLE_STANDARD_SQL, IDENTIFIER, IDENTIFIER_ACCEPTED
from spanner_cdc.times import utc

HEARTBEAT_MIN_MS = 1_000
HEARTBEAT_MAX_MS = 300_000


@dataclass(frozen=True, slots=True)
class ChangeStreamQuery:
    """One statement ready for `snapshot.execute_sql(sql, params=..., param_types=...)`."""

    sql: str
    params: dict[str, Any]
    param_types: dict[str, Any]


def validate_stream_name(stream: object, field: str = "stream") -> str:
    """The stream name goes into SQL text, so only a plain identifier is accepted."""
    if not isinstance(stream, str) or not IDENTIFIER.fullmatch(stream):
        raise ConfigError(field, stream, IDENTIFIER_ACCEPTED)
    return stream


def validate_heartbeat(heartbeat_ms: object, field: str = "heartbeat_ms") -> int:
    if isinstance(heartbeat_ms, bool) or not isinstance(heartbeat_ms, int):
        raise ConfigError(field, heartbeat_ms, f"an integer in [{HEARTBEAT_MIN_MS}, {HEARTBEAT_MAX_MS}]")
    if not HEARTBEAT_MIN_MS <= heartbeat_ms <= HEARTBEAT_MAX_MS:
        raise ConfigError(field, heartbeat_ms, f"an integer in [{HEARTBEAT_MIN_MS}, {HEARTBEAT_MAX_MS}]")
    return heartbeat_ms


def validate_dialect(dialect: object, field: str = "dialect") -> str:
    text = str(dialect).upper()
    if text not in DIALECTS:
        raise ConfigError(field, dialect, "one of " + ", ".join(DIALECTS))
    return text


def utc_timestamp(value: object, field: str) -> datetime:
    """A timezone-aware datetime as a plain UTC datetime (µs); naive datetimes are refused."""
    # a plain datetime (times.utc): the client sends subclasses carrying nanoseconds with their stale nanos
    try:
        if isinstance(value, datetime):
            return utc(value)
    except ValueError:
        pass
    raise ConfigError(field, value, "a timezone-aware datetime")


def validate_window(start: object, end: object) -> tuple[datetime, datetime | None]:
    """Both bounds as UTC datetimes; end (inclusive, None = unbounded) must not precede start."""
    start_utc = utc_timestamp(start, "start_timestamp")
    end_utc = None if end is None else utc_timestamp(end, "end_timestamp")
    if end_utc is not None and end_utc < start_utc:
        raise UsageError(
            f"end_timestamp {end_utc.isoformat()} is before start_timestamp {start_utc.isoformat()}: "
            "the end of a change stream query must be at or after its start"
        )
    return start_utc, end_utc


def build_query(
    stream: str,
    dialect: str,
    token: str | None,
    start: datetime,
    end: datetime | None,
    heartbeat_ms: int,
    *,
    mutable: bool = False,
) -> ChangeStreamQuery:
    """The spec's read-function query for one partition (token None = the first, root query); `mutable`: the
    stream is in MUTABLE_KEY_RANGE partition mode (PostgreSQL reads it with read_proto_bytes_, not read_json_)."""
    stream = validate_stream_name(stream)
    dialect = validate_dialect(dialect)
    heartbeat_ms = validate_heartbeat(heartbeat_ms)
    start_utc, end_utc = validate_window(start, end)
    if token is not None and not isinstance(token, str):
        raise ConfigError("partition_token", token, "a string or None")
    if dialect == GOOGLE_STANDARD_SQL:
        sql = (
            f"SELECT ChangeRecord FROM READ_{stream}("
            "start_timestamp => @start_timestamp, "
            "end_timestamp => @end_timestamp, "
            "partition_token => @partition_token, "
            "heartbeat_milliseconds => @heartbeat_milliseconds)"
        )
        names = ("start_timestamp", "end_timestamp", "partition_token", "heartbeat_milliseconds")
    else:
        function = "read_proto_bytes_" if mutable else "read_json_"
        sql = f'SELECT * FROM "spanner"."{function}{stream}"($1, $2, $3, $4, null)'
        names = ("p1", "p2", "p3", "p4")
    values = (start_utc, end_utc, token, heartbeat_ms)
    types = (param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64)
    return ChangeStreamQuery(sql=sql, params=dict(zip(names, values, strict=True)), param_types=dict(zip(names, types, strict=True)))
