"""The pyspark Python data source `spanner_change_stream`: reads one partition token on an executor as lake batches."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.lake.schema import spark_ddl
from spanner_cdc.spark.token_job import SOURCE_NAME, TokenJobSpec, read_token


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query: a single task, so records stay in commit order in one file per table.
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_token(TokenJobSpec.from_options(self.options))


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
