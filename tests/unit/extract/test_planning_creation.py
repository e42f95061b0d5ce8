"""A window that starts before the stream existed is refused as that, not as a start past the retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.api_core import exceptions as gexc

from spanner_cdc.errors import RetentionError
from spanner_cdc.extract.planning import root_partitions
from tests.unit.source.reader_fakes import FakeDatabase

# Google's emulator says the same for both causes: only its earliest readable time tells them apart
EMULATOR = (
    "Specified start_timestamp is too far in the past. Please specify a start_timestamp within the earliest read "
    "timestamp: {earliest}. Received start_timestamp: {start}."
)


def ask(start: datetime, earliest: datetime) -> str:
    said = EMULATOR.format(earliest=earliest.isoformat(), start=start.isoformat())
    db = FakeDatabase("GOOGLE_STANDARD_SQL", [], failures=[(0, gexc.OutOfRange(said))])
    with pytest.raises(RetentionError) as info:
        root_partitions(db, "Orders", dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=2000, at=start, retention=timedelta(days=1), namespace="live")
    return str(info.value)


def test_a_start_before_a_recent_creation_names_the_creation_time() -> None:
    created = datetime.now(UTC) - timedelta(minutes=30)
    message = ask(created - timedelta(hours=2), created)
    assert f"precedes change stream Orders's creation (Spanner: the stream was created at {created.isoformat()})" in message
    assert "retention" not in message


def test_a_start_past_the_retention_of_an_old_stream_is_the_retention() -> None:
    now = datetime.now(UTC)
    message = ask(now - timedelta(days=3), now - timedelta(days=1) + timedelta(seconds=1))
    assert "has left change stream Orders's retention period (1 day)" in message and "creation" not in message
