"""The local server's INFORMATION_SCHEMA views of change streams and database options, as Spanner documents them."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.integration

DDL = {
    "GOOGLE_STANDARD_SQL": [
        "CREATE TABLE T (K INT64 NOT NULL, A STRING(MAX), B INT64) PRIMARY KEY (K)",
        "CREATE TABLE U (K INT64 NOT NULL, C STRING(MAX)) PRIMARY KEY (K)",
        "CREATE CHANGE STREAM SAll FOR ALL",
        "CREATE CHANGE STREAM STab FOR T OPTIONS (retention_period = '36h')",
        "CREATE CHANGE STREAM SCol FOR T(A), U",
    ],
    "POSTGRESQL": [
        "CREATE TABLE t (k bigint NOT NULL PRIMARY KEY, a varchar, b bigint)",
        "CREATE TABLE u (k bigint NOT NULL PRIMARY KEY, c varchar)",
        "CREATE CHANGE STREAM sall FOR ALL",
        "CREATE CHANGE STREAM stab FOR t WITH (retention_period = '36h')",
        "CREATE CHANGE STREAM scol FOR t(a), u",
    ],
}  # fmt: skip


def query(database: Any, sql: str) -> tuple[list[str], list[list[Any]]]:
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(sql)
        rows = [list(r) for r in results]
        return [f.name for f in results.fields], sorted(rows, key=repr)


@pytest.fixture(scope="module", params=list(DDL))
def database(request: pytest.FixtureRequest, local_spanner: Any) -> tuple[str, Any]:
    from spanner_cdc.devstack.spanner_server import create_database
    from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

    dialect = request.param
    return dialect, create_database(local_spanner.host, PROJECT, INSTANCE, unique_database_id("is"), DDL[dialect], dialect)


def test_change_streams_all_is_a_bool_in_googlesql_and_yes_no_text_in_postgresql(database: tuple[str, Any]) -> None:
    dialect, db = database
    names, rows = query(db, "SELECT CHANGE_STREAM_NAME, * FROM INFORMATION_SCHEMA.CHANGE_STREAMS")
    flags = {row[0]: row[-1] for row in rows}
    if dialect == "POSTGRESQL":
        assert names[-1] == "all" and flags == {"sall": "YES", "stab": "NO", "scol": "NO"}
    else:
        assert names[-1] == "ALL" and flags == {"SAll": True, "STab": False, "SCol": False}


def test_change_stream_tables_has_no_rows_for_a_stream_for_all(database: tuple[str, Any]) -> None:
    dialect, db = database
    _, rows = query(db, "SELECT CHANGE_STREAM_NAME, TABLE_SCHEMA, TABLE_NAME, ALL_COLUMNS FROM INFORMATION_SCHEMA.CHANGE_STREAM_TABLES")
    if dialect == "POSTGRESQL":
        assert rows == [["scol", "public", "t", "NO"], ["scol", "public", "u", "YES"], ["stab", "public", "t", "YES"]]
    else:
        assert rows == [["SCol", "", "T", False], ["SCol", "", "U", True], ["STab", "", "T", True]]


def test_change_stream_columns_lists_only_the_columns_a_stream_names(database: tuple[str, Any]) -> None:
    dialect, db = database
    _, rows = query(db, "SELECT CHANGE_STREAM_NAME, TABLE_NAME, COLUMN_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAM_COLUMNS")
    assert rows == ([["scol", "t", "a"]] if dialect == "POSTGRESQL" else [["SCol", "T", "A"]])


def test_change_stream_options_lists_the_options_the_ddl_set(database: tuple[str, Any]) -> None:
    dialect, db = database
    _, rows = query(db, "SELECT CHANGE_STREAM_NAME, OPTION_NAME, OPTION_TYPE, OPTION_VALUE FROM INFORMATION_SCHEMA.CHANGE_STREAM_OPTIONS")
    text = "character varying" if dialect == "POSTGRESQL" else "STRING"
    assert rows == [["stab" if dialect == "POSTGRESQL" else "STab", "retention_period", text, "36h"]]


def test_database_options_names_the_dialect_in_a_query_valid_in_both(database: tuple[str, Any]) -> None:
    dialect, db = database
    sql = "SELECT OPTION_VALUE FROM INFORMATION_SCHEMA.DATABASE_OPTIONS WHERE OPTION_NAME = 'database_dialect'"
    assert query(db, sql)[1] == [[dialect]]
    names, rows = query(db, "SELECT * FROM INFORMATION_SCHEMA.DATABASE_OPTIONS")
    expected = ["CATALOG_NAME", "SCHEMA_NAME", "OPTION_NAME", "OPTION_TYPE", "OPTION_VALUE"]
    assert names == ([n.lower() for n in expected] if dialect == "POSTGRESQL" else expected)
    assert rows == [["", "public" if dialect == "POSTGRESQL" else "", "database_dialect",
                     "character varying" if dialect == "POSTGRESQL" else "STRING", dialect]]  # fmt: skip


def test_tables_lists_the_user_tables_and_the_information_schema_views(database: tuple[str, Any]) -> None:
    dialect, db = database
    _, rows = query(db, "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM INFORMATION_SCHEMA.TABLES")
    base = sorted([r[:2] for r in rows if r[2] == "BASE TABLE"])
    assert base == ([["public", "t"], ["public", "u"]] if dialect == "POSTGRESQL" else [["", "T"], ["", "U"]])
    views = {r[1] for r in rows if r[2] == "VIEW"}
    assert {r[0] for r in rows if r[2] == "VIEW"} == {"information_schema" if dialect == "POSTGRESQL" else "INFORMATION_SCHEMA"}
    assert ("change_stream_tables" if dialect == "POSTGRESQL" else "CHANGE_STREAM_TABLES") in views
