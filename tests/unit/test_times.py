"""How times and durations are written: one function per form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

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


def test_utc_is_the_one_coercion_to_a_plain_utc_datetime() -> None:
    import datetime as dt

    from spanner_cdc.times import utc, utc_or_none

    class Subclass(dt.datetime):  # as Airflow's pendulum and the Spanner client hand them out
        pass

    plus_two = dt.timezone(dt.timedelta(hours=2))
    converted = utc(Subclass(2024, 5, 1, 11, 0, 0, 5, tzinfo=plus_two))
    assert type(converted) is dt.datetime and converted == dt.datetime(2024, 5, 1, 9, 0, 0, 5, tzinfo=dt.UTC)
    assert converted.tzinfo is dt.UTC
    assert utc(dt.datetime(2024, 5, 1, 9), assume_utc=True) == dt.datetime(2024, 5, 1, 9, tzinfo=dt.UTC)
    with pytest.raises(ValueError, match="has no time zone"):
        utc(dt.datetime(2024, 5, 1, 9))
    assert utc_or_none(None) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T09:00:00Z", "2024-05-01T09:00:00+00:00"),
        ("2024-05-01T09:00:00.123456789Z", "2024-05-01T09:00:00.123456+00:00"),
        ("2024-05-01t11:00:00.5+02:00", "2024-05-01T09:00:00.500000+00:00"),
        ("2024-05-01T09:00:00.1z", "2024-05-01T09:00:00.100000+00:00"),
    ],
)
def test_parse_rfc3339_reads_utc_to_the_microsecond(text: str, expected: str) -> None:
    from spanner_cdc.times import parse_rfc3339

    assert parse_rfc3339(text).isoformat() == expected


@pytest.mark.parametrize(
    "text", ["2024-05-01T09:00:00", " 2024-05-01T09:00:00Z", "2024-05-01 09:00:00Z", "2024-05-01T09:00Z", "2024-13-01T09:00:00Z",
             "2024-05-01T09:00:00.1234567890Z", "2024-05-01T09:00:00+0200", "yesterday"],
)  # fmt: skip
def test_parse_rfc3339_refuses_other_forms(text: str) -> None:
    from spanner_cdc.times import parse_rfc3339

    with pytest.raises(ValueError):
        parse_rfc3339(text)


def _outcome(text: str) -> object:
    from spanner_cdc.times import parse_rfc3339

    try:
        return parse_rfc3339(text)
    except ValueError:
        return "refused"


@pytest.mark.parametrize(
    "text",
    ["2024-05-01T09:00:00.1Z", "2024-05-01T09:00:00.123456Z", "2024-05-01T09:00:00.123456789Z", "2024-05-01T09:00:00.Z",
     "2024-05-01T09:00:00.1234567890Z", "2024-05-01T09:00:00,123Z", "2024-05-01T09:00:00.12\u0663Z", "2024-05-01T09:00:00.1 3Z",
     "2024-05-01T09:00:00.12-3Z", "2024-W18-3T09:00:00.123Z", "2024-05-01T24:00:00.1Z", "2024-02-30T09:00:00.1Z",
     "2024-05-01T09:00:60.1Z", "202\u0664-05-01T09:00:00.123Z", "2024-05-01T09:00:00.123+00:00Z", "2024-05-01T09:00:00.1_2Z",
     "2024-05-01T09:00:00.+12Z", "2024-05-01T09:00:00.12\u00b2Z", "2024-05-01T09:00:00.1+01Z", "2024-05-01T09:00:00.12345678\nZ"],
)  # fmt: skip
def test_parse_rfc3339_takes_and_refuses_the_form_spanner_sends_as_every_other(text: str) -> None:
    """The fast path (T, fraction, Z) answers as the full checks do: a lowercase z sends the same text through them."""
    assert _outcome(text) == _outcome(text[:-1] + "z")
