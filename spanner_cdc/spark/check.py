"""The window's transaction check as Spark aggregations, for windows too large for the driver: only counts and a few examples reach it
(the same check as lake/check.py's in the driver, with the same result)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spanner_cdc.lake import storage
from spanner_cdc.lake.check import CHECKED, MAX_LISTED, empty_check, iso_timestamp, read_checked
from spanner_cdc.lake.columns import LAKE_SCHEMA, spark_ddl

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MAX_LISTED", "read_checked_columns", "transaction_check"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _lake_frame(spark: SparkSession, paths: Sequence[str]) -> Any:
    """The files as one frame: Spark's Parquet reader for local paths; for a bucket (Spark has no GCS or
    S3 connector of its own) the executors read the files through the lake's storage, one task per few files."""
    if not any(storage.scheme_of(p) for p in paths):
        return spark.read.schema(spark_ddl(LAKE_SCHEMA)).parquet(*paths)
    listing = spark.createDataFrame([(p,) for p in paths], "path STRING")
    return listing.repartition(max(1, min(len(paths) // 4, 64))).mapInArrow(read_checked_columns, spark_ddl(CHECKED))


def read_checked_columns(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side of `_lake_frame`: the checked columns of each listed file, read through the lake's storage."""
    for batch in batches:
        for path in batch.column("path").to_pylist():
            yield from read_checked(path).to_batches()


def transaction_check(
    spark: SparkSession, paths: Sequence[str], *, window_start: datetime, window_end: datetime, partial: bool = False
) -> dict[str, Any]:
    """For every transaction committed in [window_start, window_end): distinct landed record_sequence ==
    number_of_records_in_transaction; and no change landed twice (a repeated uuid).

    `paths` are every file whose range overlaps the window (a token that fell behind lands older commits
    with a later window); rows committed outside the window are counted, not checked. `ok` is False on
    any mismatch or duplicate; at most MAX_LISTED offending transactions are listed. `partial` (a landing policy
    leaves some tables out): fewer records than the transaction had is no mismatch (`partial_transactions`), more is.
    """
    from pyspark.sql import functions as F

    if not paths:
        return empty_check()
    frame = _lake_frame(spark, paths)
    inside = (F.col("commit_timestamp") >= F.lit(window_start)) & (F.col("commit_timestamp") < F.lit(window_end))
    totals = frame.agg(
        F.count(F.lit(1)).alias("all_rows"),
        F.sum(F.when(inside, 1).otherwise(0)).alias("rows"),
        F.countDistinct(F.when(inside, F.col("uuid"))).alias("distinct_uuids"),
        # as microseconds: a collected timestamp would come back naive, in the session's time zone
        F.min(F.when(inside, F.unix_micros("commit_timestamp"))).alias("first_micros"),
        F.max(F.when(inside, F.unix_micros("commit_timestamp"))).alias("last_micros"),
    ).collect()[0]
    per_transaction = (
        frame.where(inside)
        .groupBy("server_transaction_id")
        .agg(
            F.countDistinct("record_sequence").alias("landed_records"),
            F.min("number_of_records_in_transaction").alias("low"),
            F.max("number_of_records_in_transaction").alias("number_of_records_in_transaction"),
        )
    )
    landed, expected = F.col("landed_records"), F.col("number_of_records_in_transaction")
    count_off = (landed > expected) if partial else (landed != expected)
    mismatch = count_off | (F.col("low") != expected)
    short = (landed < expected) & ~F.coalesce(mismatch, F.lit(False)) if partial else F.lit(False)
    counts = per_transaction.agg(
        F.count(F.lit(1)).alias("transactions"), F.sum(F.when(mismatch, 1).otherwise(0)).alias("mismatched"),
        F.sum(F.when(short, 1).otherwise(0)).alias("partial_transactions"),
    ).collect()[0]
    mismatched = int(counts["mismatched"] or 0)
    examples = []
    if mismatched:
        bad = per_transaction.where(mismatch).orderBy("server_transaction_id").limit(MAX_LISTED).collect()
        examples = [
            {
                "server_transaction_id": row["server_transaction_id"],
                "landed_records": int(row["landed_records"]),
                "number_of_records_in_transaction": int(row["number_of_records_in_transaction"]),
            }
            for row in bad
        ]
    rows = int(totals["rows"] or 0)
    duplicates = rows - int(totals["distinct_uuids"] or 0)
    return {
        "ok": mismatched == 0 and duplicates == 0,
        "transactions": int(counts["transactions"] or 0),
        "rows": rows,
        "mismatched": mismatched,
        "partial_transactions": int(counts["partial_transactions"] or 0),
        "duplicate_rows": duplicates,
        "outside_window_rows": int(totals["all_rows"] or 0) - rows,
        "examples": examples,
        "first_commit_timestamp": _from_micros(totals["first_micros"]),
        "last_commit_timestamp": _from_micros(totals["last_micros"]),
    }


def _from_micros(micros: int | None) -> str | None:
    return None if micros is None else iso_timestamp(EPOCH + timedelta(microseconds=int(micros)))
