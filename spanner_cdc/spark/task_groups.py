"""Small tasks of a Python data source's job run a few to a Spark task: Spark's cost per task is more than their work.

Spark's cost per task (~60 ms: scheduling, a round trip to a Python worker) is more than a small task's own work: a
job of 16 tasks that yield a row each took 1.0 s on local[1], of 4 tasks 0.33 s, of 1 task 0.14 s. The current-state
job's tasks are a table's key buckets (16 a window, most of them small in an hourly window), the verify job's its
lake buckets and source partitions.
"""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

TASKS_PER_PARTITION = 4  # four-way parallel still, for a window that is large in every bucket


def grouped(count: int, per: int = TASKS_PER_PARTITION) -> list[InputPartition]:
    """Spark partitions of a job's `count` tasks: each partition's value is the indexes of its tasks, in order."""
    return [InputPartition(list(range(first, min(first + per, count)))) for first in range(0, count, per)]
