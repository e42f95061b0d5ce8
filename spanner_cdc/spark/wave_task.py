"""A wave job's tasks: Spark maps `WaveTasks` over a range of task numbers, and each task lands its few tokens."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

    from spanner_cdc.spark.spec import TokenJobSpec

# Only the standard library at import: the driver builds the job with it; the executor side (pyarrow, the reader,
# the lake) is imported by the tasks alone.

# A wave job's rows: a row per landed file naming its token, and a row per token without a file whose `control` is
# the token's control summary (JSON).
WAVE_FILES_DDL = "`table` STRING, `path` STRING, `rows` BIGINT, `bytes` BIGINT, `token` STRING, `control` STRING"


class WaveTasks:
    """`spark.range(0, n, 1, n).mapInArrow(WaveTasks(specs, per_task, threads), WAVE_FILES_DDL)`, n = len(tasks).

    A job over a range needs nothing of Spark's Python planning: a Python data source made every job start its
    planning processes (lookup, create, plan: a fresh Python process each, one after another, before any task),
    ~1.9 s of an extract's first job here. Every task receives this object whole, so each task's tokens travel
    pickled apart and a task unpickles its own alone.
    """

    def __init__(self, specs: Sequence[TokenJobSpec], per_task: int, threads: int) -> None:
        count = -(-len(specs) // max(1, per_task))
        # spread evenly: with 10 tokens and 4 per task, tasks of 4, 3 and 3 rather than 4, 4 and 2
        self.tasks = [pickle.dumps(list(specs[n::count])) for n in range(count)]
        self.threads = max(1, threads)

    def __len__(self) -> int:
        return len(self.tasks)

    def specs(self, task: int) -> list[TokenJobSpec]:
        return pickle.loads(self.tasks[task])  # written by this job's driver (__init__)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Executor side: the task's numbers (one, from the range) in, its tokens' listing and summaries out."""
        from spanner_cdc.spark.executor import land_wave_tokens
        from spanner_cdc.spark.reused_worker import settle

        for batch in batches:
            for task in batch.column(0).to_pylist():
                # each token fails alone, as in a task of its own: its error is in its summary row
                yield from land_wave_tokens(self.specs(task), self.threads)
        settle()  # once per worker process, after its first task: the worker settled for the next tasks
