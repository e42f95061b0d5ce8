"""What a stream's snapshot reads: its watched tables and columns (INFORMATION_SCHEMA), their SELECT, rows as mods' JSON."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.api_core import exceptions as gexc

from spanner_cdc.names import POSTGRESQL
from spanner_cdc.source.client import ADMIN_TIMEOUT_S, source_error

_VIEWS = {
    "tables": "SELECT TABLE_NAME, ALL_COLUMNS FROM INFORMATION_SCHEMA.CHANGE_STREAM_TABLES WHERE CHANGE_STREAM_NAME = {p}",
    "columns": "SELECT TABLE_NAME, COLUMN_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAM_COLUMNS WHERE CHANGE_STREAM_NAME = {p}",
    "all": "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION FROM INFORMATION_SCHEMA.COLUMNS",
    "keys": "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, ORDINAL_POSITION FROM INFORMATION_SCHEMA.INDEX_COLUMNS "
    "WHERE INDEX_TYPE = 'PRIMARY_KEY'",
}
_DEFAULT_SCHEMAS = ("", "public")  # GoogleSQL's unnamed schema, PostgreSQL's public one


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
    text = _VIEWS[view].format(p="$1" if dialect == POSTGRESQL else "@name")
    return text.lower().replace("'primary_key'", "'PRIMARY_KEY'") if dialect == POSTGRESQL else text


def _rows(snapshot: Any, sql: str, stream: str | None, dialect: str) -> list[list[Any]]:
    from google.cloud.spanner_v1 import param_types

    if stream is None:
        return [list(r) for r in snapshot.execute_sql(sql, timeout=ADMIN_TIMEOUT_S)]
    key = "p1" if dialect == POSTGRESQL else "name"
    params, types = {key: stream}, {key: param_types.STRING}
    return [list(r) for r in snapshot.execute_sql(sql, params=params, param_types=types, timeout=ADMIN_TIMEOUT_S)]


def watched_tables(database: Any, stream: str, dialect: str, at: datetime | None = None) -> list[WatchedTable]:
    """The tables the stream watches, each with its key and watched columns, from one multi-use read at `at` (the
    schema then: a column dropped or a table added since does not change what a snapshot at `at` reads); None: now."""
    try:
        with database.snapshot(multi_use=True, **({} if at is None else {"read_timestamp": at})) as snap:
            found = {
                view: _rows(snap, _sql(view, dialect), stream if "{p}" in text else None, dialect) for view, text in _VIEWS.items()
            }
    except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
        raise source_error(exc, f"reading the tables change stream {stream} watches", database) from None
    return tables_from(found["tables"], found["columns"], found["all"], found["keys"])


def tables_from(
    tables: Iterable[Sequence[Any]], chosen: Iterable[Sequence[Any]], columns: Iterable[Sequence[Any]], keys: Iterable[Sequence[Any]]
) -> list[WatchedTable]:
    """The views' rows -> WatchedTable per watched table (sorted by name)."""
    positions: dict[str, dict[str, int]] = {}
    for schema, table, column, position in columns:
        if schema in _DEFAULT_SCHEMAS:
            positions.setdefault(table, {})[column] = int(position)
    key_order: dict[str, list[tuple[int, str]]] = {}
    for schema, table, column, position in keys:
        if schema in _DEFAULT_SCHEMAS:
            key_order.setdefault(table, []).append((int(position), column))
    listed: dict[str, set[str]] = {}
    for table, column in chosen:
        listed.setdefault(table, set()).add(column)
    out = []
    for table, all_columns in sorted((str(t), bool(a)) for t, a in tables):
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

    as_pb = getattr(type(spanner_type), "pb", None)  # a proto-plus message's protobuf; a protobuf as it is
    pb = as_pb(spanner_type) if as_pb is not None else spanner_type
    out: dict[str, Any] = {"code": TypeCode(pb.code).name}
    if pb.HasField("array_element_type"):
        out["array_element_type"] = type_json(pb.array_element_type)
    if pb.type_annotation:
        out["type_annotation"] = TypeAnnotationCode(pb.type_annotation).name
    return out
