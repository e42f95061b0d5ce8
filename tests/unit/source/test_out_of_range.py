"""The cause of a change stream query's OUT_OF_RANGE, from the messages of Google's emulator and the local server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spanner_cdc.source.out_of_range import CREATION, FUTURE, OTHER, RETENTION, classify

NOW = datetime(2026, 12, 6, 6, 0, tzinfo=UTC)
DAY = timedelta(days=1)
# Google's emulator 1.5.28, word for word but the times
EMULATOR_PAST = (
    "Specified start_timestamp is too far in the past. Please specify a start_timestamp within the earliest read "
    "timestamp: {earliest}. Received start_timestamp: 2026-12-04T05:41:17.825282+00:00., request_id = 1.2.3"
)
EMULATOR_FUTURE = (
    "Specified start_timestamp is too far in the future. Please specify a start_timestamp within the earliest read "
    "timestamp: 2026-12-06T05:40:51.703237101+00:00, and the current maximum start timestamp: "
    "2026-12-06T05:51:17.878196043+00:00. Received start_timestamp: 2026-12-06T06:41:17.825282+00:00."
)


def test_an_earliest_time_well_inside_the_retention_is_the_streams_creation() -> None:
    # the emulator's message is the same for both causes: its earliest time tells them apart
    created = NOW - timedelta(minutes=20)
    found = classify(EMULATOR_PAST.format(earliest="2026-12-06T05:40:00.000000001+00:00"), DAY, NOW)
    assert (found.cause, found.earliest) == (CREATION, created)
    old = classify(EMULATOR_PAST.format(earliest="2026-12-05T06:00:01.5+00:00"), DAY, NOW)
    assert (old.cause, old.earliest) == (RETENTION, datetime(2026, 12, 5, 6, 0, 1, 500000, tzinfo=UTC))


def test_without_the_retention_only_a_message_that_names_the_creation_is_the_creation() -> None:
    assert classify(EMULATOR_PAST.format(earliest="2026-12-06T05:40:00Z")).cause == RETENTION
    local = "start_timestamp 2026-12-04T05:00:00+00:00 is before change stream S was created; the earliest allowed is 2026-12-06T05:40:00.123456+00:00"
    found = classify(local)
    assert (found.cause, found.earliest) == (CREATION, datetime(2026, 12, 6, 5, 40, 0, 123456, tzinfo=UTC))
    kept = "start_timestamp 2026-11-04T05:00:00+00:00 is outside the retention period (7 days) of change stream S; the earliest allowed is 2026-11-29T06:00:00+00:00"
    assert classify(kept, timedelta(days=7), NOW).cause == RETENTION


def test_a_start_ahead_of_spanners_clock_is_neither() -> None:
    assert classify(EMULATOR_FUTURE, DAY, NOW).cause == FUTURE


def test_a_message_without_times_is_the_retention() -> None:
    found = classify("start_timestamp is too far in the past", DAY, NOW)
    assert (found.cause, found.earliest) == (RETENTION, None)


def test_a_heartbeat_out_of_range_is_not_about_the_start() -> None:
    said = "heartbeat_milliseconds must be within min 100 and max 300000. Received heartbeat_milliseconds: 10."
    assert classify(said, DAY, NOW).cause == OTHER
