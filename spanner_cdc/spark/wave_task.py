"""A wave job's tasks: Spark runs `WaveTasks` over task numbers (an RDD, or a range on Spark Connect), each landing a few tokens."""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from spanner_cdc.spark.spec import TokenJobSpec

# Only the standard library at import: the driver builds the job with it; the executor side (pyarrow, the reader,
# the lake) is imported by the tasks alone.

# A wave job's rows: a row per landed file naming its token, and a row per token without a file whose `control` is
# the token's control summary (JSON).
WAVE_FILES_DDL = "`table` STRING, `path` STRING, `rows` BIGINT, `bytes` BIGINT, `token` STRING, `control` STRING"


def split_tasks(specs: Sequence[Any], per_task: int) -> list[list[Any]]:
    """A wave job's tokens in tasks of at most `per_task`, spread evenly: with 10 tokens and 4 a task, tasks of 4,
    3 and 3 rather than 4, 4 and 2. The driver splits once, and journals each task's file names before the job."""
    return split_into(specs, -(-len(specs) // max(1, per_task)))


def split_into(specs: Sequence[Any], count: int) -> list[list[Any]]:
    """The tokens in `count` tasks (fewer when there are fewer tokens), spread evenly."""
    count = min(count, len(specs))
    return [list(specs[n::count]) for n in range(count)]


class WaveTasks:
    """A wave job's tasks, a few tokens each: `rows` over task numbers for an RDD job (classic sessions), or the
    object itself over a range's batches for `mapInArrow` (Spark Connect, which has no RDDs); see `run_wave_job`.

    Neither needs Spark's Python data source planning: a data source made every job start its planning processes
    (lookup, create, plan: a fresh Python process each, one after another, before any task), ~1.9 s of an extract's
    first job here; and an RDD job needs no SQL planning or Arrow either (a fresh driver's first job ~0.6 s rather
    than ~1.8 s for mapInArrow). Every task receives this object whole, so each task's tokens travel pickled apart
    and a task unpickles its own alone.
    """

    def __init__(self, tasks: Sequence[Sequence[TokenJobSpec]], threads: int) -> None:
        self.tasks = [pickle.dumps(list(specs)) for specs in tasks]
        self.threads = max(1, threads)

    def __len__(self) -> int:
        return len(self.tasks)

    def specs(self, task: int) -> list[TokenJobSpec]:
        return pickle.loads(self.tasks[task])  # written by this job's driver (__init__)

    def batches(self, tasks: Iterable[int]) -> Iterator[pa.RecordBatch]:
        """Executor side: these tasks' tokens landed, their listing and summaries as WAVE_FILES_DDL batches."""
        from spanner_cdc.spark.executor import land_wave_tokens
        from spanner_cdc.spark.reused_worker import settle

        for task in tasks:
            # each token fails alone, as in a task of its own: its error is in its summary row
            yield from land_wave_tokens(self.specs(task), self.threads)
        settle()  # once per worker process, after its first task: the worker settled for the next tasks

    def rows(self, tasks: Iterable[int]) -> Iterator[dict[str, Any]]:
        """An RDD partition's task numbers in, the rows of `batches` out (as dicts)."""
        for batch in self.batches(tasks):
            yield from batch.to_pylist()

    def __call__(self, numbers: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """mapInArrow over a range: the task numbers come as batches of its one column."""
        return self.batches(task for batch in numbers for task in batch.column(0).to_pylist())
