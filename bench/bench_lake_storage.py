"""Benchmark: the executor's landing rate (envelope batches -> Parquet files published whole) to a local path
vs to a GCS server (gcp-storage-emulator) and an S3 server (moto), side by side in one run."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
from spanner_cdc.model.records import ColumnType, DataChangeRecord, Mod
from spanner_cdc.spark.executor import TableFiles

COMMAND = "python -m bench.bench_lake_storage"
T0 = datetime(2024, 5, 1, 10, tzinfo=UTC)
COLUMNS = (ColumnType("Id", {"code": "INT64"}, True, 1), ColumnType("Payload", {"code": "STRING"}, False, 2))


def batches(rows: int, tables: int) -> list[pa.RecordBatch]:
    """`rows` envelope rows over `tables` tables (built once: the bench times the landing, not the envelope)."""
    context = EnvelopeContext("bench", "spanner-change-stream", "tok", T0, T0 + timedelta(hours=1))
    batcher, out = EnvelopeBatcher(context), []
    for i in range(rows):
        record = DataChangeRecord(
            commit_timestamp=T0 + timedelta(microseconds=i), record_sequence=f"{i:08d}", server_transaction_id=f"tx{i}",
            is_last_record_in_transaction_in_partition=True, table_name=f"T{i % tables}", column_types=COLUMNS,
            mods=(Mod({"Id": str(i)}, {"Payload": "x" * 100}, {}),), mod_type="INSERT", value_capture_type="OLD_AND_NEW_VALUES",
            number_of_records_in_transaction=1, number_of_partitions_in_transaction=1, transaction_tag="",
            is_system_transaction=False,
        )  # fmt: skip
        batcher.add(record, T0)
        if batcher.full:
            out.append(batcher.take())
    last = batcher.take()
    return out + ([last] if last is not None else [])


def land(root: str, data: Sequence[pa.RecordBatch], scratch: Path) -> float:
    """Seconds to land `data` as one token's files under `root` (written, closed, published)."""
    name = uuid.uuid4().hex[:8]
    started = time.perf_counter()
    files = TableFiles(lambda table: f"{root}/{name}/table={table}/part-000.parquet", scratch)
    for batch in data:
        files.write(batch)
    files.close()
    return time.perf_counter() - started


@contextmanager
def places() -> Iterator[list[tuple[str, str]]]:
    """(label, root) of each place, with the object stores' servers running meanwhile."""
    from spanner_cdc.devstack.object_stores import running_gcs_server, running_s3_server

    with ExitStack() as stack:
        base = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        found = [("local path", str(base / "lake"))]
        for label, running in (("GCS server", running_gcs_server), ("S3 server", running_s3_server)):
            store = stack.enter_context(running(base))
            os.environ.update(store.env)
            found.append((label, store.root("bench")))
        yield found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    data = batches(args.rows, args.tables)
    best: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch, places() as where:
        # round robin: a burst of load on the machine falls on every place alike
        for _ in range(args.repeat):
            for label, root in where:
                best[label] = min(best.get(label, float("inf")), land(root, data, Path(scratch)))
    results = {label: args.rows / seconds for label, seconds in best.items()}
    for label, rate in results.items():
        print(f"{label:12s} {rate:>12,.0f} rows/s (best of {args.repeat}, {args.rows} rows, {args.tables} files)")
    base = results["local path"]
    for label, rate in results.items():
        print(f"{label:12s} {rate / base:6.2f}x the local path's rate")
    print(f"command: {COMMAND} --rows {args.rows} --tables {args.tables} --repeat {args.repeat}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
