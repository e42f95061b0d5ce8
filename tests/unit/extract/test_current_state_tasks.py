"""Where a current-state step's tasks run: in the driver up to `state_driver_rows` rows, past it in one Spark job."""

from __future__ import annotations

from typing import Any

import pytest

from spanner_cdc.extract import current_state
from spanner_cdc.settings import Settings
from spanner_cdc.spark import session, state_job


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    where: list[str] = []

    def here(tasks: list[Any]) -> list[Any]:
        where.append("driver")
        return []

    def in_spark(spark: str, tasks: list[Any]) -> list[Any]:
        where.append(f"spark:{spark}")
        return []

    monkeypatch.setattr(state_job, "run_here", here)
    monkeypatch.setattr(state_job, "run_state_job", in_spark)
    monkeypatch.setattr(session, "spark_session", lambda settings: "session")
    return where


@pytest.mark.parametrize(("limit", "rows", "expected"), [
    (50_000, 0, "driver"), (50_000, 50_000, "driver"), (50_000, 50_001, "spark:session"), (0, 0, "spark:session"),
    (0, 1, "spark:session"),
])  # fmt: skip
def test_the_tasks_run_in_the_driver_up_to_the_setting_and_in_spark_past_it(
    ran: list[str], limit: int, rows: int, expected: str
) -> None:
    tasks: list[Any] = []
    current_state._run_tasks(Settings(stream="s", state_driver_rows=limit), tasks, rows)
    assert ran == [expected]
