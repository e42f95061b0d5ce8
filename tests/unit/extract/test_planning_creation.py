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


def ask(monkeypatch: pytest.MonkeyPatch, start: datetime, earliest: datetime, spanner_now: datetime | None = None) -> str:
    """The plan's root query refused as Spanner says; Spanner's clock is this machine's unless given."""
    monkeypatch.setattr("spanner_cdc.extract.planning.spanner_now", lambda database, dialect: spanner_now or datetime.now(UTC))
    said = EMULATOR.format(earliest=earliest.isoformat(), start=start.isoformat())
    db = FakeDatabase("GOOGLE_STANDARD_SQL", [], failures=[(0, gexc.OutOfRange(said))])
    with pytest.raises(RetentionError) as info:
        root_partitions(db, "Orders", dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=2000, at=start, retention=timedelta(days=1), namespace="live")
    return str(info.value)


def test_a_start_before_a_recent_creation_names_the_creation_time(monkeypatch: pytest.MonkeyPatch) -> None:
    created = datetime.now(UTC) - timedelta(minutes=30)
    message = ask(monkeypatch, created - timedelta(hours=2), created)
    assert f"precedes change stream Orders's creation (Spanner: the stream was created at {created.isoformat()})" in message
    assert "retention" not in message


def test_a_start_past_the_retention_of_an_old_stream_is_the_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime.now(UTC)
    message = ask(monkeypatch, now - timedelta(days=3), now - timedelta(days=1) + timedelta(seconds=1))
    assert "has left change stream Orders's retention period (1 day)" in message and "creation" not in message


def test_the_retentions_edge_is_measured_by_spanners_clock_not_this_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    # the local server's clock runs ahead: its earliest readable time is its own now - retention, a day after this
    # machine's now - retention; by this machine's clock that would look like a creation
    ahead = datetime.now(UTC) + timedelta(days=1, hours=1)
    message = ask(monkeypatch, ahead - timedelta(days=2), ahead - timedelta(days=1), spanner_now=ahead)
    assert "has left change stream Orders's retention period (1 day)" in message and "creation" not in message
