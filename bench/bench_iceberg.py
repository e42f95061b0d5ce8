"""Benchmark: the Iceberg commit of a closed window (its files added in one snapshot) vs landing the window's
files, side by side in one run: seconds per window, milliseconds per file, and what a re-run of the close costs."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from bench.figures import report
from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
from spanner_cdc.lake.iceberg import land_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.model.records import ColumnType, DataChangeRecord, Mod
from spanner_cdc.settings import Settings
from spanner_cdc.spark.executor import TableFiles
from spanner_cdc.store.models import ManifestFile

COMMAND = "python -m bench.bench_iceberg"
T0 = datetime(2024, 5, 1, 10, tzinfo=UTC)
HOUR = timedelta(hours=1)
COLUMNS = (ColumnType("Id", {"code": "INT64"}, True, 1), ColumnType("Payload", {"code": "STRING"}, False, 2))


def token_batches(start: datetime, token: int, rows: int, tables: int) -> list[pa.RecordBatch]:
    """One token's envelope rows of the window (built before the clock starts: the landing is what is timed)."""
    batcher, out = EnvelopeBatcher(EnvelopeContext("bench", "spanner-change-stream", f"tok{token}", start, start + HOUR)), []
    for i in range(rows):
        record = DataChangeRecord(
            commit_timestamp=start + timedelta(microseconds=i * 97 + token), record_sequence=f"{i:08d}",
            server_transaction_id=f"tx{token}-{i}", is_last_record_in_transaction_in_partition=True,
            table_name=f"T{i % tables}", column_types=COLUMNS, mods=(Mod({"Id": str(i)}, {"Payload": "x" * 100}, {}),),
            mod_type="INSERT", value_capture_type="OLD_AND_NEW_VALUES", number_of_records_in_transaction=1,
            number_of_partitions_in_transaction=1, transaction_tag="", is_system_transaction=False,
        )  # fmt: skip
        batcher.add(record, start)
        if batcher.full:
            out.append(batcher.take())
    last = batcher.take()
    return out + ([last] if last is not None else [])


def land_window_files(layout: LakeLayout, start: datetime, data: list[list[pa.RecordBatch]], scratch: Path) -> tuple[float, list[ManifestFile]]:
    """Seconds to land every token's files of the window at their lake names, and their manifest rows."""
    files: list[ManifestFile] = []
    started = time.perf_counter()
    for token, batches in enumerate(data):
        name = dict(lineage_id=1, token=f"tok{token}", range_start=start, range_end=start + HOUR, window_start=start)
        writer = TableFiles(lambda table, name=name: layout.published_location(table=table, **name), scratch)  # type: ignore[misc]
        for batch in batches:
            writer.write(batch)
        listing = writer.close().to_pylist()
        files += [ManifestFile(r["path"], f"tok{token}", start, start + HOUR, start, start + HOUR, r["rows"], r["bytes"], r["table"])
                  for r in listing]  # fmt: skip
    return time.perf_counter() - started, files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--windows", type=int, default=5, help="windows landed and committed (default 5)")
    parser.add_argument("--tokens", type=int, default=8, help="tokens per window (default 8)")
    parser.add_argument("--tables", type=int, default=4, help="tables: files per token (default 4)")
    parser.add_argument("--rows", type=int, default=5000, help="rows per token (default 5000)")
    args = parser.parse_args(argv)
    from spanner_cdc.devstack.embedded_pg import ensure_running

    with tempfile.TemporaryDirectory(prefix="bench-iceberg-") as tmp:
        server = ensure_running(Path(tmp) / "postgres")
        try:
            settings = Settings(metadata_url=server.create_database("bench_iceberg"), output_root=Path(tmp) / "lake",
                                stream="bench", iceberg_catalog="store")  # fmt: skip
            layout = LakeLayout(settings.output_root, "bench", settings.namespace)
            landing, commit, rerun, per_file = [], [], [], []
            for n in range(args.windows):
                start = T0 + n * HOUR
                data = [token_batches(start, t, args.rows, args.tables) for t in range(args.tokens)]
                seconds, files = land_window_files(layout, start, data, Path(tmp))
                done = land_window(settings, layout, window_start=start, window_end=start + HOUR, files=files)
                again = land_window(settings, layout, window_start=start, window_end=start + HOUR, files=files)
                assert done is not None and done.added == len(files) and again is not None and again.snapshot_id is None
                landing.append(seconds), commit.append(done.seconds), rerun.append(again.seconds)
                per_file.append(done.seconds / len(files))
                print(f"window {n}: {len(files)} files, {args.tokens * args.rows} rows: landed {seconds:.3f} s, "
                      f"committed {done.seconds:.3f} s ({1000 * done.seconds / len(files):.1f} ms/file), re-run {again.seconds:.3f} s")  # fmt: skip
        finally:
            server.stop()
    med = statistics.median
    print(f"medians over {args.windows} windows: landing {med(landing):.3f} s, Iceberg commit {med(commit):.3f} s "
          f"({1000 * med(per_file):.1f} ms per file; {med(commit) / med(landing):.2f}x the landing), re-run {med(rerun):.3f} s")  # fmt: skip
    report("Iceberg commit per window", med(commit), 1.0, "s", higher_is_better=False)
    report("Iceberg commit per file", 1000 * med(per_file), 50.0, "ms", higher_is_better=False)
    report("Iceberg commit / landing", med(commit) / med(landing), 0.5, "x", higher_is_better=False)
    print(f"command: {COMMAND} --windows {args.windows} --tokens {args.tokens} --tables {args.tables} --rows {args.rows}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
