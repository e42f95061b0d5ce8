"""INFORMATION_SCHEMA views of the local server and the values of change stream query arguments."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from spanner_cdc.local_spanner.catalog import Database
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import DEFAULT_RETENTION_TEXT, Schema, ttl_expression
from spanner_cdc.local_spanner.sql import Arg, ChangeStreamQuery
from spanner_cdc.local_spanner.values import parse_timestamp

Columns = list[tuple[str, dict[str, Any]]]
_STRING, _BOOL, _INT64 = {"code": "STRING"}, {"code": "BOOL"}, {"code": "INT64"}

# view -> columns (GoogleSQL spelling; PostgreSQL databases use the lower-case names)
VIEWS: dict[str, Columns] = {
    "CHANGE_STREAMS": [("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING), ("ALL", _BOOL)],
    "CHANGE_STREAM_OPTIONS": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("OPTION_NAME", _STRING), ("OPTION_TYPE", _STRING), ("OPTION_VALUE", _STRING),
    ],
    "CHANGE_STREAM_TABLES": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("ALL_COLUMNS", _BOOL),
    ],
    "CHANGE_STREAM_COLUMNS": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("COLUMN_NAME", _STRING),
    ],
    "TABLES": [
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("TABLE_TYPE", _STRING),
        ("PARENT_TABLE_NAME", _STRING), ("ON_DELETE_ACTION", _STRING), ("SPANNER_STATE", _STRING),
        ("ROW_DELETION_POLICY_EXPRESSION", _STRING),
    ],
    "COLUMNS": [
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("COLUMN_NAME", _STRING),
        ("ORDINAL_POSITION", _INT64), ("IS_NULLABLE", _STRING), ("SPANNER_TYPE", _STRING), ("IS_GENERATED", _STRING),
        ("GENERATION_EXPRESSION", _STRING), ("IS_STORED", _STRING),
    ],
    # only the primary keys' rows (INDEX_TYPE 'PRIMARY_KEY', INDEX_NAME 'PRIMARY_KEY'): what readers ask it for
    "INDEX_COLUMNS": [
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("INDEX_NAME", _STRING),
        ("INDEX_TYPE", _STRING), ("COLUMN_NAME", _STRING), ("ORDINAL_POSITION", _INT64), ("COLUMN_ORDERING", _STRING),
    ],
}


def argument(arg: Arg, params: Mapping[str, Any]) -> Any:
    if arg.param is None:
        return arg.literal
    if arg.param not in params:
        raise QueryError("INVALID_ARGUMENT", f"No value found for parameter {'$' + arg.param[1:] if arg.param[1:].isdigit() else '@' + arg.param}")
    return params[arg.param]


def view_rows(database: Database, view: str, schema: Schema | None = None) -> list[dict[str, Any]]:
    """An INFORMATION_SCHEMA view's rows for `schema` (the one in force at the read's timestamp; default: now)."""
    schema_name = "public" if database.postgres else ""
    base = {"CHANGE_STREAM_CATALOG": "", "CHANGE_STREAM_SCHEMA": schema_name, "TABLE_CATALOG": "", "TABLE_SCHEMA": schema_name}
    schema = schema or database.schema
    rows: list[dict[str, Any]] = []
    if view == "CHANGE_STREAMS":
        for stream in schema.streams.values():
            rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "ALL": stream.tables is None})
    elif view == "CHANGE_STREAM_OPTIONS":
        for stream in schema.streams.values():
            options = {"value_capture_type": "OLD_AND_NEW_VALUES", "retention_period": DEFAULT_RETENTION_TEXT, **stream.options}
            for name, value in options.items():
                rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "OPTION_NAME": name, "OPTION_TYPE": "STRING", "OPTION_VALUE": value})
    elif view in ("CHANGE_STREAM_TABLES", "CHANGE_STREAM_COLUMNS"):
        for stream in schema.streams.values():
            tables = {name: None for name in schema.tables} if stream.tables is None else stream.tables
            for table_name, columns in tables.items():
                if view == "CHANGE_STREAM_TABLES":
                    rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "TABLE_NAME": table_name, "ALL_COLUMNS": columns is None})
                    continue
                table = schema.tables[table_name]
                names = [c.name for c in table.columns if c.name not in table.key_names] if columns is None else list(columns)
                for column_name in names:
                    rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "TABLE_NAME": table_name, "COLUMN_NAME": column_name})
    elif view == "TABLES":
        for table in schema.tables.values():
            rows.append({**base, "TABLE_NAME": table.name, "TABLE_TYPE": "BASE TABLE", "PARENT_TABLE_NAME": table.parent,
                         "ON_DELETE_ACTION": None if table.parent is None else table.on_delete, "SPANNER_STATE": "COMMITTED",
                         "ROW_DELETION_POLICY_EXPRESSION": None if table.ttl is None else ttl_expression(table.ttl)})
    elif view == "COLUMNS":
        for table in schema.tables.values():
            for position, column in enumerate(table.columns, 1):
                rows.append({**base, "TABLE_NAME": table.name, "COLUMN_NAME": column.name, "ORDINAL_POSITION": str(position),
                             "IS_NULLABLE": "NO" if column.not_null else "YES", "SPANNER_TYPE": column.sql_type,
                             "IS_GENERATED": "ALWAYS" if column.generated else "NEVER", "GENERATION_EXPRESSION": column.generated or None,
                             "IS_STORED": "YES" if column.generated else None})
    elif view == "INDEX_COLUMNS":
        for table in schema.tables.values():
            for position, (name, descending) in enumerate(table.key, 1):
                rows.append({**base, "TABLE_NAME": table.name, "INDEX_NAME": "PRIMARY_KEY", "INDEX_TYPE": "PRIMARY_KEY",
                             "COLUMN_NAME": name, "ORDINAL_POSITION": str(position), "COLUMN_ORDERING": "DESC" if descending else "ASC"})
    return rows


def stream_arguments(plan: ChangeStreamQuery, params: dict[str, Any], function: str) -> tuple[datetime, datetime | None, str | None, int]:
    values = {name: argument(arg, params) for name, arg in plan.args.items()}
    for required in ("start_timestamp", "heartbeat_milliseconds"):
        if values.get(required) is None:
            raise QueryError("INVALID_ARGUMENT", f"{function}: {required} must not be NULL")
    if values.get("read_options") is not None:
        raise QueryError("INVALID_ARGUMENT", f"{function}: read_options must be NULL")

    def timestamp(name: str) -> datetime | None:
        value = values.get(name)
        if value is None:
            return None
        try:
            return parse_timestamp(str(value))
        except ValueError as exc:
            raise QueryError("INVALID_ARGUMENT", f"{function}: {name}: {exc}") from None

    start = timestamp("start_timestamp")
    assert start is not None
    try:
        heartbeat = int(values["heartbeat_milliseconds"])
    except (TypeError, ValueError):
        raise QueryError("INVALID_ARGUMENT", f"{function}: heartbeat_milliseconds must be an INT64, got {values['heartbeat_milliseconds']!r}") from None
    token = values.get("partition_token")
    return start, timestamp("end_timestamp"), None if token is None else str(token), heartbeat
