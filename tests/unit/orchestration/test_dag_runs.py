"""dag_runs' short polls: dag.test() waits POLL_S, not a second, when a pass over the run finds nothing to run."""

from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import pytest

from spanner_cdc.orchestration import dag_runs
from spanner_cdc.orchestration.dag_runs import POLL_S, _short_polls


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """What this test's thread asked time.sleep for (it does not sleep); the block wraps this recorder as it would the
    real sleep. Other threads of the process (an earlier module's, in a pytest-xdist worker) sleep as asked: recorded,
    their loops would spin and fill the list."""
    asked: list[float] = []
    test_thread, real_sleep = threading.get_ident(), time.sleep

    def record(seconds: float) -> None:
        if threading.get_ident() == test_thread:
            asked.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", record)
    return asked


def test_inside_the_block_only_dag_tests_own_wait_is_shortened(
    slept: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk.definitions.dag import DAG

    def loop_pass(self: Any, **_: Any) -> None:  # stands in for DAG.test: its code object is the one the block knows
        time.sleep(1)

    monkeypatch.setattr(DAG, "test", loop_pass)
    with _short_polls():
        loop_pass(None)  # the loop's second: a short poll
        time.sleep(1)  # anybody else's second (a task run in this process): as asked
        time.sleep(POLL_S / 2)
    time.sleep(1)
    assert slept == [POLL_S, 1, POLL_S / 2, 1]


def test_after_the_block_time_sleep_is_what_it_was(slept: list[float]) -> None:
    before = time.sleep
    with _short_polls():
        assert time.sleep is not before
    assert time.sleep is before


def test_dag_tests_loop_still_waits_with_time_sleep() -> None:
    # the block shortens the sleeps called from DAG.test's own code: an Airflow that waits otherwise makes it a no-op
    from airflow.sdk.definitions.dag import DAG

    source = inspect.getsource(DAG.test)
    assert "time.sleep(1)" in source and "No tasks to run" in source
    assert dag_runs.POLL_S < 1
