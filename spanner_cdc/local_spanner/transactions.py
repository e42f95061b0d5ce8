"""Transactions of the local server: snapshot read timestamps, read-write state (DML effects, what was read) and conflicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spanner_cdc.local_spanner.keysets import Key
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.values import format_timestamp

if TYPE_CHECKING:
    from spanner_cdc.local_spanner.catalog import Database
    from spanner_cdc.local_spanner.mutations import MutationSet
    from spanner_cdc.local_spanner.schema import Schema

NEVER = datetime.min.replace(tzinfo=UTC)
READ_ONLY, READ_WRITE, PARTITIONED_DML = "read_only", "read_write", "partitioned_dml"


@dataclass
class Transaction:
    """A begun transaction. Read-only ones read at `read_timestamp`; read-write ones keep their DML effects
    (`changes`) and when they read which rows, so that a commit after another transaction changed them is ABORTED."""

    id: bytes
    kind: str
    tag: str = ""
    read_timestamp: datetime | None = None
    changes: MutationSet | None = None
    reads: dict[tuple[str, Key], datetime] = field(default_factory=dict)
    scans: dict[str, datetime] = field(default_factory=dict)
    dml_results: dict[int, Any] = field(default_factory=dict)  # seqno -> result: a retried statement runs once
    excluded: bool = False  # exclude_txn_from_change_streams: left out of streams with allow_txn_exclusion

    def read_row(self, table: str, key: Key, at: datetime | None) -> None:
        self.reads.setdefault((table, key), at or NEVER)

    def scan(self, table: str, at: datetime | None) -> None:
        self.scans.setdefault(table, at or NEVER)

    def check_conflicts(self, database: Database) -> None:
        """ABORTED if a row this transaction read was committed by another transaction since (Spanner's locks would
        have made one of the two wait or abort; the client retries an aborted transaction)."""
        for (table, key), at in self.reads.items():
            last = database.versions.last_commit(table, key)
            if last is not None and last > at:
                raise _aborted(table)
        for table, at in self.scans.items():
            last = database.versions.last_commit(table)
            if last is not None and last > at:
                raise _aborted(table)


def excluded_from_change_streams(options: Any) -> bool:
    """TransactionOptions.exclude_txn_from_change_streams; INVALID_ARGUMENT on a read-only transaction, as Spanner
    answers (the option is for read-write and partitioned DML transactions only)."""
    if not options.exclude_txn_from_change_streams:
        return False
    if options.WhichOneof("mode") == READ_ONLY:
        raise QueryError("INVALID_ARGUMENT", "exclude_txn_from_change_streams can only be set on read-write or partitioned DML transactions, "
                                             "not on a read-only transaction")
    return True


def _aborted(table: str) -> QueryError:
    return QueryError("ABORTED", f"Transaction was aborted: it conflicts with a transaction that committed a write to table {table} "
                                 "after this one read it; retry the transaction")


def read_timestamp(read_only: Any, database: Database, now: datetime, last_commit: datetime | None) -> datetime:
    """The timestamp a read-only transaction (TransactionOptions.ReadOnly) reads at; FAILED_PRECONDITION if its
    versions are gone (older than version_retention_period), as Spanner does."""
    newest = max(now, last_commit) if last_commit is not None else now
    bound = read_only.WhichOneof("timestamp_bound") if read_only is not None else None
    if bound == "read_timestamp":
        timestamp = _datetime(read_only.read_timestamp)
    elif bound == "exact_staleness":
        timestamp = now - _timedelta(read_only.exact_staleness)
    else:  # strong, min_read_timestamp, max_staleness: the newest data is a valid answer to each
        return newest
    earliest = database.earliest_version_time(now)
    if timestamp < earliest:
        raise QueryError(
            "FAILED_PRECONDITION",
            f"Read timestamp {format_timestamp(timestamp)} is too old: versions of database {database.name} are kept for its "
            f"version_retention_period ({duration_text(database.version_retention)}); the earliest readable timestamp is {format_timestamp(earliest)}",
        )
    return timestamp


def _datetime(value: Any) -> datetime:
    return datetime.fromtimestamp(value.seconds, UTC) + timedelta(microseconds=value.nanos // 1000)


def _timedelta(value: Any) -> timedelta:
    return timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def duration_text(period: timedelta) -> str:
    """A period as Spanner writes it: 7d, 36h, 90m or 3600s."""
    seconds = int(period.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass
class ReadView:
    """What one read sees: the database at `timestamp` (None: now), or a read-write transaction's view (its DML
    effects included), whose reads are recorded at `seen` (the newest commit then) for conflict checks."""

    database: Database
    timestamp: datetime | None = None
    transaction: Transaction | None = None
    seen: datetime | None = None

    @property
    def schema(self) -> Schema:
        """The schema in force at the view's timestamp (a stale read sees the tables and columns of its time)."""
        return self.database.schema_at(self.timestamp)

    def rows(self, table: str) -> Any:
        transaction = self.transaction
        if transaction is not None and transaction.changes is not None:
            found = self.database.schema.table(table)
            if found is not None:
                return transaction.changes.rows(found)
        return self.database.rows_at(table, self.timestamp)

    def read_row(self, table: str, key: Key) -> None:
        if self.transaction is not None:
            self.transaction.read_row(table, key, self.seen)

    def scan(self, table: str) -> None:
        if self.transaction is not None:
            self.transaction.scan(table, self.seen)
