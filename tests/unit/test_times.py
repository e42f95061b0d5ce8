"""How times and durations are written: one function per form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from spanner_cdc import times


def test_rfc3339_is_utc_with_six_digits_and_z() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert times.rfc3339(datetime(2022, 9, 27, 14, 30, tzinfo=plus_two)) == "2022-09-27T12:30:00.000000Z"


def test_iso_z_keeps_microseconds_only_when_there_are_some() -> None:
    assert times.iso_z(datetime(2025, 1, 1, tzinfo=UTC)) == "2025-01-01T00:00:00Z"
    assert times.iso_z(None) is None
    assert datetime.fromisoformat(times.iso_z(datetime(2025, 1, 1, 0, 0, 0, 5, tzinfo=UTC)) or "").microsecond == 5


def test_durations_for_people_and_for_messages() -> None:
    assert times.human_duration(3 * 3600 + 5 * 60 + 9) == "3h05m"
    assert times.human_duration(None, missing="—") == "—"
    assert times.spelled_duration(timedelta(days=7)) == "7 days"


def test_display_time_drops_microseconds_unless_asked() -> None:
    value = datetime(2025, 1, 1, 10, 0, 0, 999_999, tzinfo=UTC)
    assert times.display_time(value) == "2025-01-01 10:00:00.999999 UTC"
    assert times.display_time(value, precise=False) == "2025-01-01 10:00:00 UTC"
    assert times.display_time(None) == "—"
