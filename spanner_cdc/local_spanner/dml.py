"""INSERT / UPDATE / DELETE run inside a read-write transaction, as the same row writes mutations make."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from spanner_cdc.local_spanner.keysets import Key, sorted_keys
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.mutations import MutationSet
from spanner_cdc.local_spanner.schema import TableDef
from spanner_cdc.local_spanner.sql_eval import Scope, Typed, convert, evaluate, truth
from spanner_cdc.local_spanner.sql_statements import Dml
from spanner_cdc.local_spanner.transactions import ReadView
from spanner_cdc.local_spanner.values import public_type

Columns = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class DmlResult:
    row_count: int
    columns: Columns  # THEN RETURN / RETURNING columns (empty without)
    rows: list[list[Any]]


def run_dml(statement: Dml, view: ReadView, changes: MutationSet, params: Mapping[str, Typed]) -> DmlResult:
    """Apply one DML statement to the transaction's `changes`; on an error the statement changes nothing."""
    database = view.database
    table = database.schema.table(statement.table)
    if table is None:
        raise QueryError("INVALID_ARGUMENT", f"Table not found: {statement.table}")
    scope = Scope([(c.name, public_type(c.type)) for c in table.columns], database.postgres, params, table.name, statement.alias)
    saved = changes.savepoint()
    try:
        if statement.kind == "INSERT":
            affected = _insert(statement, table, scope, view, changes)
        else:
            affected = _update_or_delete(statement, table, scope, view, changes)
    except QueryError:
        changes.restore(saved)
        raise
    if statement.returning is None:
        return DmlResult(len(affected), [], [])
    null_row = {c.name: None for c in table.columns}
    columns: Columns = []
    for node in statement.returning:
        if isinstance(node, exp.Star):
            columns.extend(scope.columns)
        else:
            inner = node.this if isinstance(node, exp.Alias) else node
            name = node.alias if isinstance(node, exp.Alias) else scope.column(node)[0] if isinstance(node, exp.Column) else ""
            columns.append((name, evaluate(inner, null_row, scope)[0] or {"code": "INT64"}))
    rows = [_returned(statement.returning, row, scope) for row in affected]
    return DmlResult(len(affected), columns, rows)


def _returned(nodes: tuple[exp.Expression, ...], row: dict[str, Any], scope: Scope) -> list[Any]:
    out: list[Any] = []
    for node in nodes:
        if isinstance(node, exp.Star):
            out.extend(row.get(name) for name, _ in scope.columns)
        else:
            out.append(evaluate(node.this if isinstance(node, exp.Alias) else node, row, scope)[1])
    return out


def _insert(statement: Dml, table: TableDef, scope: Scope, view: ReadView, changes: MutationSet) -> list[dict[str, Any]]:
    tree = statement.tree
    names = [scope.column(exp.Column(this=identifier)) for identifier in tree.this.expressions]
    affected = []
    for values in tree.expression.expressions:
        items = values.expressions if isinstance(values, exp.Tuple) else [values]
        if len(items) != len(names):
            raise QueryError("INVALID_ARGUMENT", f"INSERT into {table.name} has {len(names)} columns but {len(items)} values")
        given = {name: convert(type_, evaluate(item, {}, scope), f"column {table.name}.{name}") for (name, type_), item in zip(names, items, strict=True)}
        key = tuple(given.get(name) for name in table.key_names)
        view.read_row(table.name, key)
        changes.write("insert", table, given)
        affected.append(_stored(changes, table, given))
    return affected


def _stored(changes: MutationSet, table: TableDef, given: Mapping[str, Any]) -> dict[str, Any]:
    key = tuple(changes.key_of(table, given))
    return dict(changes.current(table, key) or {})


def _pinned_key(where: exp.Expression | None, table: TableDef, scope: Scope) -> Key | None:
    """The primary key a WHERE clause fixes with `key_column = value AND ...`, if it fixes all of it."""
    if where is None:
        return None
    fixed: dict[str, Any] = {}
    for term in where.flatten() if isinstance(where, exp.And) else [where]:
        if isinstance(term, exp.EQ) and isinstance(term.this, exp.Column) and not term.expression.find(exp.Column):
            name, type_ = scope.column(term.this)
            if name in table.key_names:
                fixed[name] = convert(type_, evaluate(term.expression, {}, scope), f"column {table.name}.{name}")
    if set(fixed) != set(table.key_names):
        return None
    return tuple(fixed[name] for name in table.key_names)


def _update_or_delete(statement: Dml, table: TableDef, scope: Scope, view: ReadView, changes: MutationSet) -> list[dict[str, Any]]:
    tree = statement.tree
    where_node = tree.args.get("where")
    where = where_node.this if where_node is not None else None
    if where is None and not scope.postgres:
        raise QueryError("INVALID_ARGUMENT", f"{statement.kind} must have a WHERE clause (use WHERE true for every row)")
    pinned = _pinned_key(where, table, scope)
    if pinned is not None:
        view.read_row(table.name, pinned)
        current = changes.current(table, pinned)
        candidates = [current] if current is not None else []
    else:
        view.scan(table.name)
        rows = changes.rows(table)
        candidates = [rows[key] for key in sorted_keys(table, rows, scope.postgres)]
    matched = [row for row in candidates if where is None or truth(where, row, scope)]
    affected = []
    for row in matched:
        key_values = {name: row[name] for name in table.key_names}
        if statement.kind == "DELETE":
            changes.delete(table, tuple(key_values.values()))
            affected.append(row)
            continue
        given = dict(key_values)
        for assignment in tree.expressions:
            name, type_ = scope.column(assignment.this)
            if name in table.key_names:
                raise QueryError("INVALID_ARGUMENT", f"Cannot UPDATE value on non-writable column: {table.name}.{name} is a primary key column")
            given[name] = convert(type_, evaluate(assignment.expression, row, scope), f"column {table.name}.{name}")
        changes.write("update", table, given)
        affected.append(_stored(changes, table, given))
    return affected
