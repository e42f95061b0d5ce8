"""Store part for the partition state machine: claim, schedule, renew, expire, complete, fail."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy.engine import Connection

from spanner_cdc.lineage import rules
from spanner_cdc.model.records import ChildPartitionsRecord, PartitionEventRecord, PartitionStartRecord
from spanner_cdc.store.batches import BatchTransitions, lease_lost
from spanner_cdc.store.functions import CLAIM_ANY_FUNCTION, CLAIM_NAMED_FUNCTION
from spanner_cdc.store.liveness import Liveness
from spanner_cdc.store.models import Claim, Completion, ManifestFile
from spanner_cdc.store.transition_sql import EXPIRE, FAIL, RENEW, SCHEDULE
from spanner_cdc.times import utc, utc_or_none

log = logging.getLogger(__name__)
MAX_ERROR_CHARS = 4000


def _claim_key(claim: Claim) -> dict[str, object]:
    return {"lineage_id": claim.lineage_id, "token": claim.token, "owner": claim.owner, "attempt": claim.attempt}


class PartitionTransitions(BatchTransitions):
    _liveness: Liveness

    def claim(
        self,
        lineage_id: int,
        *,
        window_end: datetime,
        owner: str,
        lease: timedelta,
        limit: int | None = None,
        tokens: Sequence[str] | None = None,
        liveness: bool = True,
    ) -> list[Claim]:
        """Lease tokens that still have part of the window to read; never one token to two live workers.

        With `liveness`, the claims are also tied to the life of this store's `owner`: they become
        claimable at once when its process dies, or when the store closes while it still holds them.
        Without, only the lease frees them (for a pooler that does not keep sessions, e.g. PgBouncer
        in transaction mode, where a session lock means nothing).
        """
        rules.require_utc(window_end, "window_end")
        if limit is not None and limit < 1:
            return []
        named = sorted(set(tokens)) if tokens is not None else []
        statement = (CLAIM_ANY_FUNCTION if tokens is None else CLAIM_NAMED_FUNCTION).call
        params = {
            "lineage_id": lineage_id,
            "last": rules.inclusive_end(window_end),
            "window_end": window_end,
            "named": named,
            "owner": owner,
            "lease": lease,
            "limit": limit,
            # locked before the claim commits: a claim never names a key whose lock is free
            "liveness_key": self._liveness.key(owner) if liveness else None,
        }

        # one statement (claims, their attempts, the attempts taken over), planned once per session (store.functions):
        # its own transaction, one round trip
        rows = self._db.statement(lambda conn: conn.execute(statement, params).fetchall())
        return [
            Claim(lineage_id, token, utc(start), utc_or_none(watermark), owner, attempts, utc(expires))
            for token, start, watermark, attempts, expires, *_ in rows
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

        return sorted(r.token for r in self._db.statement(lambda conn: conn.execute(SCHEDULE, params).all()))

    def renew(self, claim: Claim, lease: timedelta) -> Claim:
        """Extend a held lease; LeaseLost when the token is no longer ours."""

        def body(conn: Connection) -> datetime:
            expires = conn.execute(RENEW, {**_claim_key(claim), "lease": lease}).scalar_one_or_none()
            if expires is None:
                raise lease_lost(conn, claim, "renew")
            return utc(expires)

        expires_at = self._db.transaction(body)
        return Claim(
            claim.lineage_id, claim.token, claim.partition_start, claim.watermark, claim.owner, claim.attempt, expires_at
        )

    def expire_leases(self, lineage_id: int) -> int:
        """SCHEDULED / RUNNING tokens whose lease has passed, and RUNNING ones of dead runs, go back to READY."""
        return int(self._db.transaction(lambda conn: conn.execute(EXPIRE, {"lineage_id": lineage_id}).scalar_one()))

    def keep_alive(self) -> None:
        """Re-take the liveness locks of this store's owners if their connection died (a Postgres restart)."""
        self._liveness.keep_alive()

    def release_owner(self, owner: str) -> None:
        """Drop `owner`'s liveness lock: whatever it still holds becomes claimable at once."""
        self._liveness.release(owner)

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
        started: Sequence[PartitionStartRecord] = (),
        moves: Sequence[PartitionEventRecord] = (),
    ) -> list[str]:
        """Commit a landed range in one transaction; return the children (and, MUTABLE_KEY_RANGE, the started
        partitions) this made READY, as a batch of one. `moves` are kept as edges with their time."""
        item = Completion(
            claim, watermark, finished, tuple(children), tuple(files), records, window_start, window_end,
            tuple(started), tuple(moves),
        )  # fmt: skip
        result = self.complete_many([item])
        if result.lost:
            raise result.lost[0]
        return list(result.promoted)

    def fail(self, claim: Claim, error: str) -> None:
        """Record a failed attempt with its error, release the lease and make the token READY again."""
        params = {**_claim_key(claim), "error": error[:MAX_ERROR_CHARS]}

        def body(conn: Connection) -> None:
            if conn.execute(FAIL, params).scalar_one_or_none() is None:
                raise lease_lost(conn, claim, "fail")

        self._db.transaction(body)

