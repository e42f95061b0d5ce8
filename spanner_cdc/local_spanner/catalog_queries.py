"""INFORMATION_SCHEMA views of the local server and the values of change stream query arguments."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from spanner_cdc.local_spanner.catalog import Database
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import Schema, ttl_expression
from spanner_cdc.local_spanner.sql import Arg, ChangeStreamQuery
from spanner_cdc.local_spanner.transactions import duration_text
from spanner_cdc.local_spanner.values import parse_timestamp

Columns = list[tuple[str, dict[str, Any]]]
_STRING, _BOOL, _INT64 = {"code": "STRING"}, {"code": "BOOL"}, {"code": "INT64"}
_FLAG = {"code": "FLAG"}  # BOOL in GoogleSQL, STRING ('YES' / 'NO') in PostgreSQL: resolved per database

# view -> columns (GoogleSQL spelling; PostgreSQL databases use the lower-case names)
VIEWS: dict[str, Columns] = {
    "CHANGE_STREAMS": [("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING), ("ALL", _FLAG)],
    "CHANGE_STREAM_OPTIONS": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("OPTION_NAME", _STRING), ("OPTION_TYPE", _STRING), ("OPTION_VALUE", _STRING),
    ],
    "CHANGE_STREAM_TABLES": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("ALL_COLUMNS", _FLAG),
    ],
    "CHANGE_STREAM_COLUMNS": [
        ("CHANGE_STREAM_CATALOG", _STRING), ("CHANGE_STREAM_SCHEMA", _STRING), ("CHANGE_STREAM_NAME", _STRING),
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("COLUMN_NAME", _STRING),
    ],
    "DATABASE_OPTIONS": [
        ("CATALOG_NAME", _STRING), ("SCHEMA_NAME", _STRING), ("OPTION_NAME", _STRING), ("OPTION_TYPE", _STRING), ("OPTION_VALUE", _STRING),
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


def view_columns(view: str, postgres: bool) -> Columns:
    """A view's columns as the database's dialect names and types them."""
    if postgres:
        return [(name.lower(), _STRING if type_ is _FLAG else type_) for name, type_ in VIEWS[view]]
    return [(name, _BOOL if type_ is _FLAG else type_) for name, type_ in VIEWS[view]]


_PG_NAMES = {"INT64": "bigint", "BOOL": "boolean", "FLOAT64": "double precision", "FLOAT32": "real", "TIMESTAMP": "timestamp with time zone",
              "DATE": "date", "BYTES": "bytea", "JSON": "jsonb", "NUMERIC": "numeric", "STRING": "character varying"}  # fmt: skip


def pg_type_name(type_: dict[str, Any]) -> str:
    """A PostgreSQL column's type as its SPANNER_TYPE shows it: the full name (character varying, not varchar)."""
    if type_["code"] == "ARRAY":
        return pg_type_name(type_["array_element_type"]) + "[]"
    length = type_.get("_max_length")
    return _PG_NAMES[type_["code"]] + (f"({length})" if length is not None else "")


def _flag(value: bool, postgres: bool) -> bool | str:
    """A yes/no column of the change stream views: BOOL in GoogleSQL, the text 'YES' / 'NO' in PostgreSQL."""
    return ("YES" if value else "NO") if postgres else value


def _text_type(postgres: bool) -> str:
    return "character varying" if postgres else "STRING"


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
            rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "ALL": _flag(stream.tables is None, database.postgres)})
    elif view == "CHANGE_STREAM_OPTIONS":  # the options the DDL set, as Spanner lists them (not the defaults)
        for stream in schema.streams.values():
            for name, value in stream.options.items():
                rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "OPTION_NAME": name,
                             "OPTION_TYPE": _text_type(database.postgres), "OPTION_VALUE": value})
    elif view in ("CHANGE_STREAM_TABLES", "CHANGE_STREAM_COLUMNS"):
        # a stream FOR ALL has no rows in either; a table watched whole has no rows in CHANGE_STREAM_COLUMNS
        for stream in schema.streams.values():
            for table_name, columns in (stream.tables or {}).items():
                if view == "CHANGE_STREAM_TABLES":
                    rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "TABLE_NAME": table_name,
                                 "ALL_COLUMNS": _flag(columns is None, database.postgres)})
                    continue
                for column_name in columns or ():
                    rows.append({**base, "CHANGE_STREAM_NAME": stream.name, "TABLE_NAME": table_name, "COLUMN_NAME": column_name})
    elif view == "DATABASE_OPTIONS":
        options = {"database_dialect": "POSTGRESQL" if database.postgres else "GOOGLE_STANDARD_SQL"}
        if schema.version_retention is not None:
            options["version_retention_period"] = duration_text(schema.version_retention)
        for name, value in options.items():
            rows.append({"CATALOG_NAME": "", "SCHEMA_NAME": schema_name, "OPTION_NAME": name,
                         "OPTION_TYPE": _text_type(database.postgres), "OPTION_VALUE": value})
    elif view == "TABLES":
        for table in schema.tables.values():
            rows.append({**base, "TABLE_NAME": table.name, "TABLE_TYPE": "BASE TABLE", "PARENT_TABLE_NAME": table.parent,
                         "ON_DELETE_ACTION": None if table.parent is None else table.on_delete, "SPANNER_STATE": "COMMITTED",
                         "ROW_DELETION_POLICY_EXPRESSION": None if table.ttl is None else ttl_expression(table.ttl)})
        for name in VIEWS:  # the information schema's own views are listed too: readers of user tables filter them out
            rows.append({**base, "TABLE_SCHEMA": "information_schema" if database.postgres else "INFORMATION_SCHEMA",
                         "TABLE_NAME": name.lower() if database.postgres else name, "TABLE_TYPE": "VIEW", "PARENT_TABLE_NAME": None,
                         "ON_DELETE_ACTION": None, "SPANNER_STATE": None, "ROW_DELETION_POLICY_EXPRESSION": None})
    elif view == "COLUMNS":
        for table in schema.tables.values():
            for position, column in enumerate(table.columns, 1):
                rows.append({**base, "TABLE_NAME": table.name, "COLUMN_NAME": column.name, "ORDINAL_POSITION": str(position),
                             "IS_NULLABLE": "NO" if column.not_null else "YES", "SPANNER_TYPE": pg_type_name(column.type) if database.postgres else column.sql_type,
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
