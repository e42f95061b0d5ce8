"""Backfill rules: the namespace of a run, hour-aligned windows, and the range checks of the trigger form."""

from __future__ import annotations

import datetime as dt

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.names import IDENTIFIER, backfill_namespace
from spanner_cdc.orchestration.backfill import check_range, hourly_windows, windows_to_read

UTC = dt.UTC
H = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
NOW = dt.datetime(2024, 6, 2, 12, 0, tzinfo=UTC)


def test_namespace_is_an_identifier_unique_per_run() -> None:
    a = backfill_namespace("manual__2024-06-01T10:00:00+00:00")
    b = backfill_namespace("manual__2024-06-01T10:00:00-00:00")
    assert a.startswith("backfill_manual__2024_06_01T10_00_00_00_00")
    assert IDENTIFIER.fullmatch(a) and IDENTIFIER.fullmatch(b)
    assert a != b
    assert backfill_namespace("x" * 400) != backfill_namespace("x" * 401)
    assert len(backfill_namespace("x" * 400)) <= 128


def test_windows_are_cut_at_hour_boundaries() -> None:
    start = dt.datetime(2024, 6, 1, 10, 30, tzinfo=UTC)
    end = dt.datetime(2024, 6, 1, 12, 15, tzinfo=UTC)
    assert hourly_windows(start, end) == [
        (start, dt.datetime(2024, 6, 1, 11, tzinfo=UTC)),
        (dt.datetime(2024, 6, 1, 11, tzinfo=UTC), dt.datetime(2024, 6, 1, 12, tzinfo=UTC)),
        (dt.datetime(2024, 6, 1, 12, tzinfo=UTC), end),
    ]
    aligned = dt.datetime(2024, 6, 1, 10, tzinfo=UTC)
    assert hourly_windows(aligned, aligned + 2 * H) == [(aligned, aligned + H), (aligned + H, aligned + 2 * H)]
    assert hourly_windows(aligned, aligned) == []


def test_a_range_inside_retention_passes() -> None:
    check_range(NOW - 5 * H, NOW - H, now=NOW, retention=dt.timedelta(days=1))


@pytest.mark.parametrize(
    ("start", "end", "created", "field", "hint"),
    [
        (NOW - H, NOW - H, None, "end", "after start"),
        (NOW - H, NOW - 2 * H, None, "end", "after start"),
        (NOW - H, NOW + H, None, "end", "not after the database's current time"),
        (NOW - 25 * H, NOW - H, None, "start", "keeps 1 day, 0:00:00 of history"),
        (NOW - 25 * H, NOW - H, NOW - 30 * H, "start", "keeps 1 day, 0:00:00 of history"),
        (NOW - 5 * H, NOW - 3 * H, NOW - 3 * H, "end", "after the change stream was created"),
    ],
)
def test_bad_ranges_are_refused_naming_the_field(
    start: dt.datetime, end: dt.datetime, created: dt.datetime | None, field: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        check_range(start, end, now=NOW, retention=dt.timedelta(days=1), created_at=created)
    assert raised.value.field == field
    assert hint in raised.value.accepted


def test_a_start_before_the_streams_creation_is_fine_inside_retention() -> None:
    check_range(NOW - 5 * H, NOW - H, now=NOW, retention=dt.timedelta(days=1), created_at=NOW - 3 * H - 10 * MINUTE)


def test_windows_wholly_before_the_streams_creation_are_not_read() -> None:
    created = NOW - 3 * H - 10 * MINUTE
    spec = {"start": (NOW - 5 * H).isoformat(), "end": (NOW - H).isoformat(), "created_at": created.isoformat()}
    assert windows_to_read(spec) == [(NOW - 4 * H, NOW - 3 * H), (NOW - 3 * H, NOW - 2 * H), (NOW - 2 * H, NOW - H)]
    assert len(windows_to_read({**spec, "created_at": None})) == 4
