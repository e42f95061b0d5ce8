"""The queries the local server recognises, in the shapes the reader and the client send."""

from __future__ import annotations

import pytest

from spanner_cdc.local_spanner import sql, sql_statements
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
    assert isinstance(googlesql, sql_statements.Select)
    assert (googlesql.source, googlesql.info_schema) == ("CHANGE_STREAM_OPTIONS", True)
    postgres = sql.parse("select change_stream_name from information_schema.change_streams where change_stream_name = $1", postgres=True)
    assert isinstance(postgres, sql_statements.Select)
    assert (postgres.source, postgres.info_schema) == ("change_streams", True)


def test_selects_and_dml_go_to_the_sql_parser() -> None:
    literal = sql.parse("SELECT 1", postgres=False)
    assert isinstance(literal, sql_statements.Select) and literal.source is None
    table = sql.parse("SELECT * FROM Singers@{FORCE_INDEX=SingersByName} WHERE Name > @n ORDER BY Name LIMIT 2", postgres=False)
    assert isinstance(table, sql_statements.Select) and (table.source, table.index) == ("Singers", "SingersByName")
    update = sql.parse("UPDATE T SET V = 1 WHERE K = 2", postgres=False)
    assert isinstance(update, sql_statements.Dml) and (update.kind, update.table) == ("UPDATE", "T")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("SELECT ChangeRecord FROM READ_S(start_timestamp => @s, colour => 'red')", "Unknown argument colour"),
        ("SELECT Foo FROM READ_S(@s, NULL, NULL, 1000)", "return one column"),
        ("SELECT ChangeRecord FROM READ_S(@a, @b, @c, @d, NULL, @f)", "Too many arguments"),
        ("CREATE TABLE T (K INT64) PRIMARY KEY (K)", "expected SELECT, INSERT, UPDATE or DELETE"),
        ("SELECT * FROM other.thing", "Unsupported name other.thing"),
    ],
)
def test_unsupported_queries_say_why(text: str, fragment: str) -> None:
    with pytest.raises(QueryError) as error:
        sql.parse(text, postgres=False)
    assert error.value.code == "INVALID_ARGUMENT"
    assert fragment in str(error.value)
