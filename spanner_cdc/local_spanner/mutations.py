"""Commit mutations applied to a database's rows: Spanner's insert/update/replace/delete rules and the row changes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spanner_cdc.local_spanner import ddl, generated
from spanner_cdc.local_spanner.ddl import CASCADE
from spanner_cdc.local_spanner.keysets import Key, Rows, matching_keys, sorted_keys
from spanner_cdc.local_spanner.model import QueryError, RowChange
from spanner_cdc.local_spanner.schema import Schema, TableDef
from spanner_cdc.local_spanner.values import COMMIT_TIMESTAMP_PLACEHOLDER, normalize, pb_to_python

PENDING_COMMIT_TIMESTAMP = "\x00pending commit timestamp"  # stands for the commit timestamp until it is chosen


@dataclass
class _Touched:
    table: TableDef
    key: Key
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    written: set[str] = field(default_factory=set)
    replaced: bool = False  # deleted and written again: every column counts as written


class MutationSet:
    """The net effect of one commit's mutations, computed against the committed rows without changing them."""

    def __init__(self, schema: Schema, data: Mapping[str, Rows], commit_timestamp: str = PENDING_COMMIT_TIMESTAMP) -> None:
        self.schema = schema
        self.data = data
        self.commit_timestamp = commit_timestamp
        self._touched: dict[tuple[str, Key], _Touched] = {}

    def set_commit_timestamp(self, commit_timestamp: str) -> None:
        """Known at commit only: DML run before it wrote a stand-in for PENDING_COMMIT_TIMESTAMP()."""
        if self.commit_timestamp == PENDING_COMMIT_TIMESTAMP:
            for touched in self._touched.values():
                if touched.after is not None and PENDING_COMMIT_TIMESTAMP in touched.after.values():
                    touched.after = {k: commit_timestamp if v == PENDING_COMMIT_TIMESTAMP else v for k, v in touched.after.items()}
        self.commit_timestamp = commit_timestamp

    def savepoint(self) -> dict[tuple[str, Key], _Touched]:
        return {slot: replace(t, written=set(t.written)) for slot, t in self._touched.items()}

    def restore(self, saved: dict[tuple[str, Key], _Touched]) -> None:
        """Undo a failed DML statement: Spanner applies a statement entirely or not at all."""
        self._touched = saved

    def key_of(self, table: TableDef, given: Mapping[str, Any]) -> Key:
        return tuple(self._value(table, name, given.get(name))[1] for name in table.key_names)

    def current(self, table: TableDef, key: Key) -> dict[str, Any] | None:
        """The row as this transaction sees it (its own writes included)."""
        return self._current(table, key)

    def rows(self, table: TableDef) -> Rows:
        """The table's rows as this transaction sees them."""
        rows = dict(self.data.get(table.name, {}))
        for (name, key), touched in self._touched.items():
            if name == table.name:
                if touched.after is None:
                    rows.pop(key, None)
                else:
                    rows[key] = touched.after
        return rows

    def _table(self, name: str) -> TableDef:
        table = self.schema.table(name)
        if table is None:
            raise QueryError("NOT_FOUND", f"Table not found: {name}")
        return table

    def _current(self, table: TableDef, key: Key) -> dict[str, Any] | None:
        touched = self._touched.get((table.name, key))
        if touched is not None:
            return touched.after
        return self.data.get(table.name, {}).get(key)

    def _touch(self, table: TableDef, key: Key) -> _Touched:
        slot = (table.name, key)
        touched = self._touched.get(slot)
        if touched is None:
            before = self.data.get(table.name, {}).get(key)
            touched = _Touched(table, key, before, before)
            self._touched[slot] = touched
        return touched

    def _value(self, table: TableDef, column_name: str, value: Any) -> tuple[str, Any]:
        column = table.column(column_name, self.schema.postgres)
        if column is None:
            raise QueryError("NOT_FOUND", f"Column not found in table {table.name}: {column_name}")
        where = f"column {table.name}.{column.name}"
        normalized = normalize(column.type, value, where)
        if normalized == COMMIT_TIMESTAMP_PLACEHOLDER:
            normalized = self.commit_timestamp
        if normalized is None and column.not_null:
            raise QueryError("FAILED_PRECONDITION", f"{table.name}.{column.name} must not be NULL in table {table.name}.")
        return column.name, normalized

    def apply(self, mutations: Iterable[Any]) -> None:
        """Apply google.spanner.v1.Mutation messages in order; raises QueryError on the first invalid one."""
        for mutation in mutations:
            operation = mutation.WhichOneof("operation")
            if operation == "delete":
                table = self._table(mutation.delete.table)
                for key in self._matching_keys(table, mutation.delete.key_set):
                    self.delete(table, key)
            elif operation in ("insert", "update", "insert_or_update", "replace"):
                write = getattr(mutation, operation)
                table = self._table(write.table)
                columns = list(write.columns)
                resolved = self._resolved(table, columns) if write.values else None
                for values in write.values:
                    items = values.values
                    if len(items) != len(columns):
                        raise QueryError("INVALID_ARGUMENT", f"Mutation for table {table.name} has {len(items)} values for {len(columns)} columns.")
                    if resolved is None:  # an unknown column: the general path raises the error a row of it gets
                        self.write(operation, table, dict(zip(columns, map(pb_to_python, items), strict=True)))
                    else:
                        self._write_values(operation, table, self._normalized(table, resolved, items))
            else:
                raise QueryError("UNIMPLEMENTED", f"Mutation type {operation} is not supported by the local Spanner server")

    def _resolved(self, table: TableDef, columns: list[str]) -> list[tuple[ddl.ColumnDef, str]] | None:
        """The column (and its name in errors) of each of a write mutation's columns, looked up once for all its rows;
        None if one is unknown or named twice (write() keeps the last value of a repeated name and never checks the other)."""
        if len(set(columns)) != len(columns):
            return None
        postgres = self.schema.postgres
        out = []
        for name in columns:
            column = table.column(name, postgres)
            if column is None:
                return None
            out.append((column, f"column {table.name}.{column.name}"))
        return out

    def _normalized(self, table: TableDef, resolved: list[tuple[ddl.ColumnDef, str]], items: Any) -> dict[str, Any]:
        """One row's values by column name, checked as _value() checks each (the same errors, in the same order)."""
        values: dict[str, Any] = {}
        for (column, where), item in zip(resolved, items, strict=True):
            normalized = normalize(column.type, pb_to_python(item), where)
            if normalized == COMMIT_TIMESTAMP_PLACEHOLDER:
                normalized = self.commit_timestamp
            if normalized is None and column.not_null:
                raise QueryError("FAILED_PRECONDITION", f"{table.name}.{column.name} must not be NULL in table {table.name}.")
            values[column.name] = normalized
        return values

    def write(self, operation: str, table: TableDef, given: Mapping[str, Any]) -> None:
        values: dict[str, Any] = {}
        for name, value in given.items():
            column_name, normalized = self._value(table, name, value)
            values[column_name] = normalized
        self._write_values(operation, table, values)

    def _write_values(self, operation: str, table: TableDef, values: dict[str, Any]) -> None:
        if table.has_generated:
            generated.refuse_direct_writes(table.name, {c.name: c for c in table.columns}, list(values))
        missing = [name for name in table.key_names if name not in values]
        if missing:
            raise QueryError("FAILED_PRECONDITION", f"Mutation for table {table.name} is missing key column(s): {', '.join(missing)}")
        key = tuple(values[name] for name in table.key_names)
        current = self._current(table, key)
        if operation == "insert" and current is not None:
            raise QueryError("ALREADY_EXISTS", f"Row {_show(key)} in table {table.name} already exists")
        if operation == "update" and current is None:
            raise QueryError("NOT_FOUND", f"Row {_show(key)} not found in table {table.name}")
        if current is None and table.parent is not None:
            self._check_parent(table, key)
        if operation == "replace" and current is not None:
            self._delete_children(table, key)  # a replace deletes the row and writes it again: ON DELETE applies
        touched = self._touch(table, key)
        if current is None or operation == "replace":
            row = {column.name: None for column in table.columns}
            row.update(values)
            nulls = [c.name for c in table.columns if c.not_null and not c.generated and row[c.name] is None]
            if nulls:
                raise QueryError("FAILED_PRECONDITION", f"{table.name}.{nulls[0]} must not be NULL in table {table.name}.")
            if current is None and touched.before is not None:
                touched.replaced = True
            if operation == "replace" and current is not None:
                touched.replaced = True
        else:
            row = dict(current)
            row.update(values)
        if table.has_generated:
            computed = generated.compute(table.name, table.columns, row, set(row) if current is None or operation == "replace" else set(values),
                                         self.schema.postgres)
            values = {**values, **dict.fromkeys(computed)}
        touched.after = row
        touched.written.update(name for name in values if name not in table.key_names)

    def delete(self, table: TableDef, key: Key) -> None:
        if self._current(table, key) is None:
            return
        self._delete_children(table, key)
        touched = self._touch(table, key)
        touched.after = None
        touched.written.clear()

    def _check_parent(self, table: TableDef, key: Key) -> None:
        parent = self._table(table.parent or "")
        parent_key = key[: len(parent.key)]
        if self._current(parent, parent_key) is None:
            raise QueryError("NOT_FOUND", f"Insert failed because key was not found in parent table: Parent Table: {parent.name} "
                                          f"Key: {_show(parent_key)} (row {_show(key)} of interleaved table {table.name})")

    def _delete_children(self, table: TableDef, key: Key) -> None:
        """Rows of tables interleaved in `table` under `key`: deleted in this transaction (ON DELETE CASCADE, each with its
        own DELETE change, descendants first) or, under ON DELETE NO ACTION, the delete is refused while one exists."""
        for child in self.schema.children(table.name):
            keys = self._child_keys(child, key)
            if not keys:
                continue
            if child.on_delete != CASCADE:
                raise QueryError("FAILED_PRECONDITION", f"Integrity constraint violation during DELETE/REPLACE. Found child row {_show(keys[0])} "
                                                        f"in table {child.name} (interleaved ON DELETE NO ACTION) of row {_show(key)} in table {table.name}.")
            for child_key in keys:
                self.delete(child, child_key)

    def _child_keys(self, child: TableDef, prefix: Key) -> list[Key]:
        # a scan of the child table: interleaved rows are not stored under their parent here
        size = len(prefix)
        keys = [k for k in self.data.get(child.name, {}) if k[:size] == prefix]
        keys += [k for (name, k) in self._touched if name == child.name and k[:size] == prefix and k not in self.data.get(child.name, {})]
        present: Rows = {k: {} for k in keys if self._current(child, k) is not None}
        return sorted_keys(child, present, self.schema.postgres)

    def _matching_keys(self, table: TableDef, key_set: Any) -> list[Key]:
        # keys alone need only membership: no copy of the whole table per delete (a commit's cost stays flat)
        rows = self.rows(table) if key_set.all_ or key_set.ranges else _Present(self, table)
        return matching_keys(table, self.schema.postgres, rows, key_set)

    def changes(self) -> list[RowChange]:
        """One row change per touched row (net effect, in first-touch order); untouched net no-ops dropped."""
        out: list[RowChange] = []
        for touched in self._touched.values():
            table = touched.table
            key_names = table.key_names
            keys = dict(zip(key_names, touched.key, strict=True))
            non_key = [c.name for c in table.columns if c.name not in key_names]
            before, after = touched.before, touched.after
            if before is None and after is None:
                continue
            old_row = None if before is None else {name: before.get(name) for name in non_key}
            new_row = None if after is None else {name: after.get(name) for name in non_key}
            if before is None:
                mod_type, written = "INSERT", tuple(non_key)
            elif after is None:
                mod_type, written = "DELETE", ()
            else:
                mod_type = "UPDATE"
                written = tuple(non_key) if touched.replaced else tuple(n for n in non_key if n in touched.written)
            out.append(RowChange(table.name, mod_type, keys, old_row, new_row, written))
        return out

    def writes(self) -> list[tuple[str, Key, dict[str, Any] | None]]:
        return [(t.table.name, t.key, t.after) for t in self._touched.values() if t.before is not None or t.after is not None]


class _Present(dict[Key, dict[str, Any]]):
    """`key in rows` as the mutation set sees the table (its own writes included); nothing else is answered."""

    def __init__(self, changes: MutationSet, table: TableDef) -> None:
        super().__init__()
        self._changes, self._table = changes, table

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and self._changes.current(self._table, key) is not None


def _show(key: Key) -> str:
    return "[" + ",".join("NULL" if v is None else str(v) for v in key) + "]"
