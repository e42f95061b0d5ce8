"""A scripted stand-in for google-cloud-spanner's Database, for the reader's pure resume logic (no tests here)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.unit.source import test_decode_examples as ex


def example_timestamp(example: dict[str, Any]) -> datetime:
    ((_, body),) = example.items()
    text = body.get("commit_timestamp") or body.get("timestamp") or body["start_timestamp"]
    return datetime.fromisoformat(text)


def data_change(ts: str, txn: str, seq: str) -> dict[str, Any]:
    return ex.with_changes(ex.TRANSFER_1, commit_timestamp=ts, server_transaction_id=txn, record_sequence=seq)


def heartbeat(ts: str) -> dict[str, Any]:
    return {"heartbeat_record": {"timestamp": ts}}


def child_partitions(ts: str, seq: str, *tokens: str) -> dict[str, Any]:
    children = [{"token": t, "parent_partition_tokens": ["p"]} for t in tokens]
    return {"child_partitions_record": {"start_timestamp": ts, "record_sequence": seq, "child_partitions": children}}


@dataclass
class Call:
    sql: str
    params: dict[str, Any]
    param_types: dict[str, Any]
    request_options: Any
    timeout: Any
    rows_sent: int = 0
    lazy_decode: bool = False


class FakeResults:
    """Like StreamedResultSet: `fields` exists only once the first message arrived."""

    def __init__(self, fields: list[Any], rows: list[Any], call: Call, fail: tuple[int, Exception] | None) -> None:
        self._fields, self._rows, self._call, self._fail = fields, rows, call, fail

    @property
    def fields(self) -> list[Any]:
        if self._call.rows_sent == 0:
            raise AttributeError("'NoneType' object has no attribute 'row_type'")
        return self._fields

    def decode_row(self, row: list[Any]) -> list[Any]:
        raise AssertionError("the documented ChangeRecord shape is read from the protobuf values, never decoded by the client")

    def __iter__(self) -> Iterator[Any]:
        for index, row in enumerate(self._rows):
            if self._fail is not None and index == self._fail[0]:
                raise self._fail[1]
            self._call.rows_sent += 1
            yield row
        if self._fail is not None and self._fail[0] >= len(self._rows):
            raise self._fail[1]

    @property
    def _response_iterator(self) -> Iterator[Any]:
        """Like StreamedResultSet's: the PartialResultSets (here one a row, the metadata with the first)."""
        from google.cloud.spanner_v1 import PartialResultSet, ResultSetMetadata, StructType

        for index, row in enumerate(self):
            message = PartialResultSet.pb()()
            message.values.extend(row)  # the row's protobuf Values, as the server sent them
            if index == 0:
                message.metadata.CopyFrom(ResultSetMetadata.pb(ResultSetMetadata(row_type=StructType(fields=self._fields))))
            yield PartialResultSet.wrap(message)


@dataclass
class FakeDatabase:
    """Serves `records` (spec-form dicts, commit order) from the query's start; query i fails as failures[i] says."""

    dialect: str
    records: list[dict[str, Any]]
    failures: list[tuple[int, Exception] | None] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    open_snapshots: int = 0
    name: str = "projects/p/instances/i/databases/d"
    mode_queries: int = 0

    def snapshot(self, **kw: Any) -> FakeDatabase._Checkout:
        assert not kw, "a change stream query needs a strong single-use snapshot, the default"
        return FakeDatabase._Checkout(self)

    class _Checkout:
        def __init__(self, db: FakeDatabase) -> None:
            self.db = db
            self.used = False

        def __enter__(self) -> FakeDatabase._Snapshot:
            self.db.open_snapshots += 1
            return FakeDatabase._Snapshot(self.db, self)

        def __exit__(self, *exc: object) -> None:
            self.db.open_snapshots -= 1

    class _Snapshot:
        def __init__(self, db: FakeDatabase, checkout: Any) -> None:
            self.db, self.checkout = db, checkout

        def execute_sql(self, sql: str, **kw: Any) -> FakeResults:
            assert not self.checkout.used, "a single-use snapshot runs one query only"
            self.checkout.used = True
            if "change_stream_options" in sql.lower():  # the reader asks the partition mode once: not set, immutable
                self.db.mode_queries += 1
                return iter(())  # type: ignore[return-value]
            call = Call(sql, kw["params"], kw["param_types"], kw.get("request_options"), kw.get("timeout", "DEFAULT"))
            self.db.calls.append(call)
            start_key, end_key = ("p1", "p2") if self.db.dialect == "POSTGRESQL" else ("start_timestamp", "end_timestamp")
            start, end = kw["params"][start_key], kw["params"][end_key]
            wanted = [
                r for r in self.db.records if example_timestamp(r) >= start and (end is None or example_timestamp(r) <= end)
            ]
            call.lazy_decode = kw.get("lazy_decode", False)
            if self.db.dialect == "POSTGRESQL":
                fields, rows = ex.postgresql_rows(wanted or [heartbeat("2000-01-01T00:00:00Z")], lazy=call.lazy_decode)
            else:
                fields, rows = ex.googlesql_rows(wanted or [heartbeat("2000-01-01T00:00:00Z")], lazy=call.lazy_decode)
            index = len(self.db.calls) - 1
            fail = self.db.failures[index] if index < len(self.db.failures) else None
            return FakeResults(fields, rows if wanted else [], call, fail)
