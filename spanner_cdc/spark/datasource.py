"""The pyspark Python data source `spanner_change_stream`: reads one partition token on an executor."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.lake.columns import spark_ddl
from spanner_cdc.spark.executor import FILES_DDL, land_token, read_token
from spanner_cdc.spark.spec import TokenJobSpec

SOURCE_NAME = "spanner_change_stream"


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query: a single task, so records stay in commit order in one file per table.
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        spec = TokenJobSpec.from_options(self.options)
        return land_token(spec) if spec.writer == "arrow" else read_token(spec)


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`.

    With writer=arrow (default) the rows are the staged files (table, path, rows): the executor lands
    the data itself. With writer=spark they are the lake rows, for Spark's Parquet writer.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return FILES_DDL if self.options.get("writer", "arrow") == "arrow" else spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
