"""What a stream's snapshot reads: its watched tables and columns (INFORMATION_SCHEMA), their SELECT, rows as mods' JSON."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc

from spanner_cdc.errors import NotFound, SourceError
from spanner_cdc.names import POSTGRESQL
from spanner_cdc.source.client import ADMIN_TIMEOUT_S, source_error

# every view read whole (SELECT *) and by column name: the PostgreSQL dialect spells names in lower case, and a
# stream's `ALL` is a reserved word in both dialects
_VIEWS = {
    "streams": "INFORMATION_SCHEMA.CHANGE_STREAMS WHERE CHANGE_STREAM_NAME = {p}",
    "tables": "INFORMATION_SCHEMA.CHANGE_STREAM_TABLES WHERE CHANGE_STREAM_NAME = {p}",
    "columns": "INFORMATION_SCHEMA.CHANGE_STREAM_COLUMNS WHERE CHANGE_STREAM_NAME = {p}",
    "user_tables": "INFORMATION_SCHEMA.TABLES",
    "all": "INFORMATION_SCHEMA.COLUMNS",
    "keys": "INFORMATION_SCHEMA.INDEX_COLUMNS",
}
_DEFAULT_SCHEMAS = ("", "public")  # GoogleSQL's unnamed schema, PostgreSQL's public one
_SYSTEM_SCHEMAS = ("information_schema", "spanner_sys", "pg_catalog")
_PG_FLAGS = {"YES": True, "NO": False}

Row = dict[str, Any]


class NothingToSnapshot(SourceError):
    """The stream watches no table the snapshot could read."""


@dataclass(frozen=True)
class WatchedTable:
    """One table of a stream: its key columns (key order) and watched non-key columns (table order), with positions."""

    name: str
    keys: tuple[str, ...]
    columns: tuple[str, ...]
    ordinals: tuple[tuple[str, int], ...]

    def select(self, dialect: str) -> str:
        """The root-partitionable query of the table's watched columns: keys first, then the others."""
        quote = (lambda n: '"' + n.replace('"', '""') + '"') if dialect == POSTGRESQL else (lambda n: f"`{n}`")
        names = ", ".join(quote(n) for n in (*self.keys, *self.columns))
        return f"SELECT {names} FROM {quote(self.name)}"


def _sql(view: str, dialect: str) -> str:
    text = "SELECT * FROM " + _VIEWS[view].format(p="$1" if dialect == POSTGRESQL else "@name")
    return text.lower() if dialect == POSTGRESQL else text


def _rows(snapshot: Any, sql: str, stream: str | None, dialect: str) -> list[Row]:
    """The query's rows as {lower-case column name: value}."""
    from google.cloud.spanner_v1 import param_types

    if stream is None:
        results = snapshot.execute_sql(sql, timeout=ADMIN_TIMEOUT_S)
    else:
        key = "p1" if dialect == POSTGRESQL else "name"
        params, types = {key: stream}, {key: param_types.STRING}
        results = snapshot.execute_sql(sql, params=params, param_types=types, timeout=ADMIN_TIMEOUT_S)
    rows = [list(r) for r in results]
    names = [field.name.lower() for field in (results.fields or ())]
    return [dict(zip(names, row, strict=True)) for row in rows]


def flag(value: Any, dialect: str, column: str) -> bool:
    """A yes/no column of the change stream views: BOOL in GoogleSQL, the text 'YES' / 'NO' in PostgreSQL."""
    if dialect == POSTGRESQL and isinstance(value, str) and value in _PG_FLAGS:
        return _PG_FLAGS[value]
    if dialect != POSTGRESQL and isinstance(value, bool):
        return value
    accepted = "'YES' or 'NO'" if dialect == POSTGRESQL else "a BOOL"
    raise SourceError(f"INFORMATION_SCHEMA's {column} is {value!r}: expected {accepted} in the {dialect} dialect")


def watched_tables(database: Any, stream: str, dialect: str, at: datetime | None = None) -> list[WatchedTable]:
    """The tables the stream watches, each with its key and watched columns, from one multi-use read at `at` (the
    schema then: a column dropped or a table added since does not change what a snapshot at `at` reads); None: now.
    A stream that watches no table is an error: a snapshot of nothing is not a snapshot."""
    try:
        with database.snapshot(multi_use=True, **({} if at is None else {"read_timestamp": at})) as snap:
            found = {
                view: _rows(snap, _sql(view, dialect), stream if "{p}" in text else None, dialect) for view, text in _VIEWS.items()
            }
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, f"reading the tables change stream {stream} watches", database) from None
    if not found["streams"]:
        raise NotFound(f"change stream {stream} does not exist in database {database.name}" + (f" at {at.isoformat()}" if at else ""))
    tables = tables_from(dialect, found["streams"][0], found["tables"], found["columns"], found["user_tables"], found["all"], found["keys"])
    if not tables:
        raise NothingToSnapshot(
            f"change stream {stream} watches no table of database {database.name}"
            + (f" at {at.isoformat()}" if at else "")
            + ": there is nothing to snapshot; add tables to the stream (ALTER CHANGE STREAM ... SET FOR ...) or create them first"
        )
    return tables


def tables_from(
    dialect: str, stream: Row, tables: Iterable[Row], chosen: Iterable[Row], user_tables: Iterable[Row], columns: Iterable[Row], keys: Iterable[Row]
) -> list[WatchedTable]:
    """The views' rows -> WatchedTable per watched table (sorted by name). A stream `FOR ALL` has no rows in
    CHANGE_STREAM_TABLES: it watches every table of the database (INFORMATION_SCHEMA.TABLES, base tables of the
    user's schemas) whole; otherwise CHANGE_STREAM_TABLES names the tables, and CHANGE_STREAM_COLUMNS the non-key
    columns of those it does not watch whole."""
    positions: dict[str, dict[str, int]] = {}
    for row in columns:
        if row["table_schema"] in _DEFAULT_SCHEMAS:
            positions.setdefault(row["table_name"], {})[row["column_name"]] = int(row["ordinal_position"])
    key_order: dict[str, list[tuple[int, str]]] = {}
    for row in keys:
        if row["table_schema"] in _DEFAULT_SCHEMAS and row["index_type"] == "PRIMARY_KEY":
            key_order.setdefault(row["table_name"], []).append((int(row["ordinal_position"]), row["column_name"]))
    listed: dict[str, set[str]] = {}
    for row in chosen:
        listed.setdefault(row["table_name"], set()).add(row["column_name"])
    watched: dict[tuple[str, str], bool] = {}  # (schema, table) -> all its columns
    if flag(stream["all"], dialect, "CHANGE_STREAMS.ALL"):
        for row in user_tables:
            if row["table_type"] == "BASE TABLE" and str(row["table_schema"]).lower() not in _SYSTEM_SCHEMAS:
                watched[(row["table_schema"], row["table_name"])] = True
    else:
        for row in tables:
            watched[(row["table_schema"], row["table_name"])] = flag(row["all_columns"], dialect, "CHANGE_STREAM_TABLES.ALL_COLUMNS")
    named = sorted(f"{schema}.{table}" for schema, table in watched if schema not in _DEFAULT_SCHEMAS)
    if named:  # their mods name them schema-qualified: not read here rather than read under the wrong name
        raise SourceError(f"tables in named schemas are not supported by the snapshot: {', '.join(named)}")
    out = []
    for (_, table), all_columns in sorted(watched.items(), key=lambda item: item[0][1]):
        table_positions = positions.get(table, {})
        key_names = tuple(name for _, name in sorted(key_order.get(table, [])))
        wanted = None if all_columns else listed.get(table, set())
        others = tuple(
            name for name, _ in sorted(table_positions.items(), key=lambda item: item[1])
            if name not in key_names and (wanted is None or name in wanted)
        )  # fmt: skip
        ordinals = tuple((name, table_positions.get(name, 0)) for name in (*key_names, *others))
        out.append(WatchedTable(table, key_names, others, ordinals))
    return out


def plain(value: Any) -> Any:
    """A result's protobuf Value as the change stream writes it in mods' JSON (INT64 as text, FLOAT64 a number, ...)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "null_value" or kind is None:
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        return value.number_value
    if kind == "list_value":
        return [plain(v) for v in value.list_value.values]
    return {k: plain(v) for k, v in value.struct_value.fields.items()}


def type_json(spanner_type: Any) -> dict[str, Any]:
    """A result column's Type as the change stream's column_types write it: {"code": "INT64"}, arrays nested."""
    from google.cloud.spanner_v1 import TypeAnnotationCode, TypeCode

    pb = getattr(spanner_type, "_pb", spanner_type)
    out: dict[str, Any] = {"code": TypeCode(pb.code).name}
    if pb.HasField("array_element_type"):
        out["array_element_type"] = type_json(pb.array_element_type)
    if pb.type_annotation:
        out["type_annotation"] = TypeAnnotationCode(pb.type_annotation).name
    return out
