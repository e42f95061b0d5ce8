"""Store part for metadata-store retention: a closed window's rows folded into per-window totals, then deleted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.lineage import rules
from spanner_cdc.store.base import StoreBase
from spanner_cdc.store.models import WindowTotals
from spanner_cdc.times import utc

# The window, locked against a concurrent fold of it (a second maintain waits, then finds less to delete).
LOCK_CLOSED_WINDOW = sa.text(
    "SELECT marker_path FROM cdc_windows WHERE lineage_id = :lineage_id AND window_start = :start "
    "AND window_end = :end AND state = 'COMPLETE' FOR UPDATE"
)
# An OPEN window that starts before this one ends: the frontier is there, and nothing at or after it is folded.
OPEN_BEFORE = sa.text(
    "SELECT EXISTS (SELECT 1 FROM cdc_windows WHERE lineage_id = :lineage_id AND state <> 'COMPLETE' "
    "AND window_start < :end)"
)
# Files extracted for the window (what WindowQueries.manifest lists for its bounds): its marker lists them.
DELETE_FILES = sa.text(
    """
    WITH gone AS (
        DELETE FROM cdc_manifest WHERE lineage_id = :lineage_id AND window_start >= :start AND window_end <= :end
        RETURNING rows, bytes
    )
    SELECT count(*) AS files, coalesce(sum(rows), 0) AS rows, coalesce(sum(bytes), 0) AS bytes FROM gone
    """
)
# Finished partitions that ended before the window's end. Kept: one a CREATED child still waits for (an unknown
# parent counts as unfinished, so deleting it would hold the child back forever). A kept child's edge to a deleted
# parent stays with the child: its parents read the same.
FOLDABLE_PARTITIONS = """
    SELECT p.token FROM cdc_partitions p
    WHERE p.lineage_id = :lineage_id AND p.state = 'FINISHED' AND p.partition_end < :end
      AND NOT EXISTS (
          SELECT 1 FROM cdc_partition_parents e JOIN cdc_partitions c
              ON c.lineage_id = e.lineage_id AND c.token = e.child_token
          WHERE e.lineage_id = p.lineage_id AND e.parent_token = p.token AND c.state = 'CREATED')
"""
# Attempts of the window, ended, but never the current attempt of a partition that goes on (a claim, a lease
# expiry or a failure of it names that one); and every attempt of a partition about to be deleted.
DELETE_ATTEMPTS = sa.text(
    f"""
    WITH foldable AS MATERIALIZED ({FOLDABLE_PARTITIONS}), gone AS (
        DELETE FROM cdc_attempts a
        WHERE a.lineage_id = :lineage_id AND (
            (a.window_end <= :end AND a.outcome <> 'RUNNING' AND NOT EXISTS (
                SELECT 1 FROM cdc_partitions p WHERE p.lineage_id = a.lineage_id AND p.token = a.token
                  AND p.state <> 'FINISHED' AND p.attempts = a.attempt))
            OR a.token = ANY(ARRAY(SELECT token FROM foldable)))
        RETURNING a.outcome, a.records
    )
    SELECT count(*) AS attempts, count(*) FILTER (WHERE outcome IN ('FAILED', 'EXPIRED')) AS failed,
           coalesce(sum(records), 0) AS records
    FROM gone
    """
)
DELETE_PARTITIONS = sa.text(
    f"""
    WITH gone AS (
        DELETE FROM cdc_partitions p WHERE p.lineage_id = :lineage_id
          AND p.token = ANY(ARRAY(SELECT token FROM ({FOLDABLE_PARTITIONS}) f))
        RETURNING p.token
    )
    SELECT count(*) FROM gone
    """
)
DELETE_MOVES = sa.text(
    "WITH gone AS (DELETE FROM cdc_partition_moves WHERE lineage_id = :lineage_id AND moved_at < :end RETURNING 1) "
    "SELECT count(*) FROM gone"
)
ADD_TOTALS = sa.text(
    """
    INSERT INTO cdc_window_totals AS t (lineage_id, window_start, window_end, partitions, attempts, attempts_failed,
                                        attempt_records, files, rows, bytes, moves)
    VALUES (:lineage_id, :start, :end, :partitions, :attempts, :attempts_failed, :attempt_records, :files, :rows,
            :bytes, :moves)
    ON CONFLICT (lineage_id, window_start, window_end) DO UPDATE
    SET partitions = t.partitions + EXCLUDED.partitions, attempts = t.attempts + EXCLUDED.attempts,
        attempts_failed = t.attempts_failed + EXCLUDED.attempts_failed,
        attempt_records = t.attempt_records + EXCLUDED.attempt_records, files = t.files + EXCLUDED.files,
        rows = t.rows + EXCLUDED.rows, bytes = t.bytes + EXCLUDED.bytes, moves = t.moves + EXCLUDED.moves
    RETURNING t.*
    """
)
TOTALS_COLUMNS = (
    "lineage_id, window_start, window_end, partitions, attempts, attempts_failed, attempt_records, files, rows, bytes, "
    "moves, folded_at"
)


def totals_from(row: Any) -> WindowTotals:
    return WindowTotals(
        lineage_id=row.lineage_id, start=utc(row.window_start), end=utc(row.window_end), partitions=row.partitions,
        attempts=row.attempts, attempts_failed=row.attempts_failed, attempt_records=row.attempt_records,
        files=row.files, rows=row.rows, bytes=row.bytes, moves=row.moves, folded_at=utc(row.folded_at),
    )  # fmt: skip


class RetentionQueries(StoreBase):
    def fold_window(self, lineage_id: int, start: datetime, end: datetime) -> WindowTotals | None:
        """Fold closed window [start, end) in one transaction: its manifest rows (the files stay listed by its
        marker), its ended attempts, the finished partitions that ended before its end and the key range moves
        before it are counted into its row of cdc_window_totals and deleted. None, touching nothing, when the window
        is not closed or an open window starts before its end (the frontier). Idempotent: a re-fold deletes and
        adds nothing (or only what became foldable since, e.g. a partition a CREATED child no longer waits for)."""
        rules.require_utc(start, "window start")
        rules.require_utc(end, "window end")
        params = {"lineage_id": lineage_id, "start": start, "end": end}

        def body(conn: Connection) -> WindowTotals | None:
            if conn.execute(LOCK_CLOSED_WINDOW, params).one_or_none() is None:
                return None
            if conn.execute(OPEN_BEFORE, params).scalar_one():
                return None
            files = conn.execute(DELETE_FILES, params).one()
            attempts = conn.execute(DELETE_ATTEMPTS, params).one()
            partitions = conn.execute(DELETE_PARTITIONS, params).scalar_one()
            moves = conn.execute(DELETE_MOVES, params).scalar_one()
            row = conn.execute(ADD_TOTALS, {
                **params, "partitions": partitions, "attempts": attempts.attempts, "attempts_failed": attempts.failed,
                "attempt_records": attempts.records, "files": files.files, "rows": files.rows, "bytes": files.bytes,
                "moves": moves,
            }).one()  # fmt: skip
            return totals_from(row)

        return self._db.transaction(body)

    def window_totals(self, lineage_id: int) -> list[WindowTotals]:
        """The folded windows of a lineage with what was folded of each, oldest first."""

        def body(conn: Connection) -> list[WindowTotals]:
            rows = conn.execute(
                sa.text(f"SELECT {TOTALS_COLUMNS} FROM cdc_window_totals WHERE lineage_id = :lineage_id "
                        "ORDER BY window_start, window_end"),
                {"lineage_id": lineage_id},
            )  # fmt: skip
            return [totals_from(r) for r in rows]

        return self._db.transaction(body)
