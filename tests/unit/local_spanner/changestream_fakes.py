"""Test support for the change stream engine: a hand-driven clock, a schema, and a row writer."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.model import ColumnInfo, RowChange, TableInfo

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DB = "projects/p/instances/i/databases/d"


class ManualClock(ServerClock):
    """Server time moves only when the test says so (advance), so timestamps are exact."""

    def __init__(self, start: datetime = T0) -> None:
        super().__init__(start=start, rate=1.0)
        self._manual = start

    def now(self) -> datetime:
        return self._manual

    def advance(self, delta: timedelta) -> datetime:
        self._manual += delta
        return self._manual


def _col(name: str, code: str, pk: bool, position: int, element: str | None = None) -> ColumnInfo:
    type_: dict[str, Any] = {"code": code}
    if element is not None:
        type_["array_element_type"] = {"code": element}
    return ColumnInfo(name, type_, pk, position)


SINGERS = TableInfo(
    "Singers",
    (
        _col("SingerId", "INT64", True, 1),
        _col("FirstName", "STRING", False, 2),
        _col("LastName", "STRING", False, 3),
        _col("Info", "JSON", False, 4),
    ),
    ("SingerId",),
)
ALBUMS = TableInfo(
    "Albums",
    (
        _col("SingerId", "INT64", True, 1),
        _col("AlbumId", "INT64", True, 2),
        _col("Title", "STRING", False, 3),
        _col("Tags", "ARRAY", False, 4, element="STRING"),
    ),
    ("SingerId", "AlbumId"),
)
TABLES = {"Singers": SINGERS, "Albums": ALBUMS}


class Writer:
    """Commits row changes the way the server does: it keeps the rows and resolves old / new rows."""

    def __init__(self, engine: ChangeStreamEngine, clock: ServerClock, db: str = DB) -> None:
        self.engine, self.clock, self.db = engine, clock, db
        self.rows: dict[tuple[str, tuple[Any, ...]], dict[str, Any]] = {}

    def change(
        self, table: TableInfo, mod_type: str, keys: dict[str, Any], values: dict[str, Any] | None = None
    ) -> RowChange:
        key = (table.name, tuple(keys[k] for k in table.key_columns))
        non_key = [c.name for c in table.columns if not c.is_primary_key]
        old = self.rows.get(key)
        values = values or {}
        if mod_type == "DELETE":
            self.rows.pop(key)
            return RowChange(table.name, "DELETE", dict(keys), dict(old or {}), None, ())
        new = {c: None for c in non_key} if old is None else dict(old)
        new.update(values)
        self.rows[key] = new
        return RowChange(table.name, mod_type, dict(keys), None if old is None else dict(old), dict(new), tuple(values))

    def commit(self, changes: Iterable[RowChange], tag: str = "") -> datetime:
        if isinstance(self.clock, ManualClock):
            self.clock.advance(timedelta(milliseconds=1))  # server time passes between commits
        ts = self.clock.next_commit_timestamp()
        self.engine.commit(self.db, ts, "", tag, list(changes))
        return ts

    def insert(self, table: TableInfo, keys: dict[str, Any], values: dict[str, Any], tag: str = "") -> datetime:
        return self.commit([self.change(table, "INSERT", keys, values)], tag)


def drain(
    engine: ChangeStreamEngine,
    token: str | None,
    start: datetime,
    end: datetime | None,
    heartbeat_ms: int = 1000,
    db: str = DB,
    stream: str = "s",
) -> list[dict[str, Any]]:
    return list(engine.query(db, stream, token, start, end, heartbeat_ms, threading.Event()))


def read_all(
    engine: ChangeStreamEngine, start: datetime, end: datetime, db: str = DB, stream: str = "s"
) -> dict[str, list[dict[str, Any]]]:
    """Every partition's records in [start, end] by following the lineage from the NULL-token query."""
    (roots,) = drain(engine, None, start, end, db=db, stream=stream)
    queue = [(c["token"], start) for c in roots["child_partitions_record"]["child_partitions"]]
    seen = {token for token, _ in queue}
    out: dict[str, list[dict[str, Any]]] = {}
    while queue:
        token, begin = queue.pop(0)
        out[token] = drain(engine, token, begin, end, db=db, stream=stream)
        for record in out[token]:
            children = record.get("child_partitions_record")
            if children is None:
                continue
            for child in children["child_partitions"]:
                if child["token"] not in seen:
                    seen.add(child["token"])
                    queue.append((child["token"], children["start_timestamp"]))
    return out


def data_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r["data_change_record"] for r in records if "data_change_record" in r]


class Reader:
    """Runs one query in a thread; records arrive on `records` (a queue), errors in `error`."""

    _DONE = object()

    def __init__(
        self,
        engine: ChangeStreamEngine,
        token: str | None,
        start: datetime,
        end: datetime | None,
        heartbeat_ms: int = 1000,
        db: str = DB,
        stream: str = "s",
    ) -> None:
        import queue

        self.records: queue.Queue[Any] = queue.Queue()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._iterator = engine.query(db, stream, token, start, end, heartbeat_ms, self.stop)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for record in self._iterator:
                self.records.put(record)
        except BaseException as exc:  # handed to the test thread
            self.error = exc
        finally:
            self.records.put(self._DONE)

    def next(self, timeout: float = 10.0) -> dict[str, Any] | None:
        """The next record, or None once the query has ended."""
        item = self.records.get(timeout=timeout)
        return None if item is self._DONE else item

    def until(self, predicate: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
        """Records up to and including the first one matching `predicate`."""
        seen = []
        while True:
            item = self.next(timeout)
            assert item is not None, f"query ended before the expected record; got {seen}"
            seen.append(item)
            if predicate(item):
                return seen

    def rest(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        seen = []
        while (item := self.next(timeout)) is not None:
            seen.append(item)
        return seen

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
