"""What a change stream query's OUT_OF_RANGE means: a start before the stream's creation, past its retention, or ahead."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from spanner_cdc.times import parse_rfc3339

CREATION, RETENTION, FUTURE, OTHER = "creation", "retention", "future", "other"
# Spanner (and Google's emulator) name the earliest start they accept: max(the stream's creation, now - retention).
# One this much later than the retention's edge is the stream's creation; the margin absorbs the clocks' skew.
CREATION_MARGIN = timedelta(minutes=5)
_EARLIEST = re.compile(
    r"earliest[a-z ]*?(?:timestamp|is)\W*(\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(?:\.\d+)?(?:[Zz]|[+-]\d\d:\d\d))", re.IGNORECASE
)
_CREATED = re.compile(r"\bcreat(?:ed|ion)\b", re.IGNORECASE)
_FUTURE = re.compile(r"\bfuture\b", re.IGNORECASE)
_HEARTBEAT = re.compile(r"heartbeat_milliseconds", re.IGNORECASE)


@dataclass(frozen=True)
class OutOfRange:
    cause: str  # CREATION, RETENTION, FUTURE or OTHER
    earliest: datetime | None  # the earliest start Spanner accepts, when its message names it (CREATION: the creation)


def spanner_now(database: Any, dialect: str) -> datetime | None:
    """Spanner's clock (CURRENT_TIMESTAMP of a strong read), which the retention is measured by: the local server's
    may run ahead of this machine's. None when the server cannot say."""
    from google.api_core import exceptions as gexc

    from spanner_cdc.times import utc

    sql = "SELECT now()" if dialect == "POSTGRESQL" else "SELECT CURRENT_TIMESTAMP()"
    try:
        with database.snapshot() as snapshot:
            ((now,),) = list(snapshot.execute_sql(sql))
    except (gexc.GoogleAPICallError, ValueError):
        return None
    return utc(now, assume_utc=True) if isinstance(now, datetime) else None


def classify(message: str, retention: timedelta | None = None, now: datetime | None = None) -> OutOfRange:
    """The cause of an OUT_OF_RANGE from Spanner's message; with the stream's retention and Spanner's time, an
    earliest readable time well inside the retention is the stream's creation even when the message does not say so
    (without Spanner's time, `now` is this machine's)."""
    match = _EARLIEST.search(message)
    earliest = None
    if match:
        try:
            earliest = parse_rfc3339(match.group(1))
        except ValueError:
            earliest = None
    if _HEARTBEAT.search(message):  # Google's emulator answers a heartbeat_milliseconds out of its range so
        return OutOfRange(OTHER, None)
    if _FUTURE.search(message):
        return OutOfRange(FUTURE, earliest)
    if _CREATED.search(message):
        return OutOfRange(CREATION, earliest)
    if earliest is not None and retention is not None and earliest > (now or datetime.now(UTC)) - retention + CREATION_MARGIN:
        return OutOfRange(CREATION, earliest)
    return OutOfRange(RETENTION, earliest)
