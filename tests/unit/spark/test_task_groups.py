"""A data source job's tasks, a few to a Spark partition: every task once, in order."""

from __future__ import annotations

import pytest

from spanner_cdc.spark.task_groups import TASKS_PER_PARTITION, grouped


@pytest.mark.parametrize("count", [0, 1, TASKS_PER_PARTITION - 1, TASKS_PER_PARTITION, 16, 17])
def test_each_task_is_in_one_partition_in_order_and_no_partition_holds_more_than_its_share(count: int) -> None:
    values = [p.value for p in grouped(count)]
    assert [i for value in values for i in value] == list(range(count))
    assert all(0 < len(value) <= TASKS_PER_PARTITION for value in values)
    assert len(values) == -(-count // TASKS_PER_PARTITION)


def test_one_a_partition_gives_a_spark_task_per_task() -> None:
    assert [p.value for p in grouped(3, per=1)] == [[0], [1], [2]]
