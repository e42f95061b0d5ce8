"""The pyspark Python data source `spanner_change_stream`: reads one partition token on an executor (a job per token)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

# Only pyspark at import: Spark's planning processes (create, plan) import this module to plan a job, one after
# another before any task runs; the executor side (pyarrow, the reader, the lake) is imported by the tasks alone.
# A wave job of many tokens is no data source: `spark/wave_task.py` (no planning processes).

SOURCE_NAME = "spanner_change_stream"
FILES_DDL = "`table` STRING, `path` STRING, `rows` BIGINT, `bytes` BIGINT"


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query in one task, so records stay in commit order in one file per table.
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spanner_cdc.spark.executor import land_token, read_token
        from spanner_cdc.spark.spec import TokenJobSpec

        spec = TokenJobSpec.from_options(self.options)
        return _settled_after(land_token(spec) if spec.writer == "arrow" else read_token(spec))


def _settled_after(rows: Iterator[Any]) -> Iterator[Any]:
    """The task's rows, then (once per worker process, after its first task) the worker settled for the next tasks."""
    from spanner_cdc.spark.reused_worker import settle

    yield from rows
    settle()


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`.

    With writer=arrow (default) the rows are the staged files (table, path, rows): the executor lands
    the data itself. With writer=spark they are the lake rows, for Spark's Parquet writer.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        from spanner_cdc.lake.columns import spark_ddl

        return FILES_DDL if self.options.get("writer", "arrow") == "arrow" else spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
