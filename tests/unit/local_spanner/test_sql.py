"""The queries the local server recognises, in the shapes the reader and the client send."""

from __future__ import annotations

import pytest

from spanner_cdc.local_spanner import sql
from spanner_cdc.local_spanner.model import QueryError


def test_googlesql_read_function_with_named_arguments() -> None:
    plan = sql.parse(
        "SELECT ChangeRecord FROM READ_Singers (\n start_timestamp => @start, end_timestamp => @end,\n"
        " partition_token => @token, heartbeat_milliseconds => @hb )",
        postgres=False,
    )
    assert plan == sql.ChangeStreamQuery("Singers", {
        "start_timestamp": sql.Arg(param="start"), "end_timestamp": sql.Arg(param="end"),
        "partition_token": sql.Arg(param="token"), "heartbeat_milliseconds": sql.Arg(param="hb")})


def test_googlesql_read_function_with_positional_literals() -> None:
    plan = sql.parse('select changerecord from read_s("2022-05-01T09:00:00Z", NULL, NULL, 10000, NULL);', postgres=False)
    assert isinstance(plan, sql.ChangeStreamQuery) and plan.stream == "s"
    assert plan.args["start_timestamp"] == sql.Arg(literal="2022-05-01T09:00:00Z")
    assert plan.args["end_timestamp"] == sql.Arg(literal=None)
    assert plan.args["heartbeat_milliseconds"] == sql.Arg(literal=10000)
    assert plan.args["read_options"] == sql.Arg(literal=None)


@pytest.mark.parametrize(
    "text",
    [
        "SELECT * FROM spanner.read_json_MyStream($1, $2, $3, $4, null)",
        'SELECT * FROM "spanner"."read_json_mystream" ($1,$2,$3,$4,NULL)',
        "select * from SPANNER.READ_JSON_MYSTREAM($1::timestamptz, $2, $3, $4, null)",
    ],
)
def test_postgresql_read_json_function(text: str) -> None:
    plan = sql.parse(text, postgres=True)
    assert isinstance(plan, sql.ChangeStreamQuery)
    assert plan.stream == "mystream"  # unquoted PostgreSQL names fold to lower case
    assert plan.args["start_timestamp"] == sql.Arg(param="p1")
    assert plan.args["heartbeat_milliseconds"] == sql.Arg(param="p4")


def test_metadata_queries_of_both_dialects() -> None:
    googlesql = sql.parse("SELECT OPTION_NAME, OPTION_VALUE\nFROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS\n"
                          "WHERE CHANGE_STREAM_NAME = @name", postgres=False)
    assert googlesql == sql.TableQuery("CHANGE_STREAM_OPTIONS", True, ("OPTION_NAME", "OPTION_VALUE"), False,
                                       (("CHANGE_STREAM_NAME", sql.Arg(param="name")),))
    postgres = sql.parse("select change_stream_name from information_schema.change_streams where change_stream_name = $1", postgres=True)
    assert postgres == sql.TableQuery("change_streams", True, ("change_stream_name",), False,
                                      (("change_stream_name", sql.Arg(param="p1")),))


def test_simple_selects() -> None:
    assert sql.parse("SELECT 1", postgres=False) == sql.LiteralSelect((1,))
    assert sql.parse("SELECT * FROM Singers", postgres=False) == sql.TableQuery("Singers", False, None, False, ())
    assert sql.parse("SELECT COUNT(*) FROM t WHERE k = $1", postgres=True) == sql.TableQuery("t", False, None, True, (("k", sql.Arg(param="p1")),))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SELECT ChangeRecord FROM READ_S(start_timestamp => @s, colour => 'red')", "Unknown argument colour"),
        ("SELECT Foo FROM READ_S(@s, NULL, NULL, 1000)", "return one column"),
        ("SELECT ChangeRecord FROM READ_S(@a, @b, @c, @d, NULL, @f)", "Too many arguments"),
        ("UPDATE T SET V = 1 WHERE K = 2", "expecting SELECT"),
        ("SELECT * FROM other.thing", "Unsupported name other.thing"),
    ],
)
def test_unsupported_queries_say_why(text: str, fragment: str) -> None:
    with pytest.raises(QueryError) as error:
        sql.parse(text, postgres=False)
    assert error.value.code == "INVALID_ARGUMENT"
    assert fragment in str(error.value)
