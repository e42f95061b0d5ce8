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
# a wave job's listing names the token of each file: one job lands many tokens
WAVE_FILES_DDL = FILES_DDL + ", `token` STRING"


# A wave job's options: the JSON list of its tokens' options (TokenJobSpec.options()), and how many of them
# one task lands, one after another (a task costs Spark far more than a small token's reading and landing).
WAVE_OPTION = "wave"
TASK_TOKENS_OPTION = "task_tokens"


class SpannerChangeStreamReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        self.wave: list[dict[str, str]] = json.loads(self.options[WAVE_OPTION]) if WAVE_OPTION in self.options else []
        self.task_tokens = max(1, int(self.options.get(TASK_TOKENS_OPTION, "1")))

    def partitions(self) -> list[InputPartition]:
        # One token's range is one query in one task, so records stay in commit order in one file per table.
        if not self.wave:
            return [InputPartition(0)]
        tasks = -(-len(self.wave) // self.task_tokens)
        # spread evenly: with 10 tokens and 4 per task, tasks of 4, 3 and 3 rather than 4, 4 and 2
        return [InputPartition(list(range(len(self.wave)))[n::tasks]) for n in range(tasks)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spanner_cdc.spark.executor import land_token, read_token
        from spanner_cdc.spark.spec import TokenJobSpec

        if self.wave:
            return self._land_tokens(partition.value)
        spec = TokenJobSpec.from_options(self.options)
        return land_token(spec) if spec.writer == "arrow" else read_token(spec)

    def _land_tokens(self, indexes: list[int]) -> Iterator[Any]:
        from spanner_cdc.spark.executor import land_in_wave
        from spanner_cdc.spark.spec import TokenJobSpec

        # each token fails alone, as in a task of its own: land_in_wave reports its error in its control file
        for index in indexes:
            yield from land_in_wave(TokenJobSpec.from_options(self.wave[index]))


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
