"""The lake contract's columns: one Arrow schema, and the same schema as Spark DDL."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")

# Order and names are the contract downstream jobs read; types follow Spanner's (INT64 -> int64).
# Every field is nullable because Spark's Parquet writer makes them so; the rows never hold nulls
# except `transaction_tag` when Spanner omits it.
LAKE_SCHEMA = pa.schema(
    [
        pa.field("uuid", pa.string()),
        pa.field("stream_name", pa.string()),
        pa.field("read_method", pa.string()),
        pa.field("object", pa.string()),
        pa.field("source_timestamp", TIMESTAMP),
        pa.field("read_timestamp", TIMESTAMP),
        pa.field("commit_timestamp", TIMESTAMP),
        pa.field("server_transaction_id", pa.string()),
        pa.field("record_sequence", pa.string()),
        pa.field("mod_index", pa.int32()),
        pa.field("change_type", pa.string()),
        pa.field("is_deleted", pa.bool_()),
        pa.field("primary_keys", pa.list_(pa.string())),
        pa.field("keys", pa.string()),
        pa.field("new_values", pa.string()),
        pa.field("old_values", pa.string()),
        pa.field("column_types", pa.string()),
        pa.field("value_capture_type", pa.string()),
        pa.field("number_of_records_in_transaction", pa.int64()),
        pa.field("number_of_partitions_in_transaction", pa.int64()),
        pa.field("transaction_tag", pa.string()),
        pa.field("is_system_transaction", pa.bool_()),
        pa.field("is_last_record_in_transaction_in_partition", pa.bool_()),
        pa.field("partition_token", pa.string()),
        pa.field("window_start", TIMESTAMP),
        pa.field("window_end", TIMESTAMP),
    ]
)
LAKE_COLUMNS: tuple[str, ...] = tuple(LAKE_SCHEMA.names)

# The Spark job partitions its staging output by this extra column (Hive style, so the column is
# dropped from the files); the published layout then names the table as `table_name=<name>` (not a column: no clash).
PARTITION_COLUMN = "_lake_table"
SOURCE_SCHEMA = LAKE_SCHEMA.append(pa.field(PARTITION_COLUMN, pa.string()))


def rows_by_table(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """A batch of SOURCE_SCHEMA split by its table column: each table's rows, in order, without the column."""
    import pyarrow.compute as pc

    tables = batch.column(PARTITION_COLUMN)
    data = batch.drop_columns([PARTITION_COLUMN])
    names = pc.unique(tables).to_pylist()
    for table in names:
        yield table, data if len(names) == 1 else data.filter(pc.equal(tables, table))

_SPARK_TYPES = {
    pa.string(): "STRING",
    TIMESTAMP: "TIMESTAMP",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.list_(pa.string()): "ARRAY<STRING>",
}


def spark_ddl(schema: pa.Schema = SOURCE_SCHEMA) -> str:
    """The schema as a Spark DDL string, e.g. "`uuid` STRING, `stream_name` STRING, ..."."""
    parts = []
    for field in schema:
        spark_type = _SPARK_TYPES[field.type]
        parts.append(f"`{field.name}` {spark_type}")
    return ", ".join(parts)
