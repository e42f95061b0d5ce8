"""Results of SELECT statements and of Read RPCs (through the table or a secondary index) over a read view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlglot import exp

from spanner_cdc.local_spanner.catalog_queries import VIEWS, view_columns, view_rows
from spanner_cdc.local_spanner.keysets import Rows, matching_keys, sorted_keys
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import Schema, TableDef
from spanner_cdc.local_spanner.sql_eval import Scope, Typed, comparable, convert, evaluate, truth, unsupported
from spanner_cdc.local_spanner.sql_statements import Select
from spanner_cdc.local_spanner.transactions import ReadView
from spanner_cdc.local_spanner.values import public_type

Columns = list[tuple[str, dict[str, Any]]]
_INT64 = {"code": "INT64"}


def index_table(schema: Schema, table: TableDef, name: str) -> tuple[TableDef, bool]:
    """A secondary index as a table keyed by the index key (then the table's key); NOT_FOUND for an unknown index."""
    index = schema.index(name)
    if index is None:
        raise QueryError("NOT_FOUND", f"Index not found: {name}")
    if index.table != table.name:
        raise QueryError("INVALID_ARGUMENT", f"Index {index.name} is an index of table {index.table}, not of {table.name}")
    key = list(index.key) + [(name_, desc) for name_, desc in table.key if name_ not in {n for n, _ in index.key}]
    names = {n for n, _ in key} | set(index.storing)
    return replace(table, name=index.name, columns=tuple(c for c in table.columns if c.name in names), key=tuple(key)), index.null_filtered


def _index_rows(rows: Rows, index: TableDef, null_filtered: bool) -> Rows:
    out: Rows = {}
    for row in rows.values():
        key = tuple(row.get(name) for name in index.key_names)
        if null_filtered and any(value is None for value in key):
            continue
        out[key] = row
    return out


def _index_key_set(key_set: Any, index_columns: int) -> Any:
    """Keys of an index read name the index columns only, and match every row with those values: prefix ranges."""
    out = type(key_set)()
    out.CopyFrom(key_set)
    del out.keys[:]
    for key in key_set.keys:
        if len(key.values) <= index_columns:
            out.ranges.add(start_closed=key, end_closed=key)
        else:
            out.keys.add().CopyFrom(key)
    return out


def read_rows(view: ReadView, table_name: str, columns: list[str], key_set: Any, limit: int, index_name: str = "") -> tuple[Columns, list[list[Any]]]:
    """The Read RPC: `columns` of the rows a KeySet names (index keys when reading through an index), in key order."""
    database, schema = view.database, view.schema
    table = schema.table(table_name)
    if table is None:
        raise QueryError("NOT_FOUND", f"Table not found: {table_name}")
    source, null_filtered = index_table(schema, table, index_name) if index_name else (table, False)
    selected = []
    for name in columns:
        column = source.column(name, database.postgres)
        if column is None:
            if index_name and table.column(name, database.postgres) is not None:
                raise QueryError("INVALID_ARGUMENT", f"Column {name} is neither a key column nor stored in index {index_name}")
            raise QueryError("NOT_FOUND", f"Column not found in table {table.name}: {name}")
        selected.append(column)
    rows = view.rows(table.name)
    if index_name:
        rows = _index_rows(rows, source, null_filtered)
    if index_name:
        index = schema.index(index_name)
        assert index is not None
        key_set = _index_key_set(key_set, len(index.key))
    keys = matching_keys(source, database.postgres, rows, key_set)
    if key_set.all_ or key_set.ranges or index_name:
        view.scan(table.name)
    else:
        for key_pb_key in keys:
            view.read_row(table.name, key_pb_key)
    if limit > 0:
        keys = keys[:limit]
    return [(c.name, public_type(c.type)) for c in selected], [[rows[k].get(c.name) for c in selected] for k in keys]


def _source(statement: Select, view: ReadView) -> tuple[Columns, list[dict[str, Any]]]:
    database, schema = view.database, view.schema
    if statement.source is None:
        return [], [{}]
    if statement.info_schema:
        name = statement.source.upper()
        if name not in VIEWS:
            raise QueryError("INVALID_ARGUMENT", f"Unsupported view INFORMATION_SCHEMA.{statement.source}: expected one of {', '.join(VIEWS)}")
        available = view_columns(name, database.postgres)
        return available, [{(k.lower() if database.postgres else k): v for k, v in row.items()} for row in view_rows(database, name, schema)]
    table = schema.table(statement.source)
    if table is None:
        raise QueryError("INVALID_ARGUMENT", f"Table not found: {statement.source}")
    rows = view.rows(table.name)
    view.scan(table.name)
    if statement.index:
        index, null_filtered = index_table(schema, table, statement.index)
        rows = _index_rows(rows, index, null_filtered)
        order = sorted_keys(index, rows, database.postgres)
    else:
        order = sorted_keys(table, rows, database.postgres)
    return [(c.name, public_type(c.type)) for c in table.columns], [rows[k] for k in order]


def _output_name(node: exp.Expression, scope: Scope, postgres: bool) -> str:
    if isinstance(node, exp.Alias):
        return node.alias
    if isinstance(node, exp.Column):
        return scope.column(node)[0]
    return "?column?" if postgres else ""


def _projections(statement: Select, available: Columns, scope: Scope, postgres: bool) -> list[tuple[str, exp.Expression | None]]:
    out: list[tuple[str, exp.Expression | None]] = []
    for node in statement.tree.expressions:
        if isinstance(node, exp.Star):
            out.extend((name, None) for name, _ in available)
        else:
            out.append((_output_name(node, scope, postgres), node.this if isinstance(node, exp.Alias) else node))
    return out


def _count_only(projections: list[tuple[str, exp.Expression | None]]) -> bool:
    aggregates = [e for _, e in projections if e is not None and e.find(exp.AggFunc) is not None]
    if not aggregates:
        return False
    for node in aggregates:
        if not (isinstance(node, exp.Count) and isinstance(node.this, exp.Star)):
            raise unsupported(f"The aggregate {node.sql()!r} (only COUNT(*) is)")
    if len(aggregates) != len(projections):
        raise unsupported("Mixing COUNT(*) with other columns (GROUP BY)")
    return True


def _integer(node: exp.Expression | None, scope: Scope, what: str) -> int | None:
    if node is None:
        return None
    value = convert(_INT64, evaluate(node.expression if isinstance(node, (exp.Limit, exp.Offset)) else node, {}, scope), what)
    if value is None or int(value) < 0:
        raise QueryError("INVALID_ARGUMENT", f"{what} expects a non-negative integer, got {value}")
    return int(value)


def _sorted(records: list[dict[str, Any]], order: exp.Order, scope: Scope, aliases: Mapping[str, exp.Expression | None]) -> list[dict[str, Any]]:
    for term in reversed(order.expressions):
        node = term.this
        if isinstance(node, exp.Column) and not node.table and node.name in aliases and aliases[node.name] is not None:
            node = aliases[node.name]
        descending, nulls_first = bool(term.args.get("desc")), bool(term.args.get("nulls_first"))
        null_rank = (2 if nulls_first else 0) if descending else (0 if nulls_first else 2)

        def key(record: dict[str, Any], node: exp.Expression = node, null_rank: int = null_rank) -> tuple[int, Any]:
            value = comparable(*evaluate(node, record, scope))
            return (null_rank, 0) if value is None else (1, value)

        records = sorted(records, key=key, reverse=descending)
    return records


def run_select(statement: Select, view: ReadView, params: Mapping[str, Typed], now: datetime | None = None) -> tuple[Columns, list[list[Any]]]:
    """Rows of a one-table SELECT: WHERE, COUNT(*), ORDER BY, LIMIT / OFFSET, projections of expressions; `now` is
    CURRENT_TIMESTAMP (default: the view's timestamp)."""
    postgres = view.database.postgres
    available, records = _source(statement, view)
    scope = Scope(available, postgres, params, statement.source or "", statement.alias, now or view.timestamp)
    where = statement.tree.args.get("where")
    if where is not None:
        records = [r for r in records if truth(where.this, r, scope)]
    projections = _projections(statement, available, scope, postgres)
    if _count_only(projections):
        return [(name, _INT64) for name, _ in projections], [[str(len(records)) for _ in projections]]
    order = statement.tree.args.get("order")
    if order is not None:
        records = _sorted(records, order, scope, dict(projections))
    offset = _integer(statement.tree.args.get("offset"), scope, "OFFSET") or 0
    limit = _integer(statement.tree.args.get("limit"), scope, "LIMIT")
    records = records[offset:] if limit is None else records[offset : offset + limit]
    types = dict(available)
    null_row = dict.fromkeys(types)
    columns: Columns = []
    for name, node in projections:
        type_ = types[name] if node is None else evaluate(node, null_row, scope)[0]
        columns.append((name, type_ or _INT64))
    rows = [[r.get(name) if node is None else evaluate(node, r, scope)[1] for name, node in projections] for r in records]
    return columns, rows
