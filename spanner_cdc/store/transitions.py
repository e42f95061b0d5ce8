"""Store part for the partition state machine: claim, schedule, renew, expire, complete, fail."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from spanner_cdc.records import ChildPartitionsRecord
from spanner_cdc.store import rules
from spanner_cdc.store.models import Claim, LeaseLost, ManifestFile
from spanner_cdc.store.rows import StoreBase, utc, utc_required

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 4000

# The window filter of claim and schedule is rules.needs_read in SQL.
CLAIM = """
WITH picked AS (
    SELECT token, attempts AS previous_attempt
    FROM cdc_partitions
    WHERE lineage_id = :lineage_id AND partition_start <= :last AND (watermark IS NULL OR watermark < :last)
      AND (state = 'READY'
           OR (state = 'SCHEDULED' AND token = ANY(CAST(:named AS text[])))
           OR (state IN ('SCHEDULED', 'RUNNING') AND lease_expires_at < clock_timestamp()))
      {only_named}
    ORDER BY partition_start, token
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE cdc_partitions p
    SET state = 'RUNNING', running_at = clock_timestamp(), lease_owner = :owner,
        lease_expires_at = clock_timestamp() + :lease, attempts = p.attempts + 1
    FROM picked
    WHERE p.lineage_id = :lineage_id AND p.token = picked.token
    RETURNING p.token, p.partition_start, p.watermark, p.attempts, p.lease_expires_at, picked.previous_attempt
), expired AS (
    UPDATE cdc_attempts a
    SET outcome = 'EXPIRED', ended_at = clock_timestamp(), error = 'lease expired; reclaimed by ' || :owner
    FROM claimed c
    WHERE a.lineage_id = :lineage_id AND a.token = c.token AND a.attempt = c.previous_attempt
      AND a.outcome = 'RUNNING'
), recorded AS (
    INSERT INTO cdc_attempts (lineage_id, token, attempt, owner, window_end, read_from, watermark_before)
    SELECT :lineage_id, token, attempts, :owner, :window_end,
           greatest(watermark + interval '1 microsecond', partition_start), watermark
    FROM claimed
)
SELECT token, partition_start, watermark, attempts, lease_expires_at FROM claimed ORDER BY partition_start, token
"""
SCHEDULE = sa.text(
    """
    WITH picked AS (
        SELECT token FROM cdc_partitions
        WHERE lineage_id = :lineage_id AND state = 'READY' AND partition_start <= :last
          AND (watermark IS NULL OR watermark < :last)
        ORDER BY partition_start, token
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE cdc_partitions p
    SET state = 'SCHEDULED', scheduled_at = clock_timestamp(), lease_owner = :owner,
        lease_expires_at = clock_timestamp() + :lease
    FROM picked WHERE p.lineage_id = :lineage_id AND p.token = picked.token
    RETURNING p.token
    """
)
OURS = "lineage_id = :lineage_id AND token = :token AND state = 'RUNNING' AND lease_owner = :owner AND attempts = :attempt"
RENEW = sa.text(
    f"UPDATE cdc_partitions SET lease_expires_at = clock_timestamp() + :lease WHERE {OURS} RETURNING lease_expires_at"
)
EXPIRE = sa.text(
    """
    WITH stale AS (
        SELECT token FROM cdc_partitions
        WHERE lineage_id = :lineage_id AND state IN ('SCHEDULED', 'RUNNING') AND lease_expires_at < clock_timestamp()
        FOR UPDATE SKIP LOCKED
    ), released AS (
        UPDATE cdc_partitions p
        SET state = 'READY', ready_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL
        FROM stale WHERE p.lineage_id = :lineage_id AND p.token = stale.token
        RETURNING p.token, p.attempts
    ), closed AS (
        UPDATE cdc_attempts a SET outcome = 'EXPIRED', ended_at = clock_timestamp(), error = 'lease expired'
        FROM released r
        WHERE a.lineage_id = :lineage_id AND a.token = r.token AND a.attempt = r.attempts AND a.outcome = 'RUNNING'
    )
    SELECT count(*) FROM released
    """
)
FINISH_OR_RELEASE = sa.text(
    f"""
    UPDATE cdc_partitions
    SET watermark = greatest(watermark, :watermark), state = :state,
        ready_at = CASE WHEN :finished THEN ready_at ELSE clock_timestamp() END,
        finished_at = CASE WHEN :finished THEN clock_timestamp() ELSE finished_at END,
        partition_end = CASE WHEN :finished THEN :end ELSE partition_end END,
        lease_owner = NULL, lease_expires_at = NULL, last_error = NULL
    WHERE {OURS}
    RETURNING watermark
    """
)
UPSERT_MANIFEST = sa.text(
    """
    INSERT INTO cdc_manifest (lineage_id, path, token, range_start, range_end, window_start, window_end,
                              rows, bytes, table_name, attempt)
    VALUES (:lineage_id, :path, :token, :range_start, :range_end, :window_start, :window_end,
            :rows, :bytes, :table_name, :attempt)
    ON CONFLICT (lineage_id, path) DO UPDATE
    SET token = EXCLUDED.token, range_start = EXCLUDED.range_start, range_end = EXCLUDED.range_end,
        window_start = EXCLUDED.window_start, window_end = EXCLUDED.window_end, rows = EXCLUDED.rows,
        bytes = EXCLUDED.bytes, table_name = EXCLUDED.table_name, attempt = EXCLUDED.attempt,
        published_at = clock_timestamp()
    """
)
INSERT_CHILD = sa.text(
    "INSERT INTO cdc_partitions (lineage_id, token, partition_start, state) "
    "VALUES (:lineage_id, :token, :start, 'CREATED') ON CONFLICT (lineage_id, token) DO NOTHING"
)
INSERT_EDGE = sa.text(
    "INSERT INTO cdc_partition_parents (lineage_id, child_token, parent_token) "
    "VALUES (:lineage_id, :child, :parent) ON CONFLICT DO NOTHING"
)
CLOSE_ATTEMPT = sa.text(
    """
    UPDATE cdc_attempts
    SET outcome = :outcome, ended_at = clock_timestamp(), watermark_after = :watermark_after,
        finished = :finished, records = :records, files = :files, error = :error
    WHERE lineage_id = :lineage_id AND token = :token AND attempt = :attempt
    """
)
# Locking the children first serialises the parents' transactions on them: whichever locks last
# sees every other parent's FINISHED mark (READ COMMITTED takes a new snapshot per statement).
LOCK_CREATED_CHILDREN = sa.text(
    """
    SELECT c.token FROM cdc_partitions c
    JOIN cdc_partition_parents e ON e.lineage_id = c.lineage_id AND e.child_token = c.token
    WHERE e.lineage_id = :lineage_id AND e.parent_token = :token AND c.state = 'CREATED'
    ORDER BY c.token
    FOR UPDATE OF c
    """
)
PROMOTE = sa.text(
    """
    UPDATE cdc_partitions c SET state = 'READY', ready_at = clock_timestamp()
    WHERE c.lineage_id = :lineage_id AND c.token = ANY(CAST(:tokens AS text[])) AND c.state = 'CREATED'
      AND NOT EXISTS (
          SELECT 1 FROM cdc_partition_parents e
          LEFT JOIN cdc_partitions p ON p.lineage_id = e.lineage_id AND p.token = e.parent_token
          WHERE e.lineage_id = c.lineage_id AND e.child_token = c.token AND p.state IS DISTINCT FROM 'FINISHED')
    RETURNING c.token
    """
)
RELEASE_FAILED = sa.text(
    f"""
    UPDATE cdc_partitions
    SET state = 'READY', ready_at = clock_timestamp(), lease_owner = NULL, lease_expires_at = NULL,
        last_error = :error
    WHERE {OURS}
    RETURNING token
    """
)


def _claim_key(claim: Claim) -> dict[str, object]:
    return {"lineage_id": claim.lineage_id, "token": claim.token, "owner": claim.owner, "attempt": claim.attempt}


class PartitionTransitions(StoreBase):
    def claim(
        self,
        lineage_id: int,
        *,
        window_end: datetime,
        owner: str,
        lease: timedelta,
        limit: int | None = None,
        tokens: Sequence[str] | None = None,
    ) -> list[Claim]:
        """Lease tokens that still have part of the window to read; never one token to two live workers."""
        rules.require_utc(window_end, "window_end")
        if limit is not None and limit < 1:
            return []
        named = sorted(set(tokens)) if tokens is not None else []
        statement = sa.text(CLAIM.format(only_named="AND token = ANY(CAST(:named AS text[]))" if tokens is not None else ""))
        params = {
            "lineage_id": lineage_id,
            "last": rules.inclusive_end(window_end),
            "window_end": window_end,
            "named": named,
            "owner": owner,
            "lease": lease,
            "limit": limit,
        }
        rows = self._db.transaction(lambda conn: conn.execute(statement, params).all())
        return [
            Claim(
                lineage_id=lineage_id,
                token=r.token,
                partition_start=utc_required(r.partition_start),
                watermark=utc(r.watermark),
                owner=owner,
                attempt=r.attempts,
                lease_expires_at=utc_required(r.lease_expires_at),
            )
            for r in rows
        ]

    def schedule(
        self, lineage_id: int, *, window_end: datetime, owner: str, lease: timedelta, limit: int | None = None
    ) -> list[str]:
        """READY -> SCHEDULED for tokens handed to tasks; `claim(tokens=...)` by the task makes them RUNNING."""
        rules.require_utc(window_end, "window_end")
        params = {
            "lineage_id": lineage_id,
            "last": rules.inclusive_end(window_end),
            "owner": owner,
            "lease": lease,
            "limit": limit,
        }
        rows = self._db.transaction(lambda conn: conn.execute(SCHEDULE, params).all())
        return sorted(r.token for r in rows)

    def renew(self, claim: Claim, lease: timedelta) -> Claim:
        """Extend a held lease; LeaseLost when the token is no longer ours."""

        def body(conn: Connection) -> datetime:
            expires = conn.execute(RENEW, {**_claim_key(claim), "lease": lease}).scalar_one_or_none()
            if expires is None:
                raise self._lease_lost(conn, claim, "renew")
            return utc_required(expires)

        expires_at = self._db.transaction(body)
        return Claim(
            claim.lineage_id, claim.token, claim.partition_start, claim.watermark, claim.owner, claim.attempt, expires_at
        )

    def expire_leases(self, lineage_id: int) -> int:
        """SCHEDULED / RUNNING tokens whose lease has passed go back to READY; returns how many."""
        return int(self._db.transaction(lambda conn: conn.execute(EXPIRE, {"lineage_id": lineage_id}).scalar_one()))

    def complete(
        self,
        claim: Claim,
        *,
        watermark: datetime,
        finished: bool,
        children: Sequence[ChildPartitionsRecord] = (),
        files: Sequence[ManifestFile] = (),
        records: int = 0,
        window_start: datetime | None = None,
        window_end: datetime | None = None,
    ) -> list[str]:
        """Commit a landed range in one transaction; return the children this made READY."""
        rules.require_utc(watermark, "watermark")
        for file in files:
            if file.token != claim.token:
                raise ValueError(f"manifest file {file.path} belongs to token {file.token}, not {claim.token}")
        new_children = _children_of(claim.token, children)
        end = min((record.start_timestamp for record in children), default=watermark + rules.ONE_MICROSECOND)
        key = _claim_key(claim)

        def body(conn: Connection) -> list[str]:
            state = rules.State.FINISHED if finished else rules.State.READY
            landed = conn.execute(
                FINISH_OR_RELEASE, {**key, "watermark": watermark, "state": str(state), "finished": finished, "end": end}
            ).scalar_one_or_none()
            if landed is None:
                raise self._lease_lost(conn, claim, "complete")
            if files:
                conn.execute(UPSERT_MANIFEST, [_manifest_params(claim, f, window_start, window_end) for f in files])
            if new_children:
                conn.execute(
                    INSERT_CHILD,
                    [{"lineage_id": claim.lineage_id, "token": t, "start": s} for t, s, _ in new_children],
                )
                conn.execute(
                    INSERT_EDGE,
                    [
                        {"lineage_id": claim.lineage_id, "child": t, "parent": parent}
                        for t, _, parents in new_children
                        for parent in parents
                    ],
                )
            conn.execute(
                CLOSE_ATTEMPT,
                {
                    **key,
                    "outcome": "COMPLETED",
                    "watermark_after": landed,
                    "finished": finished,
                    "records": records,
                    "files": len(files),
                    "error": None,
                },
            )
            if not finished:
                return []
            candidates = conn.execute(LOCK_CREATED_CHILDREN, key).scalars().all()
            if not candidates:
                return []
            promoted = conn.execute(PROMOTE, {"lineage_id": claim.lineage_id, "tokens": list(candidates)})
            return sorted(promoted.scalars().all())

        promoted = self._db.transaction(body)
        if promoted:
            log.debug("lineage %s token %s: finished, promoted %s", claim.lineage_id, claim.token, promoted)
        return promoted

    def fail(self, claim: Claim, error: str) -> None:
        """Record a failed attempt with its error, release the lease and make the token READY again."""
        error = error[:MAX_ERROR_CHARS]

        def body(conn: Connection) -> None:
            if conn.execute(RELEASE_FAILED, {**_claim_key(claim), "error": error}).scalar_one_or_none() is None:
                raise self._lease_lost(conn, claim, "fail")
            conn.execute(
                CLOSE_ATTEMPT,
                {
                    **_claim_key(claim),
                    "outcome": "FAILED",
                    "watermark_after": None,
                    "finished": False,
                    "records": 0,
                    "files": 0,
                    "error": error,
                },
            )

        self._db.transaction(body)

    def _lease_lost(self, conn: Connection, claim: Claim, action: str) -> LeaseLost:
        row = conn.execute(
            sa.text(
                "SELECT state, lease_owner, attempts FROM cdc_partitions WHERE lineage_id = :lineage_id AND token = :token"
            ),
            {"lineage_id": claim.lineage_id, "token": claim.token},
        ).one_or_none()
        now = "unknown to the lineage" if row is None else f"now {row.state}, attempt {row.attempts}, owner {row.lease_owner}"
        return LeaseLost(
            f"cannot {action} token {claim.token}: attempt {claim.attempt} of {claim.owner} no longer holds it ({now}); "
            "its lease expired and the token was reclaimed or released"
        )


def _children_of(token: str, records: Sequence[ChildPartitionsRecord]) -> list[tuple[str, datetime, tuple[str, ...]]]:
    """(child token, start, parents) sorted by token, so concurrent parents lock children in one order."""
    found: dict[str, tuple[datetime, set[str]]] = {}
    for record in records:
        rules.require_utc(record.start_timestamp, "child partitions start_timestamp")
        for child in record.child_partitions:
            start, parents = found.setdefault(child.token, (record.start_timestamp, set()))
            # the announcing partition is a parent even when the record lists only the others
            parents.update(p for p in child.parent_partition_tokens if p)
            parents.add(token)
    return [(t, start, tuple(sorted(parents))) for t, (start, parents) in sorted(found.items())]


def _manifest_params(
    claim: Claim, file: ManifestFile, window_start: datetime | None, window_end: datetime | None
) -> dict[str, object]:
    return {
        "lineage_id": claim.lineage_id,
        "path": file.path,
        "token": file.token,
        "range_start": file.range_start,
        "range_end": file.range_end,
        "window_start": file.window_start or window_start,
        "window_end": file.window_end or window_end,
        "rows": file.rows,
        "bytes": file.bytes,
        "table_name": file.table_name,
        "attempt": claim.attempt,
    }
