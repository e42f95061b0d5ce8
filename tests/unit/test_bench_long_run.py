"""bench_long_run's checkpoints: windows 24, 120 and 240 of the default run, proportional and on the maintenance
schedule for another size (its run itself is the benchmark: `python -m bench.bench_long_run`)."""

from __future__ import annotations

import pytest

from bench.bench_long_run import checkpoints_of


@pytest.mark.parametrize(
    ("windows", "every", "marks"),
    [(240, 24, [24, 120, 240]), (48, 24, [24, 48]), (100, 24, [24, 48, 96]), (24, 24, [24]), (6, 3, [3, 6])],
)
def test_checkpoints_fall_after_a_maintenance_run(windows: int, every: int, marks: list[int]) -> None:
    assert checkpoints_of(windows, every) == marks
    assert all(m % every == 0 and m <= windows for m in marks)
