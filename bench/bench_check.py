"""Benchmark: the close's transaction check of one window in the driver (pyarrow) vs as a Spark job, side by side."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench import figures
from spanner_cdc.lake.check import driver_transaction_check
from spanner_cdc.lake.columns import LAKE_SCHEMA

COMMAND = "python -m bench.bench_check"
START = datetime(2024, 5, 1, 10, tzinfo=UTC)
END = START + timedelta(hours=1)


def write_files(root: Path, files: int, rows: int) -> list[str]:
    """`files` lake files of `rows` rows each: transactions of 2 records, all in the window."""
    paths = []
    for f in range(files):
        n = range(f * rows, (f + 1) * rows)
        columns = {name: pa.nulls(rows, field.type) for name, field in zip(LAKE_SCHEMA.names, LAKE_SCHEMA, strict=True)}
        columns |= {
            "uuid": pa.array([f"u{i}" for i in n]),
            "commit_timestamp": pa.array([START + timedelta(microseconds=i) for i in n], LAKE_SCHEMA.field("commit_timestamp").type),
            "server_transaction_id": pa.array([f"tx{i // 2}" for i in n]),
            "record_sequence": pa.array([str(i % 2) for i in n]),
            "number_of_records_in_transaction": pa.array([2] * rows, pa.int64()),
        }
        path = root / f"part-{f:05}.parquet"
        pq.write_table(pa.table(columns, schema=LAKE_SCHEMA), path)
        paths.append(str(path))
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--files", type=int, default=62, help="files overlapping the window (62: a warm 32-token window)")
    parser.add_argument("--rows", default="4,10000", help="rows per file, comma separated (one comparison each)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--master", default="local[2]", help="Spark master of the Spark check (local[2], sc://host:port)")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    from spanner_cdc.spark.check import transaction_check

    builder = SparkSession.builder.remote(args.master) if args.master.startswith("sc://") else SparkSession.builder.master(args.master)
    spark = builder.config("spark.ui.showConsoleProgress", "false").getOrCreate()
    print(f"{COMMAND} --files {args.files} --rows {args.rows} --rounds {args.rounds} --master {args.master}: one run, alternating, medians")
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        for size in (int(r) for r in args.rows.split(",")):
            root = Path(tmp) / str(size)
            root.mkdir()
            paths = write_files(root, args.files, size)
            transaction_check(spark, paths, window_start=START, window_end=END)  # warm: the first job starts Spark's executors
            times: dict[str, list[float]] = {"driver": [], "spark": []}
            for _ in range(args.rounds):
                for name in ("spark", "driver"):
                    began = time.perf_counter()
                    result = (transaction_check(spark, paths, window_start=START, window_end=END) if name == "spark"
                              else driver_transaction_check(paths, window_start=START, window_end=END))  # fmt: skip
                    times[name].append(time.perf_counter() - began)
                    if not result["ok"] or result["rows"] != args.files * size:
                        raise SystemExit(f"{name}: unexpected check {result}")
            spark_s, driver_s = statistics.median(times["spark"]), statistics.median(times["driver"])
            print(f"  {args.files} files x {size:,} rows: Spark job {spark_s:.3f} s, driver {driver_s:.3f} s: {spark_s / driver_s:.1f}x faster")
            figures.report(f"window check in the driver, {args.files}x{size} rows, speed-up vs Spark", spark_s / driver_s, 1.0, "x")
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
