"""Store part for windows and the manifest: completeness, closing a window, published files."""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.errors import StoreError
from spanner_cdc.lineage import rules
from spanner_cdc.store.base import MANIFEST_COLUMNS, WINDOW_COLUMNS, StoreBase, manifest_from, window_from
from spanner_cdc.store.models import ManifestFile, WindowRow, WindowStatus

log = logging.getLogger(__name__)

# The first half of a window's two-int advisory lock key (the second is a hash of lineage and bounds);
# any fixed int4, the same in every process. A hash collision only makes two closes take turns.
WINDOW_LOCK_CLASS = 0x5C0C_0C10
LOCK_WINDOW = sa.text(f"SELECT pg_advisory_lock({WINDOW_LOCK_CLASS}, CAST(:key AS integer))")
UNLOCK_WINDOW = sa.text(f"SELECT pg_advisory_unlock({WINDOW_LOCK_CLASS}, CAST(:key AS integer))")

ALIVE_IN_WINDOW = sa.text(
    "SELECT token, state, partition_start, watermark FROM cdc_partitions "
    "WHERE lineage_id = :lineage_id AND partition_start <= :last"
)
SELECT_WINDOW = sa.text(
    f"SELECT {WINDOW_COLUMNS} FROM cdc_windows WHERE lineage_id = :lineage_id AND window_start = :start "
    "AND window_end = :end"
)
WINDOW_FOLDED = sa.text(
    "SELECT EXISTS (SELECT 1 FROM cdc_window_totals WHERE lineage_id = :lineage_id AND window_start = :start "
    "AND window_end = :end)"
)
OPEN_WINDOW = sa.text(
    "INSERT INTO cdc_windows (lineage_id, window_start, window_end, state) VALUES (:lineage_id, :start, :end, 'OPEN') "
    "ON CONFLICT (lineage_id, window_start, window_end) DO NOTHING"
)
RECORD_FAILED_CHECK = sa.text(
    "UPDATE cdc_windows SET transaction_check = CAST(:check AS jsonb) "
    "WHERE lineage_id = :lineage_id AND window_start = :start AND window_end = :end AND state = 'OPEN'"
)
RECORD_VERIFY = sa.text(
    "UPDATE cdc_windows SET verify = CAST(:verify AS jsonb) "
    "WHERE lineage_id = :lineage_id AND window_start = :start AND window_end = :end AND state = 'COMPLETE'"
)
CLOSE_WINDOW = sa.text(
    f"""
    INSERT INTO cdc_windows (lineage_id, window_start, window_end, state, records, files, transaction_check,
                             marker_path, closed_at)
    VALUES (:lineage_id, :start, :end, 'COMPLETE', :records, :files, CAST(:check AS jsonb), :marker_path,
            clock_timestamp())
    ON CONFLICT (lineage_id, window_start, window_end) DO UPDATE
    SET state = 'COMPLETE', records = EXCLUDED.records, files = EXCLUDED.files,
        transaction_check = EXCLUDED.transaction_check, marker_path = EXCLUDED.marker_path,
        closed_at = EXCLUDED.closed_at
    WHERE cdc_windows.state = 'OPEN'
    RETURNING {WINDOW_COLUMNS}
    """
)


def _check_bounds(start: datetime, end: datetime) -> None:
    rules.require_utc(start, "window start")
    rules.require_utc(end, "window end")
    if end <= start:
        raise ValueError(f"window end {end.isoformat()} must be after its start {start.isoformat()}")


def _window_key(lineage_id: int, start: datetime, end: datetime) -> int:
    key = zlib.crc32(f"{lineage_id}|{start.isoformat()}|{end.isoformat()}".encode())
    return key - (1 << 32) if key >= 1 << 31 else key  # as a signed int4


class WindowQueries(StoreBase):
    @contextmanager
    def window_lock(self, lineage_id: int, start: datetime, end: datetime) -> Iterator[None]:
        """Hold window [start, end)'s lock (waiting for it): one closer at a time checks, marks and closes it.

        A session lock on a connection of its own, so a closer that dies (SIGKILL) releases it at once.
        """
        _check_bounds(start, end)
        key = _window_key(lineage_id, start, end)
        try:
            conn = self._db.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        except sa.exc.DBAPIError as exc:
            raise self._db.translate(exc) from exc
        try:
            try:
                conn.execute(LOCK_WINDOW, {"key": key})
            except sa.exc.DBAPIError as exc:
                raise self._db.translate(exc) from exc
            yield
            try:
                conn.execute(UNLOCK_WINDOW, {"key": key})
            except sa.exc.DBAPIError:
                pass  # the session is gone, and its lock with it
        finally:
            conn.invalidate()  # never back to the pool holding the lock
            conn.close()

    def window_status(self, lineage_id: int, start: datetime, end: datetime) -> WindowStatus:
        """Whether [start, end) is complete (rules.window_complete), with the pending tokens by state."""
        _check_bounds(start, end)
        return self._db.transaction(lambda conn: self._status(conn, lineage_id, start, end))

    def _status(self, conn: Connection, lineage_id: int, start: datetime, end: datetime) -> WindowStatus:
        self._lineage_by_id(conn, lineage_id)
        rows = [
            (r.token, r.state, r.partition_start, r.watermark)
            for r in conn.execute(ALIVE_IN_WINDOW, {"lineage_id": lineage_id, "last": rules.inclusive_end(end)})
        ]
        pending = rules.pending_in_window(rows, end)
        bounds = {"lineage_id": lineage_id, "start": start, "end": end}
        window = conn.execute(SELECT_WINDOW, bounds).one_or_none()
        closed = window is not None and window.state == "COMPLETE"
        # a folded window's finished partitions are gone (store.retention): it was complete when closed, and stays so
        folded = closed and conn.execute(WINDOW_FOLDED, bounds).scalar_one()
        return WindowStatus(
            lineage_id=lineage_id,
            start=start,
            end=end,
            complete=folded or rules.window_complete(rows, end),
            partitions=len(rows),
            pending={state: tuple(tokens) for state, tokens in pending.items()},
            closed=closed,
        )

    def open_window(self, lineage_id: int, start: datetime, end: datetime) -> WindowRow:
        """Record window [start, end) as OPEN (idempotent), so it shows before it completes."""
        _check_bounds(start, end)
        params = {"lineage_id": lineage_id, "start": start, "end": end}

        def body(conn: Connection) -> WindowRow:
            self._lineage_by_id(conn, lineage_id)
            conn.execute(OPEN_WINDOW, params)
            return window_from(conn.execute(SELECT_WINDOW, params).one())

        return self._db.transaction(body)

    def record_failed_check(self, lineage_id: int, start: datetime, end: datetime, check: Mapping[str, Any]) -> None:
        """Keep a failed transaction check on the OPEN window (the UI, /metrics and the alert rules show it); a later
        close that passes replaces it."""
        _check_bounds(start, end)
        params = {"lineage_id": lineage_id, "start": start, "end": end, "check": json.dumps(check, sort_keys=True, default=str)}
        self._db.transaction(lambda conn: conn.execute(RECORD_FAILED_CHECK, params))

    def close_window(
        self,
        lineage_id: int,
        start: datetime,
        end: datetime,
        *,
        records: int,
        files: int,
        transaction_check: Mapping[str, Any],
        marker_path: str | None,
    ) -> WindowRow:
        """Mark [start, end) COMPLETE; idempotent (the first close wins); refuses while it is not complete."""
        _check_bounds(start, end)
        params = {
            "lineage_id": lineage_id,
            "start": start,
            "end": end,
            "records": records,
            "files": files,
            "check": json.dumps(transaction_check, sort_keys=True, default=str),
            "marker_path": marker_path,
        }

        def body(conn: Connection) -> WindowRow:
            status = self._status(conn, lineage_id, start, end)
            if not status.complete:
                raise StoreError(_incomplete_message(status))
            row = conn.execute(CLOSE_WINDOW, params).one_or_none()
            if row is None:
                row = conn.execute(SELECT_WINDOW, params).one()
                if (row.records, row.files) != (records, files):
                    log.warning(
                        "lineage %s window [%s, %s): already closed with %s records in %s files, not %s in %s",
                        lineage_id, start.isoformat(), end.isoformat(), row.records, row.files, records, files,
                    )
            return window_from(row)

        return self._db.transaction(body)

    def record_verify(self, lineage_id: int, start: datetime, end: datetime, result: Mapping[str, Any]) -> None:
        """Keep `spanner-cdc verify`'s result with the closed window [start, end) (replacing an earlier one)."""
        _check_bounds(start, end)
        params = {"lineage_id": lineage_id, "start": start, "end": end, "verify": json.dumps(dict(result), sort_keys=True)}
        updated = self._db.transaction(lambda conn: conn.execute(RECORD_VERIFY, params).rowcount)
        if not updated:
            raise StoreError(f"lineage {lineage_id} has no closed window [{start.isoformat()}, {end.isoformat()}) to keep a verify result with")

    def windows(self, lineage_id: int) -> list[WindowRow]:
        def body(conn: Connection) -> list[WindowRow]:
            rows = conn.execute(
                sa.text(
                    f"SELECT {WINDOW_COLUMNS} FROM cdc_windows WHERE lineage_id = :lineage_id "
                    "ORDER BY window_start, window_end"
                ),
                {"lineage_id": lineage_id},
            )
            return [window_from(r) for r in rows]

        return self._db.transaction(body)

    def manifest(
        self, lineage_id: int, *, window_start: datetime | None = None, window_end: datetime | None = None
    ) -> list[ManifestFile]:
        """Published files of the lineage; with bounds, those extracted for windows inside [window_start, window_end]."""
        clauses = ["lineage_id = :lineage_id"]
        params: dict[str, object] = {"lineage_id": lineage_id}
        if window_start is not None:
            clauses.append("window_start >= :window_start")
            params["window_start"] = rules.require_utc(window_start, "window_start")
        if window_end is not None:
            clauses.append("window_end <= :window_end")
            params["window_end"] = rules.require_utc(window_end, "window_end")
        statement = sa.text(
            f"SELECT {MANIFEST_COLUMNS} FROM cdc_manifest WHERE {' AND '.join(clauses)} ORDER BY token, range_start, path"
        )
        return self._db.transaction(lambda conn: [manifest_from(r) for r in conn.execute(statement, params)])


RETIRE_FILES = sa.text(
    "DELETE FROM cdc_manifest WHERE lineage_id = :lineage_id AND path = ANY(CAST(:paths AS text[])) RETURNING path"
)
ADD_COMPACTED = sa.text(
    """
    INSERT INTO cdc_manifest (lineage_id, path, token, range_start, range_end, window_start, window_end, rows, bytes,
                              table_name, attempt)
    VALUES (:lineage_id, :path, :token, :range_start, :range_end, :window_start, :window_end, :rows, :bytes,
            :table_name, 0)
    ON CONFLICT (lineage_id, path) DO NOTHING
    """
)


class CompactionQueries(StoreBase):
    def replace_files(self, lineage_id: int, old: Sequence[str], new: Sequence[ManifestFile]) -> int:
        """Compaction's store step: the manifest's `old` paths replaced by the `new` files holding their rows, in one
        transaction. Idempotent: once `old` are gone nothing changes (0 returned), else the count of `old` replaced."""

        def body(conn: Connection) -> int:
            self._lineage_by_id(conn, lineage_id)
            gone = conn.execute(RETIRE_FILES, {"lineage_id": lineage_id, "paths": list(old)}).scalars().all()
            if not gone:
                return 0
            for f in new:
                conn.execute(ADD_COMPACTED, {
                    "lineage_id": lineage_id, "path": f.path, "token": f.token, "range_start": f.range_start,
                    "range_end": f.range_end, "window_start": f.window_start, "window_end": f.window_end,
                    "rows": f.rows, "bytes": f.bytes, "table_name": f.table_name,
                })  # fmt: skip
            return len(gone)

        return self._db.transaction(body)


def _incomplete_message(status: WindowStatus) -> str:
    window = f"[{status.start.isoformat()}, {status.end.isoformat()})"
    if status.partitions == 0:
        return f"window {window} of lineage {status.lineage_id} is not complete: no partition covers it (bootstrap first)"
    detail = "; ".join(
        f"{state}: {', '.join(tokens[:5])}{' ...' if len(tokens) > 5 else ''}" for state, tokens in status.pending.items()
    )
    return (
        f"window {window} of lineage {status.lineage_id} is not complete: "
        f"{status.pending_count} of {status.partitions} partitions pending ({detail})"
    )
