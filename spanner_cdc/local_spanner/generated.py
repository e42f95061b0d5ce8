"""Stored generated columns of the local server: generation expressions checked at DDL time and computed on write.

Spanner ("Create and manage generated columns", cloud.google.com/spanner/docs/generated-column/how-to): a STORED
generated column is computed when its row is inserted or when a column its expression references is updated, and the
value is stored with the row's other columns; it cannot be written directly nor be part of the primary key, and a
column it references cannot be dropped. Being stored like any other column, it is what a change stream watching the
column records: in an INSERT's new values, in an UPDATE's when a referenced column was written, in a DELETE's old
values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from spanner_cdc.local_spanner.ddl import ColumnDef
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.sql_eval import Scope, convert, evaluate


@lru_cache(maxsize=512)
def expression(text: str, postgres: bool) -> exp.Expression:
    try:
        tree = sqlglot.parse_one(text, read="postgres" if postgres else "bigquery")
    except SqlglotError as exc:
        raise QueryError("INVALID_ARGUMENT", f"Syntax error in generation expression {text!r}: {str(exc).splitlines()[0]}") from None
    assert isinstance(tree, exp.Expression)
    return tree


def _scope(table: str, columns: Sequence[ColumnDef], postgres: bool) -> Scope:
    return Scope([(c.name, c.type) for c in columns], postgres, {}, table, None)


def references(table: str, columns: Sequence[ColumnDef], column: ColumnDef, postgres: bool) -> frozenset[str]:
    """The columns `column`'s generation expression reads."""
    scope = _scope(table, columns, postgres)
    return frozenset(scope.column(node)[0] for node in expression(column.generated, postgres).find_all(exp.Column))


def check(table: str, columns: Sequence[ColumnDef], key: Sequence[str], postgres: bool) -> None:
    """At CREATE TABLE / ADD COLUMN: every generated column's expression names known columns and evaluates (on a
    row of NULLs) with what the server supports; raises QueryError otherwise."""
    for column in columns:
        if not column.generated:
            continue
        if column.name in key:
            raise QueryError("INVALID_ARGUMENT", f"Generated column {table}.{column.name} cannot be part of the primary key "
                                                 "on the local Spanner server")
        references(table, columns, column, postgres)
        evaluate(expression(column.generated, postgres), {}, _scope(table, columns, postgres))


def compute(table: str, columns: Sequence[ColumnDef], row: dict[str, Any], written: set[str], postgres: bool) -> set[str]:
    """Recompute, in `row`, the generated columns whose referenced columns are in `written` (all of them for a new
    row: pass every column name); returns the generated columns computed."""
    computed: set[str] = set()
    scope = _scope(table, columns, postgres)
    for column in columns:
        if not column.generated:
            continue
        if not (references(table, columns, column, postgres) & (written | computed)):
            continue
        typed = evaluate(expression(column.generated, postgres), row, scope)
        value = convert(column.type, typed, f"generated column {table}.{column.name}")
        if value is None and column.not_null:
            raise QueryError("FAILED_PRECONDITION", f"{table}.{column.name} must not be NULL in table {table}: its generation expression gave NULL.")
        row[column.name] = value
        computed.add(column.name)
    return computed


def refuse_direct_writes(table: str, columns: Mapping[str, ColumnDef], given: Sequence[str]) -> None:
    for name in given:
        column = columns.get(name)
        if column is not None and column.generated:
            raise QueryError("INVALID_ARGUMENT", f"Cannot write into generated column {table}.{name}.")
