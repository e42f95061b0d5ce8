"""Query text and bound parameters for both dialects; argument checks name the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.cloud.spanner_v1 import TypeCode

from spanner_cdc.errors import ConfigError, UsageError
from spanner_cdc.source.queries import build_query, validate_heartbeat, validate_stream_name

START = datetime(2022, 5, 1, 9, 0, 0, tzinfo=UTC)
END = datetime(2022, 5, 1, 10, 0, 0, tzinfo=UTC)


def test_googlesql_query_uses_named_arguments_and_bound_parameters() -> None:
    q = build_query("SingersNameStream", "GOOGLE_STANDARD_SQL", "child_token_1", START, END, 10_000)
    assert q.sql == (
        "SELECT ChangeRecord FROM READ_SingersNameStream(start_timestamp => @start_timestamp, "
        "end_timestamp => @end_timestamp, partition_token => @partition_token, "
        "heartbeat_milliseconds => @heartbeat_milliseconds)"
    )
    assert q.params == {
        "start_timestamp": START,
        "end_timestamp": END,
        "partition_token": "child_token_1",
        "heartbeat_milliseconds": 10_000,
    }
    assert {k: t.code for k, t in q.param_types.items()} == {
        "start_timestamp": TypeCode.TIMESTAMP,
        "end_timestamp": TypeCode.TIMESTAMP,
        "partition_token": TypeCode.STRING,
        "heartbeat_milliseconds": TypeCode.INT64,
    }


def test_postgresql_query_uses_positional_parameters_p1_to_p4() -> None:
    q = build_query("SingersNameStream", "POSTGRESQL", None, START, None, 1000)
    assert q.sql == 'SELECT * FROM "spanner"."read_json_SingersNameStream"($1, $2, $3, $4, null)'
    assert q.params == {"p1": START, "p2": None, "p3": None, "p4": 1000}
    assert [q.param_types[k].code for k in ("p1", "p2", "p3", "p4")] == [
        TypeCode.TIMESTAMP,
        TypeCode.TIMESTAMP,
        TypeCode.STRING,
        TypeCode.INT64,
    ]


def test_the_token_never_enters_the_sql_text() -> None:
    token = "x'); DROP TABLE t; --"
    q = build_query("s", "GOOGLE_STANDARD_SQL", token, START, END, 1000)
    assert token not in q.sql and q.params["partition_token"] == token


def test_timestamps_are_sent_as_plain_utc_datetimes() -> None:
    plus_two = datetime(2022, 5, 1, 11, 0, 0, 5, tzinfo=timezone(timedelta(hours=2)))
    nanos = DatetimeWithNanoseconds(2022, 5, 1, 9, 0, 0, tzinfo=UTC, nanosecond=123456789)
    q = build_query("s", "GOOGLE_STANDARD_SQL", None, plus_two, nanos + timedelta(hours=1), 1000)
    assert q.params["start_timestamp"] == datetime(2022, 5, 1, 9, 0, 0, 5, tzinfo=UTC)
    assert type(q.params["end_timestamp"]) is datetime
    assert q.params["end_timestamp"] == datetime(2022, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL", "postgresql"])
def test_end_equal_to_start_is_allowed(dialect: str) -> None:
    assert build_query("s", dialect, "t", START, START, 1000).sql


@pytest.mark.parametrize("name", ["bad name", "quote'd", 'dq"', "1starts_with_digit", "", "a-b", "x" * 129, "semi;colon", None, 5])
def test_stream_name_must_be_an_identifier(name: object) -> None:
    with pytest.raises(ConfigError) as info:
        build_query(name, "GOOGLE_STANDARD_SQL", None, START, END, 1000)  # type: ignore[arg-type]
    assert info.value.field == "stream"
    assert "identifier" in str(info.value)


@pytest.mark.parametrize("name", ["s", "_S1", "SingersNameStream", "x" * 128])
def test_identifiers_are_accepted(name: str) -> None:
    assert validate_stream_name(name) == name


@pytest.mark.parametrize("heartbeat", [999, 300_001, 0, -1000, "10000", 1500.0, True])
def test_heartbeat_outside_range_is_refused(heartbeat: object) -> None:
    with pytest.raises(ConfigError, match=r"heartbeat_ms.*\[1000, 300000\]") as info:
        build_query("s", "GOOGLE_STANDARD_SQL", None, START, END, heartbeat)  # type: ignore[arg-type]
    assert info.value.field == "heartbeat_ms"


@pytest.mark.parametrize("heartbeat", [1000, 300_000, 10_000])
def test_heartbeat_bounds_are_inclusive(heartbeat: int) -> None:
    assert validate_heartbeat(heartbeat) == heartbeat


def test_end_before_start_is_a_usage_error_naming_both() -> None:
    with pytest.raises(UsageError, match="end_timestamp .* is before start_timestamp"):
        build_query("s", "GOOGLE_STANDARD_SQL", None, END, START, 1000)


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ConfigError, match="start_timestamp.*timezone-aware"):
        build_query("s", "GOOGLE_STANDARD_SQL", None, datetime(2022, 1, 1), None, 1000)
    with pytest.raises(ConfigError, match="end_timestamp"):
        build_query("s", "GOOGLE_STANDARD_SQL", None, START, datetime(2022, 1, 1), 1000)


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ConfigError, match="dialect.*GOOGLE_STANDARD_SQL, POSTGRESQL"):
        build_query("s", "MYSQL", None, START, END, 1000)


def test_token_must_be_text() -> None:
    with pytest.raises(ConfigError, match="partition_token"):
        build_query("s", "POSTGRESQL", 12, START, END, 1000)  # type: ignore[arg-type]
