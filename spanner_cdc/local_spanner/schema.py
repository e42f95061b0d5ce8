"""A database schema on the local server: tables and change streams, DDL applied to it, and DDL printed from it."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

from spanner_cdc.local_spanner import ddl, generated
from spanner_cdc.local_spanner.model import ColumnInfo, QueryError, StreamDef, TableInfo
from spanner_cdc.local_spanner.values import public_type
from spanner_cdc.names import IMMUTABLE_KEY_RANGE

DEFAULT_RETENTION_TEXT = "7d"  # Spanner's documented default retention_period
_SIMPLE = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_PG_SIMPLE = re.compile(r"^[a-z_][a-z_0-9]*$")


@dataclass(frozen=True)
class TableDef:
    name: str
    columns: tuple[ddl.ColumnDef, ...]
    key: tuple[tuple[str, bool], ...]  # (column, descending)
    parent: str | None = None  # INTERLEAVE IN PARENT: its key is a prefix of this table's key
    on_delete: str = ddl.NO_ACTION
    ttl: ddl.Ttl | None = None  # row deletion policy

    def column(self, name: str, postgres: bool) -> ddl.ColumnDef | None:
        found = self._by_name.get(name)
        if found is None and not postgres:
            found = self._by_lower_name.get(name.lower())
        return found

    # derived from the frozen fields once: every written value looks its column up (the commit path)
    @cached_property
    def _by_name(self) -> dict[str, ddl.ColumnDef]:
        return {column.name: column for column in self.columns}

    @cached_property
    def _by_lower_name(self) -> dict[str, ddl.ColumnDef]:
        out: dict[str, ddl.ColumnDef] = {}
        for column in self.columns:
            out.setdefault(column.name.lower(), column)
        return out

    @cached_property
    def has_generated(self) -> bool:
        return any(column.generated for column in self.columns)

    @cached_property
    def key_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.key)

    def info(self) -> TableInfo:
        keys = set(self.key_names)
        columns = tuple(
            ColumnInfo(c.name, public_type(c.type), c.name in keys, position) for position, c in enumerate(self.columns, 1)
        )
        return TableInfo(self.name, columns, self.key_names)


# what applying a statement means outside the schema: the database keeps rows and the engine in step
Effect = tuple[Any, ...]


class Schema:
    """Tables, change streams and indexes of one database; GoogleSQL names are case-insensitive."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        self.tables: dict[str, TableDef] = {}
        self.streams: dict[str, StreamDef] = {}
        self.indexes: dict[str, ddl.CreateIndex] = {}
        self.version_retention: timedelta | None = None  # None: Spanner's default (1 hour)

    def copy(self) -> Schema:
        other = Schema(self.postgres)
        other.tables = dict(self.tables)
        other.streams = dict(self.streams)
        other.indexes = dict(self.indexes)
        other.version_retention = self.version_retention
        return other

    def _find(self, names: dict[str, Any], name: str) -> str | None:
        if name in names:
            return name
        if not self.postgres:
            lowered = name.lower()
            for candidate in names:
                if candidate.lower() == lowered:
                    return candidate
        return None

    def table(self, name: str) -> TableDef | None:
        found = self._find(self.tables, name)
        return None if found is None else self.tables[found]

    def index(self, name: str) -> ddl.CreateIndex | None:
        found = self._find(self.indexes, name)
        return None if found is None else self.indexes[found]

    def stream(self, name: str) -> StreamDef | None:
        found = self._find(self.streams, name)
        return None if found is None else self.streams[found]

    def children(self, name: str) -> list[TableDef]:
        """Tables interleaved in `name`."""
        return [table for table in self.tables.values() if table.parent == name]

    def table_infos(self) -> dict[str, TableInfo]:
        return {name: table.info() for name, table in self.tables.items()}

    def apply(self, statement: ddl.Statement, commit_ts: datetime, row_count: Callable[[str], int]) -> Effect | None:
        """Apply one statement in place; raises QueryError (FAILED_PRECONDITION for schema conflicts)."""
        if isinstance(statement, ddl.CreateTable):
            return self._create_table(statement)
        if isinstance(statement, ddl.DropTable):
            return self._drop_table(statement)
        if isinstance(statement, ddl.AddColumn):
            return self._add_column(statement, row_count)
        if isinstance(statement, ddl.DropColumn):
            return self._drop_column(statement)
        if isinstance(statement, ddl.CreateIndex):
            return self._create_index(statement)
        if isinstance(statement, ddl.SetTtl):
            return self._set_ttl(statement)
        if isinstance(statement, ddl.AlterDatabase):
            self.version_retention = statement.version_retention
            return None
        if isinstance(statement, ddl.DropIndex):
            found = self._find(self.indexes, statement.name)
            if found is None:
                raise QueryError("NOT_FOUND", f"Index not found: {statement.name}")
            del self.indexes[found]
            return None
        if isinstance(statement, ddl.CreateChangeStream):
            return self._create_stream(statement, commit_ts)
        if isinstance(statement, ddl.AlterChangeStream):
            return self._alter_stream(statement)
        found = self._find(self.streams, statement.name)
        if found is None:
            raise QueryError("NOT_FOUND", f"Change stream not found: {statement.name}")
        del self.streams[found]
        return ("drop_stream", found)

    def _create_table(self, statement: ddl.CreateTable) -> Effect | None:
        if self._find(self.tables, statement.name) is not None:
            if statement.if_not_exists:
                return None
            raise QueryError("FAILED_PRECONDITION", f"Duplicate name in schema: {statement.name}.")
        if self._find(self.streams, statement.name) is not None or self._find(self.indexes, statement.name) is not None:
            raise QueryError("FAILED_PRECONDITION", f"Duplicate name in schema: {statement.name}.")
        seen: set[str] = set()
        for column in statement.columns:
            folded = column.name if self.postgres else column.name.lower()
            if folded in seen:
                raise QueryError("FAILED_PRECONDITION", f"Duplicate column name {statement.name}.{column.name}.")
            seen.add(folded)
        table = TableDef(statement.name, statement.columns, ())
        generated.check(statement.name, statement.columns, [name for name, _ in statement.key], self.postgres)
        key = []
        for name, descending in statement.key:
            key_column = table.column(name, self.postgres)
            if key_column is None:
                raise QueryError("FAILED_PRECONDITION", f"Table {statement.name} references nonexistent key column {name}.")
            if key_column.type["code"] in ("ARRAY", "JSON"):
                raise QueryError("FAILED_PRECONDITION", f"Key column {statement.name}.{name} has type {key_column.type['code']}, which cannot be a key.")
            key.append((key_column.name, descending))
        table = replace(table, key=tuple(key))
        if statement.ttl is not None:
            table = replace(table, ttl=self._checked_ttl(table, statement.ttl))
        if statement.parent is not None:
            table = self._interleave(table, statement.parent, statement.on_delete)
        self.tables[statement.name] = table
        return ("tables",)

    def _interleave(self, table: TableDef, parent_name: str, on_delete: str) -> TableDef:
        """Spanner's rule: the parent exists and its primary key columns (names and types) start the child's key."""
        parent = self.table(parent_name)
        if parent is None:
            raise QueryError("NOT_FOUND", f"Table {table.name} is interleaved in a table that does not exist: {parent_name}")
        for position, (name, _) in enumerate(parent.key):
            if position >= len(table.key) or not self._same_name(table.key[position][0], name):
                raise QueryError("FAILED_PRECONDITION", f"Table {table.name} does not reference parent key column {parent.name}.{name}: "
                                                        f"an interleaved table's primary key starts with its parent's ({', '.join(parent.key_names)})")
            child_column, parent_column = table.column(table.key[position][0], self.postgres), parent.column(name, self.postgres)
            assert child_column is not None and parent_column is not None
            if public_type(child_column.type) != public_type(parent_column.type):
                raise QueryError("FAILED_PRECONDITION", f"Type of {table.name}.{child_column.name} does not match the type of its parent "
                                                        f"key column {parent.name}.{parent_column.name}")
        return replace(table, parent=parent.name, on_delete=on_delete)

    def _checked_ttl(self, table: TableDef, ttl: ddl.Ttl) -> ddl.Ttl:
        column = table.column(ttl.column, self.postgres)
        if column is None:
            raise QueryError("NOT_FOUND", f"Row deletion policy of table {table.name} names a column that does not exist: {ttl.column}")
        if column.type["code"] != "TIMESTAMP":
            raise QueryError("FAILED_PRECONDITION", f"Row deletion policy of table {table.name}: column {column.name} must be a TIMESTAMP "
                                                    f"(it is {column.sql_type})")
        return replace(ttl, column=column.name)

    def _set_ttl(self, statement: ddl.SetTtl) -> Effect | None:
        table = self.table(statement.table)
        if table is None:
            raise QueryError("NOT_FOUND", f"Table not found: {statement.table}")
        if statement.action == "add" and table.ttl is not None:
            raise QueryError("FAILED_PRECONDITION", f"Table {table.name} already has a row deletion policy; replace it instead.")
        if statement.action != "add" and table.ttl is None:
            raise QueryError("FAILED_PRECONDITION", f"Table {table.name} has no row deletion policy.")
        ttl = None if statement.ttl is None else self._checked_ttl(table, statement.ttl)
        self.tables[table.name] = replace(table, ttl=ttl)
        return None

    def _same_name(self, a: str, b: str) -> bool:
        return a == b if self.postgres else a.lower() == b.lower()

    def _create_index(self, statement: ddl.CreateIndex) -> Effect | None:
        if self._find(self.indexes, statement.name) is not None or self._find(self.tables, statement.name) is not None:
            raise QueryError("FAILED_PRECONDITION", f"Duplicate name in schema: {statement.name}.")
        table = self.table(statement.table)
        if table is None:
            raise QueryError("NOT_FOUND", f"Table not found: {statement.table}")
        key, storing = [], []
        for name, descending in statement.key:
            column = table.column(name, self.postgres)
            if column is None:
                raise QueryError("NOT_FOUND", f"Index {statement.name} references nonexistent column {name} of table {table.name}.")
            key.append((column.name, descending))
        for name in statement.storing:
            column = table.column(name, self.postgres)
            if column is None:
                raise QueryError("NOT_FOUND", f"Index {statement.name} stores nonexistent column {name} of table {table.name}.")
            storing.append(column.name)
        self.indexes[statement.name] = replace(statement, table=table.name, key=tuple(key), storing=tuple(storing))
        return None

    def _drop_table(self, statement: ddl.DropTable) -> Effect | None:
        found = self._find(self.tables, statement.name)
        if found is None:
            if statement.if_exists:
                return None
            raise QueryError("NOT_FOUND", f"Table not found: {statement.name}")
        for stream in self.streams.values():
            if stream.tables is not None and found in stream.tables:
                raise QueryError("FAILED_PRECONDITION", f"Cannot drop table {found}: it is tracked by change stream {stream.name}; alter the change stream first.")
        for child in self.children(found):
            raise QueryError("FAILED_PRECONDITION", f"Cannot drop table {found}: table {child.name} is interleaved in it; drop that table first.")
        for index in self.indexes.values():
            if index.table == found:
                raise QueryError("FAILED_PRECONDITION", f"Cannot drop table {found}: index {index.name} uses it; drop the index first.")
        del self.tables[found]
        return ("drop_table", found)

    def _add_column(self, statement: ddl.AddColumn, row_count: Callable[[str], int]) -> Effect | None:
        table = self.table(statement.table)
        if table is None:
            raise QueryError("NOT_FOUND", f"Table not found: {statement.table}")
        if table.column(statement.column.name, self.postgres) is not None:
            if statement.if_not_exists:
                return None
            raise QueryError("FAILED_PRECONDITION", f"Duplicate column name {table.name}.{statement.column.name}.")
        if statement.column.not_null and row_count(table.name):
            raise QueryError("FAILED_PRECONDITION", f"Cannot add NOT NULL column {table.name}.{statement.column.name} to a table that has rows.")
        if statement.column.generated:
            if row_count(table.name):
                raise QueryError("UNIMPLEMENTED", f"Adding generated column {table.name}.{statement.column.name} to a table that has rows "
                                                  "is not supported by the local Spanner server (it would backfill them)")
            generated.check(table.name, table.columns + (statement.column,), table.key_names, self.postgres)
        self.tables[table.name] = replace(table, columns=table.columns + (statement.column,))
        return ("add_column", table.name, statement.column.name)

    def _drop_column(self, statement: ddl.DropColumn) -> Effect | None:
        table = self.table(statement.table)
        if table is None:
            raise QueryError("NOT_FOUND", f"Table not found: {statement.table}")
        column = table.column(statement.column, self.postgres)
        if column is None:
            raise QueryError("NOT_FOUND", f"Column not found in table {table.name}: {statement.column}")
        if column.name in table.key_names:
            raise QueryError("FAILED_PRECONDITION", f"Cannot drop key column {table.name}.{column.name}.")
        if table.ttl is not None and table.ttl.column == column.name:
            raise QueryError("FAILED_PRECONDITION", f"Cannot drop column {table.name}.{column.name}: the table's row deletion policy uses it.")
        for other in table.columns:
            if other.generated and column.name in generated.references(table.name, table.columns, other, self.postgres):
                raise QueryError("FAILED_PRECONDITION", f"Cannot drop column {table.name}.{column.name}: generated column {other.name} references it.")
        for stream in self.streams.values():
            tracked = None if stream.tables is None else stream.tables.get(table.name, ())
            if tracked and column.name in tracked:
                raise QueryError("FAILED_PRECONDITION", f"Cannot drop column {table.name}.{column.name}: it is tracked by change stream {stream.name}.")
        for index in self.indexes.values():
            if index.table == table.name and column.name in {name for name, _ in index.key} | set(index.storing):
                raise QueryError("FAILED_PRECONDITION", f"Cannot drop column {table.name}.{column.name}: index {index.name} uses it.")
        self.tables[table.name] = replace(table, columns=tuple(c for c in table.columns if c.name != column.name))
        return ("drop_column", table.name, column.name)

    def _resolve_tables(self, tables: ddl.StreamTables) -> dict[str, tuple[str, ...] | None] | None:
        if tables is None:
            return None
        resolved: dict[str, tuple[str, ...] | None] = {}
        for name, columns in tables.items():
            table = self.table(name)
            if table is None:
                raise QueryError("NOT_FOUND", f"Table not found: {name}")
            if columns is None:
                resolved[table.name] = None
                continue
            names = []
            for column_name in columns:
                column = table.column(column_name, self.postgres)
                if column is None:
                    raise QueryError("NOT_FOUND", f"Column not found in table {table.name}: {column_name}")
                if column.name in table.key_names:
                    raise QueryError("FAILED_PRECONDITION", f"Change streams track key column {table.name}.{column.name} implicitly; do not list it.")
                names.append(column.name)
            resolved[table.name] = tuple(names)
        return resolved

    def _create_stream(self, statement: ddl.CreateChangeStream, commit_ts: datetime) -> Effect:
        if any(self._find(names, statement.name) is not None for names in (self.streams, self.tables, self.indexes)):
            raise QueryError("FAILED_PRECONDITION", f"Duplicate name in schema: {statement.name}.")
        tables = {} if statement.tracks_nothing else self._resolve_tables(statement.tables)
        stream = stream_def(statement.name, tables, statement.options, commit_ts)
        self.streams[stream.name] = stream
        return ("create_stream", stream)

    def _alter_stream(self, statement: ddl.AlterChangeStream) -> Effect:
        found = self._find(self.streams, statement.name)
        if found is None:
            raise QueryError("NOT_FOUND", f"Change stream not found: {statement.name}")
        current = self.streams[found]
        tables = current.tables
        if statement.set_tables:
            tables = self._resolve_tables(statement.tables)
        elif statement.drop_for_all:
            tables = {}
        options = dict(current.options)
        for name, value in statement.options.items():
            if value is None:
                options.pop(name, None)
            else:
                options[name] = value
        mode = (current.options.get("partition_mode", IMMUTABLE_KEY_RANGE), options.get("partition_mode", IMMUTABLE_KEY_RANGE))
        if mode[0] != mode[1]:
            raise QueryError("FAILED_PRECONDITION", f"Change stream {found}: partition_mode cannot be altered (it is {mode[0]})")
        stream = stream_def(found, tables, options, current.created_at)
        self.streams[found] = stream
        return ("alter_stream", stream)

    def ddl(self) -> list[str]:
        """The current schema as DDL statements, in creation order."""
        out = [self._table_ddl(table) for table in self.tables.values()]
        out.extend(index.text for index in self.indexes.values())
        out.extend(self._stream_ddl(stream) for stream in self.streams.values())
        return out

    def quote(self, name: str) -> str:
        if self.postgres:
            return name if _PG_SIMPLE.match(name) else '"' + name.replace('"', '""') + '"'
        return name if _SIMPLE.match(name) else f"`{name}`"

    def _table_ddl(self, table: TableDef) -> str:
        lines = []
        for column in table.columns:
            text = f"  {self.quote(column.name)} {column.sql_type}"
            if column.not_null:
                text += " NOT NULL"
            if column.generated:
                text += f" GENERATED ALWAYS AS ({column.generated}) STORED" if self.postgres else f" AS ({column.generated}) STORED"
            if column.options:
                text += " OPTIONS (" + ", ".join(f"{k} = {v}" for k, v in column.options.items()) + ")"
            lines.append(text + ",")
        key = ", ".join(self.quote(name) + (" DESC" if descending else "") for name, descending in table.key)
        interleave = "" if table.parent is None else f" INTERLEAVE IN PARENT {self.quote(table.parent)} ON DELETE {table.on_delete}"
        if self.postgres:
            lines.append(f"  PRIMARY KEY({key})")
            ttl = "" if table.ttl is None else f" TTL INTERVAL '{table.ttl.days} days' ON {self.quote(table.ttl.column)}"
            return f"CREATE TABLE {self.quote(table.name)} (\n" + "\n".join(lines) + "\n)" + interleave + ttl
        ttl = "" if table.ttl is None else f", ROW DELETION POLICY ({ttl_expression(table.ttl, self.quote)})"
        return f"CREATE TABLE {self.quote(table.name)} (\n" + "\n".join(lines) + f"\n) PRIMARY KEY({key})" + (
            "," + interleave if interleave else "") + ttl

    def _stream_ddl(self, stream: StreamDef) -> str:
        text = f"CREATE CHANGE STREAM {self.quote(stream.name)}"
        if stream.tables is None:
            text += " FOR ALL"
        elif stream.tables:
            parts = []
            for table, columns in stream.tables.items():
                parts.append(self.quote(table) + ("" if columns is None else "(" + ", ".join(self.quote(c) for c in columns) + ")"))
            text += " FOR " + ", ".join(parts)
        if stream.options:
            values = ", ".join(f"{k} = {v if v in ('true', 'false') else repr(v)}" for k, v in stream.options.items())
            text += f" WITH ({values})" if self.postgres else f" OPTIONS ({values})"
        return text


def ttl_expression(ttl: ddl.Ttl, quote: Callable[[str], str] = str) -> str:
    return f"OLDER_THAN({quote(ttl.column)}, INTERVAL {ttl.days} DAY)"


def stream_def(name: str, tables: Mapping[str, tuple[str, ...] | None] | None, options: dict[str, str], created_at: datetime | None) -> StreamDef:
    return StreamDef(
        name=name,
        tables=copy.deepcopy(tables),
        value_capture_type=options.get("value_capture_type", "OLD_AND_NEW_VALUES"),
        retention=ddl.parse_duration(options.get("retention_period", DEFAULT_RETENTION_TEXT)),
        created_at=created_at,
        options=dict(options),
    )
