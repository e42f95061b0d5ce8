"""Shared base of the store's parts: the database handle and conversions from result rows to models."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from spanner_cdc.errors import NotFound
from spanner_cdc.lineage import rules
from spanner_cdc.store.database import Database
from spanner_cdc.store.models import Lineage, ManifestFile, PartitionRow, WindowRow
from spanner_cdc.times import utc, utc_or_none

LINEAGE_COLUMNS = "id, stream, namespace, database, created_at, retention_period_s"
PARTITION_COLUMNS = """
SELECT p.lineage_id, p.token, p.partition_start, p.partition_end, p.state, p.watermark,
       p.created_at, p.ready_at, p.scheduled_at, p.running_at, p.finished_at,
       p.lease_owner, p.lease_expires_at, p.attempts, p.last_error"""
PARTITION_SELECT = PARTITION_COLUMNS + """,
       coalesce((SELECT array_agg(e.parent_token ORDER BY e.parent_token) FROM cdc_partition_parents e
                 WHERE e.lineage_id = p.lineage_id AND e.child_token = p.token), '{}') AS parents,
       coalesce((SELECT array_agg(e.child_token ORDER BY e.child_token) FROM cdc_partition_parents e
                 WHERE e.lineage_id = p.lineage_id AND e.parent_token = p.token), '{}') AS children
FROM cdc_partitions p
"""
WINDOW_COLUMNS = (
    "lineage_id, window_start, window_end, state, records, files, transaction_check, marker_path, opened_at, closed_at"
)
MANIFEST_COLUMNS = "path, token, range_start, range_end, window_start, window_end, rows, bytes, table_name"


def lineage_from(row: Row[Any]) -> Lineage:
    return Lineage(row.id, row.stream, row.namespace, row.database, utc(row.created_at), row.retention_period_s)


def partition_from(
    row: Row[Any], parents: tuple[str, ...] | None = None, children: tuple[str, ...] | None = None
) -> PartitionRow:
    """From a PARTITION_SELECT row, or a PARTITION_COLUMNS one with its `parents` and `children` given."""
    return PartitionRow(
        lineage_id=row.lineage_id,
        token=row.token,
        start=utc(row.partition_start),
        end=utc_or_none(row.partition_end),
        state=rules.State(row.state),
        watermark=utc_or_none(row.watermark),
        created_at=utc(row.created_at),
        ready_at=utc_or_none(row.ready_at),
        scheduled_at=utc_or_none(row.scheduled_at),
        running_at=utc_or_none(row.running_at),
        finished_at=utc_or_none(row.finished_at),
        lease_owner=row.lease_owner,
        lease_expires_at=utc_or_none(row.lease_expires_at),
        attempts=row.attempts,
        last_error=row.last_error,
        parents=tuple(row.parents) if parents is None else parents,
        children=tuple(row.children) if children is None else children,
    )


def window_from(row: Row[Any]) -> WindowRow:
    check = row.transaction_check
    if isinstance(check, str):
        check = json.loads(check)
    return WindowRow(
        lineage_id=row.lineage_id,
        start=utc(row.window_start),
        end=utc(row.window_end),
        state=row.state,
        records=row.records,
        files=row.files,
        transaction_check=check,
        marker_path=row.marker_path,
        opened_at=utc(row.opened_at),
        closed_at=utc_or_none(row.closed_at),
    )


def manifest_from(row: Row[Any]) -> ManifestFile:
    return ManifestFile(
        path=row.path,
        token=row.token,
        range_start=utc(row.range_start),
        range_end=utc(row.range_end),
        window_start=utc_or_none(row.window_start),
        window_end=utc_or_none(row.window_end),
        rows=row.rows,
        bytes=row.bytes,
        table_name=row.table_name,
    )


class StoreBase:
    """What every part of the store shares: one Database, and lineage lookups that raise NotFound."""

    _db: Database

    @property
    def url(self) -> str:
        """The store's URL with the password hidden."""
        return self._db.display_url

    def _lineage_by_id(self, conn: Connection, lineage_id: int) -> Lineage:
        row = conn.execute(
            sa.text(f"SELECT {LINEAGE_COLUMNS} FROM cdc_lineages WHERE id = :id"), {"id": lineage_id}
        ).one_or_none()
        if row is None:
            raise NotFound(f"no lineage with id {lineage_id} in the metadata store at {self.url}")
        return lineage_from(row)
