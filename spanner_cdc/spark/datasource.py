"""The pyspark Python data source `spanner_change_stream`: reads partition tokens on executors (one task per token)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.lake.columns import spark_ddl
from spanner_cdc.spark.executor import FILES_DDL, WAVE_FILES_DDL, land_in_wave, land_token, read_token
from spanner_cdc.spark.spec import TokenJobSpec

SOURCE_NAME = "spanner_change_stream"


# A wave job's option: the JSON list of its tokens' options (TokenJobSpec.options()), one task per token.
WAVE_OPTION = "wave"


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.wave: list[dict[str, str]] = json.loads(self.options[WAVE_OPTION]) if WAVE_OPTION in self.options else []

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query: a single task, so records stay in commit order in one file per table.
        return [InputPartition(i) for i in range(len(self.wave))] if self.wave else [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if self.wave:
            return land_in_wave(TokenJobSpec.from_options(self.wave[partition.value]))
        spec = TokenJobSpec.from_options(self.options)
        return land_token(spec) if spec.writer == "arrow" else read_token(spec)


class SpannerChangeStreamDataSource(DataSource):
    """`spark.read.format("spanner_change_stream").options(**TokenJobSpec.options()).load()`.

    With writer=arrow (default) the rows are the staged files (table, path, rows): the executor lands
    the data itself. With writer=spark they are the lake rows, for Spark's Parquet writer. With the `wave`
    option (many tokens' options, arrow writer) each token is a task and the rows name their token too.
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        if WAVE_OPTION in self.options:
            return WAVE_FILES_DDL
        return FILES_DDL if self.options.get("writer", "arrow") == "arrow" else spark_ddl()

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerChangeStreamReader(self.options)
