"""The contract of spanner_cdc.compat.airflow with the installed Airflow."""

from __future__ import annotations

import datetime as dt

from spanner_cdc.compat import airflow as compat


def test_the_internals_compat_uses_are_there() -> None:
    compat.check()


def test_the_manual_data_interval_applies_inside_the_block_only() -> None:
    from airflow.sdk import timezone
    from airflow.serialization import encoders
    from airflow.timetables.interval import CronDataIntervalTimetable

    start = timezone.coerce_datetime(dt.datetime(2026, 1, 1, 10, tzinfo=dt.UTC))
    end = timezone.coerce_datetime(dt.datetime(2026, 1, 1, 11, tzinfo=dt.UTC))
    hourly = CronDataIntervalTimetable("0 * * * *", timezone="UTC")
    real = encoders.coerce_to_core_timetable
    with compat.manual_data_interval(start, end):
        interval = encoders.coerce_to_core_timetable(hourly).infer_manual_data_interval(run_after=start)
    assert (interval.start, interval.end) == (start, end)  # the window, not the hour that ends at `start`
    assert encoders.coerce_to_core_timetable is real
    assert real(hourly).infer_manual_data_interval(run_after=start).end == start
