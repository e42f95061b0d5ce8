"""Store part for batched transitions: land many claimed tokens, or renew their leases, in one round trip each."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from sqlalchemy.engine import Connection, Row

from spanner_cdc.lineage import rules
from spanner_cdc.model.records import ChildPartitionsRecord, PartitionEventRecord, PartitionStartRecord
from spanner_cdc.store.base import StoreBase
from spanner_cdc.store.batch_sql import ANY_ATTEMPT_RUNNING, LOCK_CREATED_CHILDREN_OF, RENEW_MANY
from spanner_cdc.store.functions import LAND_MANY_FUNCTION
from spanner_cdc.store.models import BatchResult, Claim, Completion, LeaseLost
from spanner_cdc.store.transition_sql import (
    INSERT_CHILDREN,
    INSERT_EDGES,
    INSERT_MOVES,
    INSERT_STARTED,
    LEASE_HOLDER,
    PROMOTE,
)
from spanner_cdc.times import utc

log = logging.getLogger(__name__)


def _one_lineage(claims: Sequence[Claim]) -> int:
    lineages = {claim.lineage_id for claim in claims}
    if len(lineages) != 1:
        raise ValueError(f"a batch covers one lineage, got lineages {sorted(lineages)}")
    tokens = [claim.token for claim in claims]
    if len(set(tokens)) != len(tokens):
        raise ValueError("a batch names each token at most once")
    return lineages.pop()


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: datetime | None, name: str, seen: dict[datetime, int]) -> int | None:
    """Microseconds since the epoch: exact, and ~7x cheaper to send than an ISO text (see batch_sql.LAND_MANY).

    `seen` keeps those already computed in this batch (its window bounds recur in every file): a lookup is a
    quarter of the arithmetic. A naive value never equals an aware one, so it is never found there.
    """
    if value is None:
        return None
    micros = seen.get(value)
    if micros is None:
        try:
            micros = seen[value] = (value - EPOCH) // rules.ONE_MICROSECOND
        except TypeError:
            raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value.isoformat()}") from None
    return micros


def _land_params(lineage_id: int, items: Sequence[Completion]) -> dict[str, object]:
    """The completions and their files as two JSON arrays; each file checked to belong to its own token."""
    batch: list[dict[str, object]] = []
    manifest: list[dict[str, object]] = []
    seen: dict[datetime, int] = {}
    for item in items:
        claim = item.claim
        rules.require_utc(item.watermark, "watermark")
        for file in item.files:
            if file.token != claim.token:
                raise ValueError(f"manifest file {file.path} belongs to token {file.token}, not {claim.token}")
        # a path given twice keeps its last entry (upsert by path)
        unique = list({file.path: file for file in item.files}.values())
        default_start = _micros(item.window_start, "window_start", seen)
        default_end = _micros(item.window_end, "window_end", seen)
        manifest += [
            {
                "token": f.token, "path": f.path, "range_start": _micros(f.range_start, "range_start", seen),
                "range_end": _micros(f.range_end, "range_end", seen),
                "window_start": default_start if f.window_start is None else _micros(f.window_start, "window_start", seen),
                "window_end": default_end if f.window_end is None else _micros(f.window_end, "window_end", seen),
                "rows": f.rows, "bytes": f.bytes, "table_name": f.table_name,
            }
            for f in unique
        ]  # fmt: skip
        end = min((r.start_timestamp for r in item.children), default=item.watermark + rules.ONE_MICROSECOND)
        batch.append(
            {
                "token": claim.token, "owner": claim.owner, "attempt": claim.attempt,
                "watermark": _micros(item.watermark, "watermark", seen), "finished": item.finished,
                "partition_end": _micros(end, "child partitions start_timestamp", seen),
                "records": item.records, "files": len(unique), "grp": item.group or claim.token,
            }
        )  # fmt: skip
    # msgspec writes the same JSON several times faster than json.dumps; text, so the driver sends no bytea
    encode = msgspec.json.encode
    return {"lineage_id": lineage_id, "batch": encode(batch).decode(), "manifest": encode(manifest).decode()}


def lease_lost(conn: Connection, claim: Claim, action: str) -> LeaseLost:
    """The error for a claim that no longer holds its token, saying who holds it now."""
    row = conn.execute(LEASE_HOLDER, {"lineage_id": claim.lineage_id, "token": claim.token}).one_or_none()
    now = (
        "unknown to the lineage"
        if row is None
        else f"now {row.state}, attempt {row.attempts}, owner {row.lease_owner}"
    )
    return LeaseLost(
        f"cannot {action} token {claim.token}: attempt {claim.attempt} of {claim.owner} no longer holds it ({now}); "
        "its lease expired or its liveness lock was lost, and the token was reclaimed or released"
    )


def children_of(token: str, records: Sequence[ChildPartitionsRecord]) -> list[tuple[str, datetime, tuple[str, ...]]]:
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


class BatchTransitions(StoreBase):
    def complete_many(self, items: Sequence[Completion]) -> BatchResult:
        """Commit many landed ranges of one lineage in one transaction and a fixed number of statements.

        Each token is its own compare-and-set, as with `complete`: a token whose claim was lost is left
        untouched (with its files and children) and reported in `lost`; the others land, but for those of the same
        `group` (tokens whose rows share a file), which are left untouched too and reported in `held_back`. Children of the
        landed tokens are inserted once, and a child is promoted once all its parents are finished.
        """
        if not items:
            return BatchResult((), (), ())
        lineage_id = _one_lineage([item.claim for item in items])
        params = _land_params(lineage_id, items)
        if not any(item.finished or item.children or item.started or item.moves for item in items):
            return self._land_only(items, params)

        def body(conn: Connection) -> BatchResult:
            landed = set(conn.execute(LAND_MANY_FUNCTION.call, params).scalars().all())
            done = [item for item in items if item.claim.token in landed]
            kids = sorted(
                {child for item in done for child in children_of(item.claim.token, item.children)},
                key=lambda child: (child[0], child[2]),
            )
            if kids:
                self._insert_children(conn, lineage_id, kids)
            promoted: list[str] = _insert_started_and_moves(conn, lineage_id, done)
            finished = sorted(item.claim.token for item in done if item.finished)
            if finished:
                locked = conn.execute(LOCK_CREATED_CHILDREN_OF, {"lineage_id": lineage_id, "parents": finished})
                candidates = list(locked.scalars().all())
                if candidates:
                    rows = conn.execute(PROMOTE, {"lineage_id": lineage_id, "tokens": candidates})
                    promoted = sorted([*promoted, *rows.scalars().all()])
            lost, held = _not_landed(conn, items, landed)
            return BatchResult(tuple(sorted(landed)), lost, tuple(promoted), held)

        result = self._db.transaction(body, batch=True)
        if result.promoted:
            log.debug("lineage %s: batch of %d finished, promoted %s", lineage_id, len(items), result.promoted)
        return result

    def _land_only(self, items: Sequence[Completion], params: dict[str, object]) -> BatchResult:
        """A batch that finishes nothing and announces no partition is LAND_MANY alone: one statement, its own
        transaction (one round trip). Who holds a lost token now is asked afterwards: it was never ours."""
        landed = set(self._db.statement(lambda conn: conn.execute(LAND_MANY_FUNCTION.call, params).scalars().all()))
        lost: tuple[LeaseLost, ...] = ()
        held: tuple[str, ...] = ()
        if len(landed) < len(items):
            lost, held = self._db.transaction(lambda conn: _not_landed(conn, items, landed))
        return BatchResult(tuple(sorted(landed)), lost, (), held)

    @staticmethod
    def _insert_children(
        conn: Connection, lineage_id: int, kids: Sequence[tuple[str, datetime, tuple[str, ...]]]
    ) -> None:
        # Two parents of one merge child in one batch announce it twice: the first start wins, as in `complete`.
        starts: dict[str, datetime] = {}
        for token, start, _ in kids:
            starts.setdefault(token, start)
        conn.execute(
            INSERT_CHILDREN,
            {"lineage_id": lineage_id, "tokens": list(starts), "starts": list(starts.values())},
        )
        edges = sorted({(token, parent) for token, _, parents in kids for parent in parents})
        conn.execute(
            INSERT_EDGES,
            {"lineage_id": lineage_id, "children": [c for c, _ in edges], "parents": [p for _, p in edges]},
        )

    def any_attempt_running(self, lineage_id: int, attempts: Sequence[tuple[str, int]]) -> bool:
        """Whether any of these (token, attempt) is still RUNNING: an attempt that may still commit what it wrote."""
        if not attempts:
            return False
        params = {"lineage_id": lineage_id, "tokens": [t for t, _ in attempts], "attempts": [a for _, a in attempts]}
        return bool(self._db.statement(lambda conn: conn.execute(ANY_ATTEMPT_RUNNING, params).scalar()))

    def renew_many(self, claims: Sequence[Claim], lease: timedelta) -> tuple[list[Claim], list[Claim]]:
        """Extend many held leases in one statement: (renewed claims with their new expiry, claims no longer ours)."""
        if not claims:
            return [], []
        lineage_id = _one_lineage(claims)
        params = {
            "lineage_id": lineage_id,
            "tokens": [c.token for c in claims],
            "owners": [c.owner for c in claims],
            "attempts": [c.attempt for c in claims],
            "lease": lease,
        }
        rows: Sequence[Row[Any]] = self._db.statement(lambda conn: conn.execute(RENEW_MANY, params).all())
        expires = {row.token: utc(row.lease_expires_at) for row in rows}
        renewed = [
            Claim(c.lineage_id, c.token, c.partition_start, c.watermark, c.owner, c.attempt, expires[c.token])
            for c in claims
            if c.token in expires
        ]
        return renewed, [c for c in claims if c.token not in expires]


def _not_landed(conn: Connection, items: Sequence[Completion], landed: set[str]) -> tuple[tuple[LeaseLost, ...], tuple[str, ...]]:
    """The batch's tokens that did not land: those whose claim was lost (with who holds them now), and those held
    back, still ours, because a token of their group lost its claim (their caller fails them for a retry)."""
    lost: list[LeaseLost] = []
    held: list[str] = []
    for item in items:
        claim = item.claim
        if claim.token in landed:
            continue
        row = conn.execute(LEASE_HOLDER, {"lineage_id": claim.lineage_id, "token": claim.token}).one_or_none()
        if row is not None and (row.state, row.lease_owner, row.attempts) == ("RUNNING", claim.owner, claim.attempt):
            held.append(claim.token)
        else:
            lost.append(lease_lost(conn, claim, "complete"))
    return tuple(lost), tuple(held)


def _insert_started_and_moves(conn: Connection, lineage_id: int, done: Sequence[Completion]) -> list[str]:
    """MUTABLE_KEY_RANGE: the partitions the landed tokens announced, READY if new (returned), and their moves as edges."""
    started = _started([record for item in done for record in item.started])
    ready: list[str] = []
    if started["tokens"]:
        ready = list(conn.execute(INSERT_STARTED, {"lineage_id": lineage_id, **started}).scalars().all())
    moves = _move_edges([(item.claim.token, record) for item in done for record in item.moves])
    if moves["sources"]:
        conn.execute(INSERT_MOVES, {"lineage_id": lineage_id, **moves})
    return sorted(ready)


def _started(records: Sequence[PartitionStartRecord]) -> dict[str, list[Any]]:
    """Started partitions as (tokens, starts) arrays, sorted by token; a token announced twice keeps its earliest start."""
    found: dict[str, datetime] = {}
    for record in records:
        rules.require_utc(record.start_timestamp, "partition start_timestamp")
        for token in record.partition_tokens:
            found[token] = min(found.get(token, record.start_timestamp), record.start_timestamp)
    tokens = sorted(found)
    return {"tokens": tokens, "starts": [found[t] for t in tokens]}


def _move_edges(events: Sequence[tuple[str, PartitionEventRecord]]) -> dict[str, list[Any]]:
    """(source, destination, time) of every move named by an event record of the partition it was read from."""
    edges = sorted(
        {(source, token, r.commit_timestamp) for token, r in events for source in r.move_in_from}
        | {(token, destination, r.commit_timestamp) for token, r in events for destination in r.move_out_to}
    )
    return {"sources": [e[0] for e in edges], "destinations": [e[1] for e in edges], "ats": [e[2] for e in edges]}
