"""Health rules of a lineage: each partition's lag behind the newest window, which partitions look stuck, freshness and retention headroom."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from spanner_cdc.names import LIVE_NAMESPACE
from spanner_cdc.ui.view import ONE_MICROSECOND, STATES, PartitionView, StreamView, WindowView

LEASED_STATES = ("SCHEDULED", "RUNNING")


@dataclass(frozen=True)
class StuckPartition:
    token: str
    state: str
    reason: str


def lag_seconds(partition: PartitionView, view: StreamView) -> float | None:
    """How far the partition's watermark is behind the newest window's inclusive end (None: nothing to measure)."""
    newest = view.newest_window
    if newest is None or partition.state == "FINISHED":
        return None
    target = newest.end - ONE_MICROSECOND
    landed = partition.watermark or partition.start
    if landed is None:
        return None
    return max((target - landed).total_seconds(), 0.0)


def stuck(view: StreamView, now: datetime) -> list[StuckPartition]:
    """Leases that expired, partitions behind the start of the newest window, and partitions whose last try failed."""
    newest = view.newest_window
    found: list[StuckPartition] = []
    for p in sorted(view.partitions, key=lambda p: p.token):
        if p.state == "FINISHED":
            continue
        if p.state in LEASED_STATES and p.lease_expires_at is not None and p.lease_expires_at < now:
            owner = p.lease_owner or "unknown worker"
            found.append(StuckPartition(p.token, p.state, f"lease of {owner} expired at {p.lease_expires_at:%Y-%m-%d %H:%M:%S}"))
        # Alive partitions of a lineage should have landed everything before the newest window opened.
        landed = p.watermark or p.start
        if newest is not None and p.state != "CREATED" and landed is not None and landed < newest.start - ONE_MICROSECOND:
            behind = (newest.start - ONE_MICROSECOND - landed).total_seconds()
            found.append(StuckPartition(p.token, p.state, f"not advancing: {behind:.0f} s behind the newest window's start"))
        if p.last_error:
            found.append(StuckPartition(p.token, p.state, f"failing: attempt {p.attempts}: {p.last_error}"))
    return found


def freshness_seconds(view: StreamView, now: datetime) -> float | None:
    """How old the newest complete data is: now - the end of the newest complete window (None before one closes)."""
    complete = [w.end for w in view.windows if w.complete]
    return max((now - max(complete)).total_seconds(), 0.0) if complete else None


@dataclass(frozen=True)
class Freshness:
    """The live lineage's freshness against its schedule: `late` once the newest complete window ended more than two
    windows ago (the window after it has ended and had a whole window's time to close)."""

    seconds: float
    schedule_seconds: float

    @property
    def late(self) -> bool:
        return self.seconds > 2 * self.schedule_seconds

    @property
    def verdict(self) -> str:
        return "late" if self.late else "ok"


def freshness(view: StreamView, now: datetime) -> Freshness | None:
    """None before a window closes, and for a backfill (its range is in the past: no schedule to keep up with)."""
    fresh = freshness_seconds(view, now)
    newest = view.newest_window
    if fresh is None or newest is None or view.lineage.namespace != LIVE_NAMESPACE:
        return None
    return Freshness(fresh, (newest.end - newest.start).total_seconds())


@dataclass(frozen=True)
class Headroom:
    """How long the lineage may stay where it is before its oldest unread change leaves the stream's retention.

    `seconds` = retention_period - (now - low watermark): below 0, changes are already gone (the extract refuses
    the window); `threshold_seconds` is where the UI and the alert rules start to warn."""

    retention_seconds: float
    seconds: float
    threshold_seconds: float

    @property
    def warning(self) -> bool:
        return self.seconds < self.threshold_seconds


def headroom(view: StreamView, now: datetime, warning_share: float) -> Headroom | None:
    """The lineage's retention headroom (None until a plan recorded the stream's retention, once every partition
    finished, or for a backfill whose windows are all complete: nothing is left to read)."""
    retention = view.lineage.retention_period_s
    if retention is None or view.low_watermark is None:
        return None
    if view.lineage.namespace != LIVE_NAMESPACE and view.windows and all(w.complete for w in view.windows):
        return None
    left = retention - (now - view.low_watermark).total_seconds()
    return Headroom(float(retention), left, retention * warning_share)


def last_verified(view: StreamView) -> WindowView | None:
    """The newest window `spanner-cdc verify` checked, with its last result (`verify`): the one `/metrics` and the
    stream page report; None when no window of the lineage was verified."""
    verified = [w for w in view.windows if w.verify]
    return max(verified, key=lambda w: w.end) if verified else None


def state_counts(view: StreamView) -> dict[str, int]:
    """Partitions by state; FINISHED ones that retention folded (lineage_retention) still count."""
    counts = Counter(p.state for p in view.partitions)
    counts["FINISHED"] += view.folded_partitions
    return {state: counts.get(state, 0) for state in (*STATES, *sorted(set(counts) - set(STATES)))}


def parent_map(view: StreamView) -> dict[str, tuple[str, ...]]:
    """Parents of every known token, from the edges and both sides of each row; unknown tokens are left out."""
    known = {p.token for p in view.partitions}
    parents: dict[str, set[str]] = {p.token: {x for x in p.parents if x in known} for p in view.partitions}
    for p in view.partitions:
        for child in p.children:
            if child in known:
                parents[child].add(p.token)
    for parent, child in view.edges:
        if parent in known and child in known:
            parents[child].add(parent)
    return {token: tuple(sorted(ps)) for token, ps in parents.items()}


def splits_and_merges(
    view: StreamView, parents: dict[str, tuple[str, ...]] | None = None
) -> tuple[set[str], set[str]]:
    """Tokens that split (two or more children) and tokens born of a merge (two or more parents)."""
    parents = parent_map(view) if parents is None else parents
    children: Counter[str] = Counter(parent for ps in parents.values() for parent in ps)
    splits = {token for token, n in children.items() if n >= 2}
    merges = {token for token, ps in parents.items() if len(ps) >= 2}
    return splits, merges
