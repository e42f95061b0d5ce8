"""Store part for a lineage's initial snapshot: its timestamp, the tables committed so far and their files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.lineage import rules
from spanner_cdc.store.base import StoreBase
from spanner_cdc.times import utc, utc_or_none

SNAPSHOT_COLUMNS = "lineage_id, snapshot_at, state, rows, files, marker_path, started_at, completed_at"
BEGIN = sa.text(
    "INSERT INTO cdc_snapshots (lineage_id, snapshot_at, state) VALUES (:lineage_id, :at, 'RUNNING') "
    "ON CONFLICT (lineage_id) DO NOTHING"
)
SELECT = sa.text(f"SELECT {SNAPSHOT_COLUMNS} FROM cdc_snapshots WHERE lineage_id = :lineage_id")
INSERT_TABLE = sa.text(
    "INSERT INTO cdc_snapshot_tables (lineage_id, table_name, rows) VALUES (:lineage_id, :table, :rows) "
    "ON CONFLICT (lineage_id, table_name) DO NOTHING RETURNING table_name"
)
INSERT_FILE = sa.text(
    "INSERT INTO cdc_snapshot_files (lineage_id, table_name, path, rows, bytes) "
    "VALUES (:lineage_id, :table, :path, :rows, :bytes)"
)
FILES = sa.text(
    "SELECT table_name, path, rows, bytes FROM cdc_snapshot_files WHERE lineage_id = :lineage_id ORDER BY table_name, path"
)
TABLES = sa.text("SELECT table_name, rows FROM cdc_snapshot_tables WHERE lineage_id = :lineage_id ORDER BY table_name")
COMPLETE = sa.text(
    "UPDATE cdc_snapshots SET state = 'COMPLETE', rows = :rows, files = :files, marker_path = :marker, "
    "completed_at = clock_timestamp() WHERE lineage_id = :lineage_id AND state = 'RUNNING'"
)


@dataclass(frozen=True)
class SnapshotRow:
    lineage_id: int
    at: datetime
    state: str
    rows: int | None
    files: int | None
    marker_path: str | None
    started_at: datetime
    completed_at: datetime | None

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"


@dataclass(frozen=True)
class SnapshotFile:
    table: str
    path: str
    rows: int
    bytes: int


def _row(row: Any) -> SnapshotRow:
    return SnapshotRow(
        row.lineage_id, utc(row.snapshot_at), row.state, row.rows, row.files, row.marker_path,
        utc(row.started_at), utc_or_none(row.completed_at),
    )  # fmt: skip


class SnapshotQueries(StoreBase):
    def begin_snapshot(self, lineage_id: int, at: datetime) -> SnapshotRow:
        """The lineage's snapshot: a new one at `at`, or the one begun before (whose timestamp wins)."""
        rules.require_utc(at, "snapshot timestamp")

        def body(conn: Connection) -> SnapshotRow:
            self._lineage_by_id(conn, lineage_id)
            conn.execute(BEGIN, {"lineage_id": lineage_id, "at": at})
            return _row(conn.execute(SELECT, {"lineage_id": lineage_id}).one())

        return self._db.transaction(body)

    def snapshot(self, lineage_id: int) -> SnapshotRow | None:
        def body(conn: Connection) -> SnapshotRow | None:
            row = conn.execute(SELECT, {"lineage_id": lineage_id}).one_or_none()
            return None if row is None else _row(row)

        return self._db.transaction(body)

    def commit_snapshot_table(self, lineage_id: int, table: str, files: Sequence[SnapshotFile]) -> bool:
        """Record one table's files at once; False (nothing written) when the table was committed already."""

        def body(conn: Connection) -> bool:
            rows = sum(f.rows for f in files)
            if conn.execute(INSERT_TABLE, {"lineage_id": lineage_id, "table": table, "rows": rows}).one_or_none() is None:
                return False
            for f in files:
                conn.execute(INSERT_FILE, {"lineage_id": lineage_id, "table": table, "path": f.path, "rows": f.rows, "bytes": f.bytes})
            return True

        return self._db.transaction(body)

    def snapshot_tables(self, lineage_id: int) -> dict[str, int]:
        """The committed tables and their row counts."""
        return self._db.transaction(lambda conn: {r.table_name: int(r.rows) for r in conn.execute(TABLES, {"lineage_id": lineage_id})})

    def snapshot_files(self, lineage_id: int) -> list[SnapshotFile]:
        def body(conn: Connection) -> list[SnapshotFile]:
            return [SnapshotFile(r.table_name, r.path, int(r.rows), int(r.bytes)) for r in conn.execute(FILES, {"lineage_id": lineage_id})]

        return self._db.transaction(body)

    def complete_snapshot(self, lineage_id: int, *, rows: int, files: int, marker_path: str) -> SnapshotRow:
        def body(conn: Connection) -> SnapshotRow:
            conn.execute(COMPLETE, {"lineage_id": lineage_id, "rows": rows, "files": files, "marker": marker_path})
            return _row(conn.execute(SELECT, {"lineage_id": lineage_id}).one())

        return self._db.transaction(body)
