"""Which tables and columns a stream's snapshot reads, from the INFORMATION_SCHEMA views' rows as Spanner answers them."""

from __future__ import annotations

from typing import Any

import pytest

from spanner_cdc.errors import SourceError
from spanner_cdc.names import GOOGLE_STANDARD_SQL, POSTGRESQL
from spanner_cdc.source.snapshot_tables import flag, tables_from

SCHEMA = {GOOGLE_STANDARD_SQL: "", POSTGRESQL: "public"}
YES = {GOOGLE_STANDARD_SQL: True, POSTGRESQL: "YES"}
NO = {GOOGLE_STANDARD_SQL: False, POSTGRESQL: "NO"}


def views(dialect: str) -> dict[str, list[dict[str, Any]]]:
    """Tables t (k; a, b) and u (k; c), plus a system view, as the information schema lists them."""
    schema = SCHEMA[dialect]
    columns = [("t", "k", 1), ("t", "a", 2), ("t", "b", 3), ("u", "k", 1), ("u", "c", 2)]
    system = "information_schema" if dialect == POSTGRESQL else "INFORMATION_SCHEMA"
    return {
        "user_tables": [
            {"table_schema": schema, "table_name": "t", "table_type": "BASE TABLE"},
            {"table_schema": schema, "table_name": "u", "table_type": "BASE TABLE"},
            {"table_schema": system, "table_name": "tables", "table_type": "VIEW"},
            {"table_schema": "spanner_sys", "table_name": "SUPPORTED_OPTIMIZER_VERSIONS", "table_type": "VIEW"},
        ],
        "all": [{"table_schema": schema, "table_name": t, "column_name": c, "ordinal_position": p} for t, c, p in columns]
        + [{"table_schema": system, "table_name": "tables", "column_name": "table_name", "ordinal_position": 1}],
        "keys": [
            {"table_schema": schema, "table_name": t, "column_name": "k", "ordinal_position": 1, "index_type": "PRIMARY_KEY"}
            for t in ("t", "u")
        ],
    }


def read(dialect: str, all_: Any, tables: list[dict[str, Any]], chosen: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    v = views(dialect)
    found = tables_from(dialect, {"all": all_}, tables, chosen, v["user_tables"], v["all"], v["keys"])
    return [(t.name, t.keys, t.columns) for t in found]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_a_stream_for_all_reads_every_user_table_though_change_stream_tables_has_no_rows_for_it(dialect: str) -> None:
    assert read(dialect, YES[dialect], [], []) == [("t", ("k",), ("a", "b")), ("u", ("k",), ("c",))]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_a_column_limited_stream_reads_its_listed_columns_and_whole_tables_whole(dialect: str) -> None:
    schema = SCHEMA[dialect]
    tables = [
        {"table_schema": schema, "table_name": "t", "all_columns": NO[dialect]},
        {"table_schema": schema, "table_name": "u", "all_columns": YES[dialect]},
    ]
    chosen = [{"table_schema": schema, "table_name": "t", "column_name": "a"}]
    assert read(dialect, NO[dialect], tables, chosen) == [("t", ("k",), ("a",)), ("u", ("k",), ("c",))]


def test_postgresql_no_is_false_though_a_non_empty_string() -> None:
    # bool('NO') is True: the PostgreSQL dialect's 'NO' read as a truth value would copy columns the stream does not watch
    tables = [{"table_schema": "public", "table_name": "t", "all_columns": "NO"}]
    assert read(POSTGRESQL, "NO", tables, []) == [("t", ("k",), ())]


@pytest.mark.parametrize(
    ("dialect", "value"), [(GOOGLE_STANDARD_SQL, "NO"), (GOOGLE_STANDARD_SQL, None), (POSTGRESQL, True), (POSTGRESQL, "no"), (POSTGRESQL, None)]
)
def test_a_flag_in_the_other_dialects_shape_is_refused_not_guessed(dialect: str, value: Any) -> None:
    with pytest.raises(SourceError, match=r"INFORMATION_SCHEMA's X is .*expected"):
        flag(value, dialect, "X")


def test_a_stream_that_watches_nothing_has_no_tables() -> None:
    assert read(GOOGLE_STANDARD_SQL, False, [], []) == []


def test_a_table_in_a_named_schema_is_an_error_not_skipped() -> None:
    v = views(GOOGLE_STANDARD_SQL)
    v["user_tables"].append({"table_schema": "sales", "table_name": "orders", "table_type": "BASE TABLE"})
    with pytest.raises(SourceError, match=r"named schemas .*sales\.orders"):
        tables_from(GOOGLE_STANDARD_SQL, {"all": True}, [], [], v["user_tables"], v["all"], v["keys"])
