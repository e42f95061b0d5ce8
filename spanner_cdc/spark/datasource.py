"""The pyspark Python data source `spanner_change_stream`: reads one partition token on an executor for Spark's Parquet
writer (SPANNER_CDC_LAKE_WRITER=spark, a job per token)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# Only pyspark at import: Spark's planning processes (create, plan) import this module to plan a job, one after
# another before any task runs; the executor side (pyarrow, the reader, the lake) is imported by the tasks alone.
# A wave job of many tokens is no data source: `spark/wave_task.py` (no planning processes).

SOURCE_NAME = "spanner_change_stream"
FILES_DDL = "`table` STRING, `path` STRING, `rows` BIGINT, `bytes` BIGINT"  # the rows of jobs that land files themselves


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query in one task, so records stay in commit order in one file per table.
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spanner_cdc.spark.executor import read_token
        from spanner_cdc.spark.spec import TokenJobSpec

        return _settled_after(read_token(TokenJobSpec.from_options(self.options)))


def _settled_after(rows: Iterator[Any]) -> Iterator[Any]:
    """The task's rows, then (once per worker process, after its first task) the worker settled for the next tasks."""
    from spanner_cdc.spark.reused_worker import settle

    yield from rows
    settle()


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`: the token's lake rows,
    for Spark's Parquet writer (the default writer lands files on the executors itself: `spark/wave_task.py`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        from spanner_cdc.lake.columns import spark_ddl

        return spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
