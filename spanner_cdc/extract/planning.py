"""Where a window's extract may start: the stream's creation, its retention, and the root partitions at that time."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from spanner_cdc.errors import RetentionError, UsageError, setting
from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord, PartitionStartRecord
from spanner_cdc.source.out_of_range import CREATION, classify, spanner_now
from spanner_cdc.times import spelled_duration

log = logging.getLogger(__name__)


def effective_start(stream: str, created_at: datetime | None, start: datetime, end: datetime) -> datetime:
    """A window that begins before the stream existed starts at its creation; one that ends before is refused."""
    if created_at is None or created_at <= start:
        return start
    if created_at >= end:
        raise UsageError(
            f"window [{start.isoformat()}, {end.isoformat()}) ends before change stream {stream} was created "
            f"({created_at.isoformat()}): nothing to extract; choose a window after its creation"
        )
    return created_at



def retention_message(stream: str, start: datetime, retention: timedelta, namespace: str, detail: str = "") -> str:
    return (
        f"window start {start.isoformat()} has left change stream {stream}'s retention period "
        f"({spelled_duration(retention)}){detail}: "
        "those changes are gone from Spanner and cannot be extracted. Extract windows that start within the "
        f"retention period (for a lineage that fell behind, into a {setting('namespace')} other than {namespace!r}, e.g. a "
        "backfill), or lengthen the stream's retention_period so this does not happen again"
    )


def creation_message(stream: str, start: datetime, created_at: datetime | None) -> str:
    when = f" at {created_at.isoformat()}" if created_at else " after it"
    return (
        f"window start {start.isoformat()} precedes change stream {stream}'s creation (Spanner: the stream was created{when}): "
        "there are no changes of it before then. Extract windows that start at or after the stream's creation "
        "(a later start_date of the stream, or a later window)"
    )


def check_retention(stream: str, start: datetime, retention: timedelta, namespace: str, *, now: datetime | None = None) -> None:
    """Refuse up front by this machine's clock; `root_partitions` asks Spanner, whose clock decides."""
    oldest = (now or datetime.now(UTC)) - retention
    if start < oldest:
        detail = f"; the oldest readable change is at about {oldest.isoformat()}"
        raise RetentionError(retention_message(stream, start, retention, namespace, detail))


def root_partitions(
    database: Any, stream: str, *, dialect: str, heartbeat_ms: int, at: datetime, retention: timedelta, namespace: str
) -> tuple[datetime, list[ChildPartition]]:
    """The NULL-token query at `at`: the partitions alive then (and proof that `at` is still readable)."""
    from spanner_cdc.source.reader import PartitionReader

    reader = PartitionReader(database, stream, dialect=dialect, heartbeat_ms=heartbeat_ms)
    try:
        records = [r for r in reader.read(None, at, at) if isinstance(r, ChildPartitionsRecord | PartitionStartRecord)]
    except RetentionError as exc:
        found = classify(exc.spanner_message, retention, spanner_now(database, dialect))
        if found.cause == CREATION:
            raise RetentionError(creation_message(stream, at, found.earliest)) from None
        detail = " (Spanner answered OUT_OF_RANGE)"
        raise RetentionError(retention_message(stream, at, retention, namespace, detail)) from None
    # a MUTABLE_KEY_RANGE stream answers with a partition start record: its partitions have no parents either
    roots = [
        child
        for record in records
        for child in (
            record.child_partitions
            if isinstance(record, ChildPartitionsRecord)
            else tuple(ChildPartition(token, ()) for token in record.partition_tokens)
        )
    ]
    return min((r.timestamp for r in records), default=at), roots
