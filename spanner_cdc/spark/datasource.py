"""The pyspark Python data source `spanner_change_stream`: reads partition tokens on executors (a task per token, or per few in a wave)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# Only pyspark at import: Spark's planning processes (create, plan) import this module to plan a job, one after
# another before any task runs; the executor side (pyarrow, the reader, the lake) is imported by the tasks alone.

SOURCE_NAME = "spanner_change_stream"
FILES_DDL = "`table` STRING, `path` STRING, `rows` BIGINT, `bytes` BIGINT"
# a wave job's listing names the token of each file (one job lands many tokens), and has one row per token without
# a file whose `control` is the token's control summary (JSON)
WAVE_FILES_DDL = FILES_DDL + ", `token` STRING, `control` STRING"


# A wave job's options: the JSON list of its tokens' options (TokenJobSpec.options()), how many of them one task
# lands (a task costs Spark far more than a small token's reading and landing), and how many of those at once.
WAVE_OPTION = "wave"
TASK_TOKENS_OPTION = "task_tokens"
TASK_THREADS_OPTION = "task_threads"  # how many of a task's tokens it lands at once


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.is_wave = WAVE_OPTION in self.options
        self.task_tokens = max(1, int(self.options.get(TASK_TOKENS_OPTION, "1")))
        self.task_threads = max(1, int(self.options.get(TASK_THREADS_OPTION, "1")))

    def __getstate__(self) -> dict[str, Any]:
        # Every task receives this reader pickled, and a wave's tokens travel in their tasks' partitions: without the
        # wave's options a task gets its own few tokens, not the whole wave's (hundreds of tokens' options per task).
        state = dict(self.__dict__)
        state["options"] = {key: value for key, value in self.options.items() if key != WAVE_OPTION}
        return state

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query in one task, so records stay in commit order in one file per table.
        if not self.is_wave:
            return [InputPartition(0)]
        wave: list[dict[str, str]] = json.loads(self.options[WAVE_OPTION])
        tasks = -(-len(wave) // self.task_tokens)
        # spread evenly: with 10 tokens and 4 per task, tasks of 4, 3 and 3 rather than 4, 4 and 2
        return [InputPartition(wave[n::tasks]) for n in range(tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spanner_cdc.spark.executor import land_token, read_token
        from spanner_cdc.spark.spec import TokenJobSpec

        if self.is_wave:
            return _settled_after(self._land_tokens(partition.value))
        spec = TokenJobSpec.from_options(self.options)
        return _settled_after(land_token(spec) if spec.writer == "arrow" else read_token(spec))

    def _land_tokens(self, tokens: list[dict[str, str]]) -> Iterator[Any]:
        from spanner_cdc.spark.executor import land_wave_tokens
        from spanner_cdc.spark.spec import TokenJobSpec

        # each token fails alone, as in a task of its own: land_in_wave reports its error in its summary row
        return land_wave_tokens([TokenJobSpec.from_options(options) for options in tokens], self.task_threads)


def _settled_after(rows: Iterator[Any]) -> Iterator[Any]:
    """The task's rows, then (once per worker process, after its first task) the worker settled for the next tasks."""
    from spanner_cdc.spark.reused_worker import settle

    yield from rows
    settle()


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`.

    With writer=arrow (default) the rows are the staged files (table, path, rows): the executor lands
    the data itself. With writer=spark they are the lake rows, for Spark's Parquet writer. With the `wave`
    option (many tokens' options, arrow writer) a task lands a few tokens and the rows name their token too.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        from spanner_cdc.lake.columns import spark_ddl

        if WAVE_OPTION in self.options:
            return WAVE_FILES_DDL
        return FILES_DDL if self.options.get("writer", "arrow") == "arrow" else spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
