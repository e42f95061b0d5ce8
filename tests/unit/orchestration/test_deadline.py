"""The deadline callback's line and its choice of runs (the store lookup is exercised by the scheduler test)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

import pytest

from spanner_cdc.orchestration import deadline

START = dt.datetime(2026, 11, 26, 5, tzinfo=dt.UTC)
END = START + dt.timedelta(hours=1)


def test_the_line_names_the_stream_the_window_and_the_partitions_holding_it_open() -> None:
    line = deadline.missed_line("orders", START, END, 90, "scheduled__x", {"READY": ["a" * 40], "RUNNING": ["bcd"]})
    assert line.startswith("stream orders window [2026-11-26T05:00:00+00:00, 2026-11-26T06:00:00+00:00) "
                           "not complete 90 min after its end (DAG run scheduled__x): 2 partition(s) holding it open")  # fmt: skip
    assert "READY: " in line and "RUNNING: bcd" in line
    assert "no partition holds it open" in deadline.missed_line("orders", START, END, 90, "r", {})
    assert line.count("\n") == 0


def _run(run_type: str) -> dict:
    return {"dag_run_id": f"{run_type}__1", "run_type": run_type, "data_interval_start": START.isoformat().replace("+00:00", "Z"),
            "data_interval_end": END.isoformat().replace("+00:00", "Z")}  # fmt: skip


def test_the_callback_logs_one_line_and_still_logs_when_the_store_is_unreachable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def down(stream: str, end: dt.datetime) -> dict:
        assert (stream, end) == ("orders", END)
        raise ConnectionError("store down")

    monkeypatch.setattr(deadline, "pending_partitions", down)
    with caplog.at_level(logging.INFO, logger=deadline.__name__):
        asyncio.run(deadline.window_missed({"dag_run": _run("scheduled")}, stream="orders", minutes=90))
        asyncio.run(deadline.window_missed({"dag_run": _run("backfill")}, stream="orders", minutes=90))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "partitions unknown (ConnectionError: store down)" in warnings[0]
    assert "(DAG run scheduled__1)" in warnings[0]


def test_the_dags_callback_path_names_the_callback() -> None:
    from spanner_cdc.names import DEADLINE_CALLBACK

    module, _, name = DEADLINE_CALLBACK.rpartition(".")
    assert module == deadline.__name__ and getattr(deadline, name) is deadline.window_missed
