"""Instances, databases, schemas and rows of the local server; every commit and DDL change goes through here."""

from __future__ import annotations

import itertools
import logging
import secrets
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from spanner_cdc.local_spanner import ddl, ttl
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.group_commit import CommitQueue
from spanner_cdc.local_spanner.keysets import Rows
from spanner_cdc.local_spanner.model import QueryError, RowChange, StreamDef, TableInfo
from spanner_cdc.local_spanner.mutations import MutationSet
from spanner_cdc.local_spanner.persistence import Journal
from spanner_cdc.local_spanner.schema import Effect, Schema
from spanner_cdc.local_spanner.values import format_timestamp, parse_timestamp
from spanner_cdc.local_spanner.versions import DEFAULT_VERSION_RETENTION, Versions

log = logging.getLogger(__name__)

GOOGLE_STANDARD_SQL, POSTGRESQL = 1, 2


class Engine(Protocol):
    """The part of the change stream engine the catalog drives (spanner_cdc.local_spanner.changestream)."""

    def create_stream(self, db: str, stream: StreamDef, tables: Mapping[str, TableInfo]) -> None: ...
    def alter_stream(self, db: str, stream: StreamDef, tables: Mapping[str, TableInfo]) -> None: ...
    def drop_stream(self, db: str, name: str) -> None: ...
    def update_tables(self, db: str, tables: Mapping[str, TableInfo]) -> None: ...
    def commit(
        self, db: str, commit_ts: datetime, transaction_id: str, tag: str, changes: Sequence[RowChange], *,
        system: bool = False, excluded: bool = False,
    ) -> None: ...


@dataclass
class Instance:
    name: str
    config: str = ""
    display_name: str = ""
    node_count: int = 1
    processing_units: int = 1000
    labels: dict[str, str] = field(default_factory=dict)
    create_time: datetime | None = None


@dataclass(frozen=True)
class DdlOperation:
    name: str
    database: str
    statements: tuple[str, ...]
    commit_timestamps: tuple[datetime, ...]


@dataclass
class Database:
    name: str
    dialect: int
    create_time: datetime
    schema: Schema
    data: dict[str, Rows] = field(default_factory=dict)  # the current rows: the newest of `versions`
    operations: list[DdlOperation] = field(default_factory=list)
    versions: Versions = field(default_factory=Versions)
    # the schema in force from each DDL statement's timestamp on, oldest first: reads at a timestamp use theirs
    schemas: list[tuple[datetime, Schema]] = field(default_factory=list)
    last_ddl: datetime | None = None

    def __post_init__(self) -> None:
        if not self.schemas:
            self.schemas.append((self.create_time, self.schema))

    def schema_at(self, timestamp: datetime | None) -> Schema:
        """The schema a read at `timestamp` uses (None: now)."""
        if timestamp is None or (self.last_ddl is not None and timestamp >= self.last_ddl):
            return self.schema
        index = bisect_right(self.schemas, timestamp, key=lambda entry: entry[0])
        return self.schemas[max(index - 1, 0)][1]

    @property
    def version_retention(self) -> timedelta:
        return self.schema.version_retention or DEFAULT_VERSION_RETENTION

    def earliest_version_time(self, now: datetime) -> datetime:
        """The oldest timestamp a read can use: older versions are gone after version_retention_period."""
        return max(self.create_time, now - self.version_retention)

    def rows_at(self, table: str, timestamp: datetime | None) -> Rows:
        """A table's rows at `timestamp`; None: the current rows."""
        if timestamp is None:
            return self.data.get(table, {})
        last = self.versions.last_commit(table)
        # the current rows answer unless a commit or a schema change (a dropped column) came after `timestamp`
        if (last is None or last <= timestamp) and (self.last_ddl is None or self.last_ddl <= timestamp):
            return self.data.get(table, {})
        return self.versions.rows_at(table, timestamp)

    @property
    def postgres(self) -> bool:
        return self.dialect == POSTGRESQL

    @property
    def instance(self) -> str:
        return self.name.split("/databases/")[0]


class Catalog:
    """All server state; one lock orders commits and DDL, so commit timestamp order is log order."""

    def __init__(self, journal: Journal | None = None) -> None:
        self.journal = journal
        self.lock = threading.RLock()
        self.instances: dict[str, Instance] = {}
        self.databases: dict[str, Database] = {}
        self.clock: ServerClock | None = None
        self.engine: Engine | None = None
        self.last_timestamp: datetime | None = None  # newest commit / DDL timestamp in the journal
        # server transaction ids: unique per process start by the random prefix, without a urandom call per commit
        self._transaction_prefix = secrets.token_hex(6)
        self._transactions = itertools.count()
        self._commit_queue = CommitQueue(self.lock)

    # -- start-up -------------------------------------------------------------------------------

    def replay(self) -> int:
        """Rebuild the state from the journal (no engine calls: the engine restores its own log)."""
        count = 0
        for entry in self.journal.entries() if self.journal else ():
            self._apply_entry(entry)
            count += 1
        return count

    def attach(self, clock: ServerClock, engine: Engine) -> None:
        self.clock = clock
        self.engine = engine
        for database in self.databases.values():  # replayed history older than the retention is gone
            database.versions.sweep(database.earliest_version_time(clock.now()))

    def _record(self, entry: dict[str, Any]) -> None:
        if self.journal is not None:
            self.journal.append(entry)

    def _apply_entry(self, entry: dict[str, Any]) -> None:
        op = entry["op"]
        if op == "create_instance":
            fields = {k: v for k, v in entry.items() if k != "op"}
            fields["create_time"] = parse_timestamp(fields["create_time"])
            self.instances[entry["name"]] = Instance(**fields)
        elif op == "delete_instance":
            self.instances.pop(entry["name"], None)
            for name in [n for n in self.databases if n.startswith(entry["name"] + "/")]:
                del self.databases[name]
        elif op == "create_database":
            dialect = entry["dialect"]
            self.databases[entry["name"]] = Database(entry["name"], dialect, parse_timestamp(entry["create_time"]), Schema(dialect == POSTGRESQL))
        elif op == "drop_database":
            self.databases.pop(entry["name"], None)
        elif op == "ddl":
            database = self.databases[entry["db"]]
            timestamps = [parse_timestamp(t) for t in entry["commit_timestamps"]]
            self._apply_ddl(database, entry["statements"], timestamps, entry["operation"], call_engine=False)
        elif op == "commit":
            database = self.databases[entry["db"]]
            commit_ts = parse_timestamp(entry["ts"])
            for table, key, row in entry["writes"]:
                self._write_row(database, commit_ts, table, tuple(key), row, None)
            self._saw(commit_ts)
        else:
            raise ValueError(f"unknown journal entry {op!r}")

    def _saw(self, timestamp: datetime) -> None:
        if self.last_timestamp is None or timestamp > self.last_timestamp:
            self.last_timestamp = timestamp

    # -- instances and databases ----------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock.now() if self.clock else datetime.now(UTC)

    def create_instance(self, instance: Instance) -> Instance:
        with self.lock:
            if instance.name in self.instances:
                raise QueryError("ALREADY_EXISTS", f"Instance already exists: {instance.name}")
            instance.create_time = self.now()
            entry = {"op": "create_instance", **instance.__dict__, "create_time": format_timestamp(instance.create_time)}
            self._record(entry)
            self.instances[instance.name] = instance
            return instance

    def instance(self, name: str) -> Instance:
        found = self.instances.get(name)
        if found is None:
            raise QueryError("NOT_FOUND", f"Instance not found: {name}")
        return found

    def delete_instance(self, name: str) -> None:
        with self.lock:
            self.instance(name)
            for database in [d for d in self.databases if d.startswith(name + "/")]:
                self.drop_database(database)
            self._record({"op": "delete_instance", "name": name})
            del self.instances[name]

    def database(self, name: str) -> Database:
        found = self.databases.get(name)
        if found is None:
            raise QueryError("NOT_FOUND", f"Database not found: {name}")
        return found

    def create_database(self, name: str, dialect: int, statements: Sequence[str]) -> tuple[Database, DdlOperation | None]:
        with self.lock:
            self.instance(name.split("/databases/")[0])
            if name in self.databases:
                raise QueryError("ALREADY_EXISTS", f"Database already exists: {name}")
            dialect = dialect or GOOGLE_STANDARD_SQL
            database = Database(name, dialect, self.now(), Schema(dialect == POSTGRESQL))
            # validate the extra statements before the database exists, so a bad schema creates nothing
            self._plan_ddl(database, statements, [self.now()] * len(statements))
            self._record({"op": "create_database", "name": name, "dialect": dialect, "create_time": format_timestamp(database.create_time)})
            self.databases[name] = database
            operation = self.update_ddl(name, statements) if statements else None
            return database, operation

    def drop_database(self, name: str) -> None:
        with self.lock:
            database = self.database(name)
            self._record({"op": "drop_database", "name": name})
            del self.databases[name]
            if self.engine is not None:
                for stream in database.schema.streams:
                    self.engine.drop_stream(name, stream)

    # -- DDL ------------------------------------------------------------------------------------

    def update_ddl(self, db: str, statements: Sequence[str], operation_id: str = "") -> DdlOperation:
        if not statements:
            raise QueryError("INVALID_ARGUMENT", "UpdateDatabaseDdl needs at least one statement")
        with self.lock:
            database = self.database(db)
            assert self.clock is not None
            operation_id = operation_id or "ddl_" + secrets.token_hex(8)
            name = f"{db}/operations/{operation_id}"
            if any(op.name == name for op in database.operations):
                raise QueryError("ALREADY_EXISTS", f"Operation already exists: {name}")
            timestamps = [self.clock.next_commit_timestamp() for _ in statements]
            try:
                self._plan_ddl(database, statements, timestamps)
            except QueryError:
                self._pass_time(db, timestamps)
                raise
            self._record({"op": "ddl", "db": db, "statements": list(statements), "operation": name,
                          "commit_timestamps": [format_timestamp(t) for t in timestamps]})
            return self._apply_ddl(database, statements, timestamps, name, call_engine=True)

    def _plan_ddl(
        self, database: Database, statements: Sequence[str], timestamps: Sequence[datetime]
    ) -> tuple[Schema, list[tuple[Effect | None, dict[str, TableInfo], Schema]]]:
        """The new schema and each statement's effect (with the tables and the schema after it); raises QueryError,
        changing nothing."""
        schema = database.schema.copy()
        planned = []
        for text, timestamp in zip(statements, timestamps, strict=True):
            effect = schema.apply(ddl.parse(text, database.postgres), timestamp, lambda t: len(database.data.get(t, {})))
            planned.append((effect, schema.table_infos(), schema.copy()))
        return schema, planned

    def _apply_ddl(self, database: Database, statements: Sequence[str], timestamps: Sequence[datetime], name: str, call_engine: bool) -> DdlOperation:
        schema, planned = self._plan_ddl(database, statements, timestamps)
        database.schema = schema
        for (_, _, version), timestamp in zip(planned, timestamps, strict=True):
            database.schemas.append((timestamp, version))
            database.last_ddl = timestamp
        if self.clock is not None:  # schemas no read can use any more: older than the version retention
            horizon = database.earliest_version_time(self.clock.now())
            while len(database.schemas) > 1 and database.schemas[1][0] <= horizon:
                del database.schemas[0]
        for (effect, tables, _), timestamp in zip(planned, timestamps, strict=True):
            self._saw(timestamp)
            if effect is None:
                if call_engine:
                    self._pass_time(database.name, [timestamp])
                continue
            kind = effect[0]
            if kind == "drop_table":
                database.data.pop(effect[1], None)
                database.versions.drop_table(effect[1], timestamp)
            elif kind == "add_column":  # new row objects, as for a drop: older versions stay as they were
                rows = database.data.get(effect[1], {})
                for key, row in rows.items():
                    rows[key] = {**row, effect[2]: None}
            elif kind == "drop_column":  # new row objects: the versions before the DROP keep the column's values
                rows = database.data.get(effect[1], {})
                for key, row in rows.items():
                    rows[key] = {name: value for name, value in row.items() if name != effect[2]}
            if call_engine and self.engine is not None:
                self._engine_effect(database.name, effect, tables)
                self._pass_time(database.name, [timestamp])
        operation = DdlOperation(name, database.name, tuple(statements), tuple(timestamps))
        database.operations.append(operation)
        return operation

    def _pass_time(self, db: str, timestamps: Sequence[datetime]) -> None:
        """Hand timestamps that carry no row changes to the engine: readers wait for every issued one."""
        if self.engine is not None:
            for timestamp in timestamps:
                self.engine.commit(db, timestamp, "", "", [])

    def _engine_effect(self, db: str, effect: Effect, tables: dict[str, TableInfo]) -> None:
        assert self.engine is not None
        kind = effect[0]
        if kind == "create_stream":
            self.engine.create_stream(db, effect[1], tables)
        elif kind == "alter_stream":
            self.engine.alter_stream(db, effect[1], tables)
        elif kind == "drop_stream":
            self.engine.drop_stream(db, effect[1])
        else:
            self.engine.update_tables(db, tables)

    # -- data -----------------------------------------------------------------------------------

    @staticmethod
    def _write_row(
        database: Database, commit_ts: datetime, table: str, key: tuple[Any, ...], row: dict[str, Any] | None, horizon: datetime | None
    ) -> None:
        rows = database.data.setdefault(table, {})
        if row is None:
            rows.pop(key, None)
        else:
            rows[key] = row
        database.versions.write(table, key, commit_ts, row, horizon)

    def commit(
        self, db: str, mutations: Iterable[Any], transaction_tag: str = "", prepared: MutationSet | None = None,
        check: Callable[[Database], None] | None = None, *, excluded: bool = False,
    ) -> datetime:
        """Apply mutations (after a read-write transaction's DML effects, `prepared`) atomically; returns the commit
        timestamp. Raises QueryError and changes nothing on a bad mutation or when `check` (conflicts) refuses.
        `excluded`: the transaction set exclude_txn_from_change_streams."""
        return self._commit_queue.run(
            lambda: self._commit_locked(self.database(db), mutations, transaction_tag, prepared, check, excluded=excluded)
        )

    def commit_groups(
        self, db: str, groups: Sequence[Iterable[Any]], transaction_tag: str = "", *, excluded: bool = False
    ) -> list[datetime | QueryError]:
        """Each group of mutations committed as its own transaction, in order, with one journal flush for all
        (BatchWrite); per group its commit timestamp, or the QueryError that refused it (and changed nothing)."""

        def commit_each() -> list[datetime | QueryError]:
            outcomes: list[datetime | QueryError] = []
            database = self.database(db)
            for mutations in groups:
                try:
                    outcomes.append(self._commit_locked(database, mutations, transaction_tag, None, None, excluded=excluded))
                except QueryError as exc:
                    outcomes.append(exc)
            return outcomes

        return self._commit_queue.run(commit_each)

    def _next_transaction_id(self) -> str:
        return f"{self._transaction_prefix}{next(self._transactions):08x}"

    def _commit_locked(
        self, database: Database, mutations: Iterable[Any], transaction_tag: str, prepared: MutationSet | None,
        check: Callable[[Database], None] | None, *, excluded: bool = False, system: bool = False,
    ) -> datetime:
        assert self.clock is not None
        db = database.name
        commit_ts = self.clock.next_commit_timestamp()
        stamp = format_timestamp(commit_ts)  # once: the rows' commit timestamp columns and the journal
        changes = prepared or MutationSet(database.schema, database.data)
        try:
            if check is not None:
                check(database)
            changes.set_commit_timestamp(stamp)
            changes.apply(mutations)
        except QueryError:
            self._pass_time(db, [commit_ts])
            raise
        writes = changes.writes()
        if writes:
            # journal before the engine: a crash in between loses a change record, never reorders time
            self._record({"op": "commit", "db": db, "ts": stamp,
                          "writes": [[table, list(key), row] for table, key, row in writes]})
        if self.engine is not None:
            self.engine.commit(
                db, commit_ts, self._next_transaction_id(), transaction_tag, changes.changes(), system=system, excluded=excluded
            )
        horizon = database.earliest_version_time(commit_ts)
        for table, key, row in writes:
            self._write_row(database, commit_ts, table, key, row, horizon)
        self._saw(commit_ts)
        return commit_ts

    def delete_expired(self, now: datetime) -> int:
        """Run every row deletion policy once at `now`: per table with expired rows, one system transaction deletes
        them (with their cascades); returns the number of expired rows deleted."""
        deleted = 0
        for database in list(self.databases.values()):
            for name in [t.name for t in database.schema.tables.values() if t.ttl is not None]:
                deleted += self._commit_queue.run(lambda database=database, name=name: self._expire(database, name, now))  # type: ignore[misc]
        return deleted

    def _expire(self, database: Database, name: str, now: datetime) -> int:
        table = database.schema.table(name)
        if self.databases.get(database.name) is not database or table is None:
            return 0  # dropped since the sweep began
        keys = ttl.expired_keys(table, database.data.get(name, {}), now)
        changes = MutationSet(database.schema, database.data)
        count = 0
        for key in keys:
            saved = changes.savepoint()
            try:
                changes.delete(table, key)
                count += 1
            except QueryError:  # ON DELETE NO ACTION children: the row stays until they are gone
                changes.restore(saved)
        if count:
            self._commit_locked(database, [], "", changes, None, system=True)
        return count

    def databases_of(self, instance: str) -> Iterator[Database]:
        prefix = instance + "/databases/"
        return (d for d in list(self.databases.values()) if d.name.startswith(prefix))
