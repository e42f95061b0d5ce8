"""Results of the non-change-stream queries: SELECT literals, table rows and INFORMATION_SCHEMA views."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spanner_cdc.local_spanner.catalog import Database
from spanner_cdc.local_spanner.keysets import matching_keys, sorted_keys
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import DEFAULT_RETENTION_TEXT
from spanner_cdc.local_spanner.sql import Arg, LiteralSelect, TableQuery
from spanner_cdc.local_spanner.values import normalize, public_type

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
    ],
    "COLUMNS": [
        ("TABLE_CATALOG", _STRING), ("TABLE_SCHEMA", _STRING), ("TABLE_NAME", _STRING), ("COLUMN_NAME", _STRING),
        ("ORDINAL_POSITION", _INT64), ("IS_NULLABLE", _STRING), ("SPANNER_TYPE", _STRING),
    ],
}


def argument(arg: Arg, params: Mapping[str, Any]) -> Any:
    if arg.param is None:
        return arg.literal
    if arg.param not in params:
        raise QueryError("INVALID_ARGUMENT", f"No value found for parameter {'$' + arg.param[1:] if arg.param[1:].isdigit() else '@' + arg.param}")
    return params[arg.param]


def literal_select(plan: LiteralSelect) -> tuple[Columns, list[list[Any]]]:
    columns: Columns = []
    row: list[Any] = []
    for value in plan.values:
        if isinstance(value, bool):
            columns.append(("", _BOOL))
            row.append(value)
        elif isinstance(value, int) or value is None:
            columns.append(("", _INT64))
            row.append(None if value is None else str(value))
        elif isinstance(value, float):
            columns.append(("", {"code": "FLOAT64"}))
            row.append(value)
        else:
            columns.append(("", _STRING))
            row.append(value)
    return columns, [row]


def _view_rows(database: Database, view: str) -> list[dict[str, Any]]:
    schema_name = "public" if database.postgres else ""
    base = {"CHANGE_STREAM_CATALOG": "", "CHANGE_STREAM_SCHEMA": schema_name, "TABLE_CATALOG": "", "TABLE_SCHEMA": schema_name}
    schema = database.schema
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
            rows.append({**base, "TABLE_NAME": table.name, "TABLE_TYPE": "BASE TABLE", "PARENT_TABLE_NAME": None,
                         "ON_DELETE_ACTION": None, "SPANNER_STATE": "COMMITTED"})
    elif view == "COLUMNS":
        for table in schema.tables.values():
            for position, column in enumerate(table.columns, 1):
                rows.append({**base, "TABLE_NAME": table.name, "COLUMN_NAME": column.name, "ORDINAL_POSITION": str(position),
                             "IS_NULLABLE": "NO" if column.not_null else "YES", "SPANNER_TYPE": column.sql_type})
    return rows


def table_query(database: Database, plan: TableQuery, params: Mapping[str, Any]) -> tuple[Columns, list[list[Any]]]:
    """Rows of a table (in key order) or of an INFORMATION_SCHEMA view, filtered by equality and projected."""
    if plan.info_schema:
        view = plan.source.upper()
        if view not in VIEWS:
            raise QueryError("INVALID_ARGUMENT", f"Unsupported view INFORMATION_SCHEMA.{plan.source}: expected one of {', '.join(VIEWS)}")
        available = [(n.lower() if database.postgres else n, t) for n, t in VIEWS[view]]
        records = [{(k.lower() if database.postgres else k): v for k, v in row.items()} for row in _view_rows(database, view)]
    else:
        table = database.schema.table(plan.source)
        if table is None:
            raise QueryError("INVALID_ARGUMENT", f"Table not found: {plan.source}")
        available = [(c.name, public_type(c.type)) for c in table.columns]
        rows = database.data.get(table.name, {})
        records = [rows[key] for key in sorted_keys(table, rows, database.postgres)]
    lookup = {name.lower(): (name, type_) for name, type_ in available}

    def resolve(name: str) -> tuple[str, dict[str, Any]]:
        found = lookup.get(name.lower()) if not database.postgres or name.lower() == name else None
        if found is None:
            found = next(((n, t) for n, t in available if n == name), None)
        if found is None:
            raise QueryError("INVALID_ARGUMENT", f"Unrecognized name: {name}")
        return found

    for column_name, arg in plan.where:
        name, type_ = resolve(column_name)
        wanted = normalize(type_, argument(arg, params), f"parameter for {name}")
        records = [r for r in records if r.get(name) == wanted]
    if plan.count:
        return [("", _INT64)], [[str(len(records))]]
    selected = available if plan.columns is None else [resolve(c) for c in plan.columns]
    return selected, [[r.get(name) for name, _ in selected] for r in records]


def read_rows(database: Database, table_name: str, columns: list[str], key_set: Any, limit: int) -> tuple[Columns, list[list[Any]]]:
    """The Read RPC: `columns` of the rows a KeySet names, in key order, at most `limit` (0: all)."""
    table = database.schema.table(table_name)
    if table is None:
        raise QueryError("NOT_FOUND", f"Table not found: {table_name}")
    selected = []
    for name in columns:
        column = table.column(name, database.postgres)
        if column is None:
            raise QueryError("NOT_FOUND", f"Column not found in table {table.name}: {name}")
        selected.append(column)
    rows = database.data.get(table.name, {})
    keys = matching_keys(table, database.postgres, rows, key_set)
    if limit > 0:
        keys = keys[:limit]
    return [(c.name, public_type(c.type)) for c in selected], [[rows[k].get(c.name) for c in selected] for k in keys]
