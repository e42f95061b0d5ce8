"""Benchmark: a window of 1,000 updates and deletes applied to a current-state Iceberg table of 100,000 and of
1,000,000 rows (merge-on-read: a data file of new row versions plus position deletes), side by side with today's
baseline (the whole state read, changed and rewritten), and full-scan times after 1, 10 and 50 windows, before and
after the delete files are folded, against a freshly written table. The apply runs its bucket tasks in one process
(the work of the Spark tasks without Spark's scheduling); each scenario runs in its own process for its peak memory."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import resource
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.figures import report

COMMAND = "python -m bench bench_state"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)
TYPES = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Qty", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 3},
    {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 4},
]
CHANGE_SCHEMA = pa.schema([
    ("object", pa.string()), ("commit_timestamp", pa.timestamp("us", tz="UTC")), ("server_transaction_id", pa.string()),
    ("record_sequence", pa.string()), ("mod_index", pa.int64()), ("change_type", pa.string()), ("keys", pa.string()),
    ("new_values", pa.string()), ("column_types", pa.string()), ("value_capture_type", pa.string()),
])  # fmt: skip


def rows_of(ids: Sequence[int]) -> pa.Table:
    return pa.table({"Id": pa.array(ids, pa.int64()), "Name": [f"name-{i}" for i in ids], "Qty": pa.array(ids, pa.int64()),
                     "Note": [f"note {i:012d} " + "x" * 40 for i in ids]})  # fmt: skip


def window_file(path: Path, n: int, rng: random.Random, size: int, changes: int) -> Path:
    """A window of `changes` partial updates (70%) and deletes (30%) of random keys (a deleted key comes back as an insert)."""
    text = json.dumps(TYPES)
    out = []
    for i, key in enumerate(rng.sample(range(size), changes)):
        stamp = T0 + n * HOUR + timedelta(microseconds=i + 1)
        kind = "UPDATE" if i % 10 < 7 else ("DELETE" if n % 2 == 0 else "INSERT")
        values = (
            {"Qty": str(rng.randrange(10**6))}
            if kind == "UPDATE"
            else ({} if kind == "DELETE" else {"Name": "back", "Qty": "1", "Note": "re"})
        )
        out.append({"object": "T", "commit_timestamp": stamp, "server_transaction_id": f"w{n}-{i}", "record_sequence": "0",
                    "mod_index": 0, "change_type": kind, "keys": json.dumps({"Id": str(key)}), "new_values": json.dumps(values),
                    "column_types": text, "value_capture_type": "NEW_VALUES"})  # fmt: skip
    pq.write_table(pa.Table.from_pylist(out, schema=CHANGE_SCHEMA), path)
    return path


def _catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("bench", uri=f"sqlite:///{root}/catalog.db", warehouse=f"file://{root}")


def seed_table(root: Path, size: int, name: str = "T", rows: pa.Table | None = None) -> Any:
    """A state table of `size` rows (or of `rows`), written bucket by bucket (the seed's layout) with the state's writer."""
    from spanner_cdc.lake.current_state import Column
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.lake.state_table import BUCKETS, commit_row_delta, ensure_state_table
    from spanner_cdc.spark.state_job import _partition, write_data

    handle = ensure_state_table(
        _catalog(root), LakeLayout(str(root / "lake"), "bench", "ns"), name, [Column(**c) for c in TYPES]
    )
    bucket = handle.spec().fields[0].transform.transform(handle.schema().find_field("Id").field_type)
    data = rows if rows is not None else rows_of(range(size))
    groups: dict[int, list[int]] = {}
    for position, key in enumerate(data.column("Id").to_pylist()):
        groups.setdefault(bucket(key), []).append(position)
    plain = pa.schema([("Id", pa.int64()), ("Name", pa.string()), ("Qty", pa.int64()), ("Note", pa.string())])
    files = []
    for b in (b for b in range(BUCKETS) if groups.get(b)):
        files.append(write_data(handle, data.take(pa.array(groups[b])).cast(plain), _partition(handle, "Id", b)))
    commit_row_delta(handle, files, [], {"spanner-cdc.snapshot-at": T0.isoformat()})
    return handle


def apply_window(handle: Any, path: Path, n: int) -> tuple[float, int]:
    """One window applied as the Spark job's tasks would (in this process), then committed: (seconds, bytes written)."""
    from spanner_cdc.extract.current_state import _apply_tasks
    from spanner_cdc.lake.state_table import commit_row_delta, window_properties
    from spanner_cdc.spark.state_job import decode_entry, run_task
    from spanner_cdc.store.models import WindowRow

    started = time.perf_counter()
    window = WindowRow.__new__(WindowRow)
    object.__setattr__(window, "start", T0 + n * HOUR)
    object.__setattr__(window, "end", T0 + (n + 1) * HOUR)
    handle.refresh()
    files = [decode_entry(r["entry"]) for t in _apply_tasks(handle, "T", {}, [str(path)], window) for r in run_task(t)]
    data = [f for f in files if f.content == 0]
    deletes = [f for f in files if f.content != 0]
    for f in files:
        f.spec_id = handle.metadata.default_spec_id
    commit_row_delta(handle, data, deletes, window_properties(window.start, window.end))
    return time.perf_counter() - started, sum(f.file_size_in_bytes for f in files)


def table_bytes(handle: Any) -> int:
    return sum(t.file.file_size_in_bytes for t in handle.scan().plan_files())


def scan_seconds(handle: Any) -> float:
    started = time.perf_counter()
    handle.refresh().scan().to_arrow()
    return time.perf_counter() - started


def fold(handle: Any) -> None:
    from spanner_cdc.lake.state_table import commit_fold
    from spanner_cdc.spark.state_job import Candidate, StateTask, decode_entry, run_task

    handle.refresh()
    planned = list(handle.scan().plan_files())
    groups: dict[int, list[Any]] = {}
    for p in planned:
        groups.setdefault(p.file.partition[0], []).append(p)
    dirty = {p.file.partition[0] for p in planned if p.delete_files}
    added = []
    for b in sorted(dirty):
        task = StateTask(
            "compact",
            "T",
            handle.metadata_location,
            {},
            [],
            b,
            [Candidate(p.file.file_path, [d.file_path for d in p.delete_files]) for p in groups[b]],
        )
        added += [decode_entry(r["entry"]) for r in run_task(task)]
    for f in added:
        f.spec_id = handle.metadata.default_spec_id
    commit_fold(handle, [p.file for b in dirty for p in groups[b]], added, {"spanner-cdc.maintenance": "fold-deletes"})


def scenario_seed(root: str, size: int, result: Any) -> None:
    seed_table(Path(root), size)
    result.put({})


def scenario_apply(root: str, size: int, changes: int, result: Any) -> None:
    """One window on the seeded table of `size` rows, in a process of its own: its apply time, bytes and peak memory."""
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.lake.state_table import state_identifier

    handle = _catalog(Path(root)).load_table(state_identifier(LakeLayout(str(Path(root) / "lake"), "bench", "ns"), "T"))
    path = window_file(Path(root) / "w.parquet", 1, random.Random(size), size, changes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    seconds, written = apply_window(handle, path, 1)
    result.put({"seconds": seconds, "written": written, "table": table_bytes(handle),
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_mb": before / 1024})  # fmt: skip


def scenario_baseline(size: int, changes: int, result: Any) -> None:
    """Today's full rewrite: the whole state read into one process, the window applied, the whole state written."""
    from spanner_cdc.lake.current_state import fold as fold_changes

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pq.write_table(rows_of(range(size)), root / "state.parquet", compression="snappy")
        path = window_file(root / "w.parquet", 1, random.Random(size), size, changes)
        started = time.perf_counter()
        state = {r["Id"]: r for r in pq.read_table(root / "state.parquet").to_pylist()}
        for change in fold_changes(pq.read_table(path).to_pylist()).values():
            row = change.resolve(state.get(change.keys["Id"]))
            if row is None:
                state.pop(change.keys["Id"], None)
            else:
                state[change.keys["Id"]] = {**{"Name": None, "Qty": None, "Note": None}, **row}
        pq.write_table(pa.Table.from_pylist(list(state.values())), root / "next.parquet", compression="snappy")
        seconds = time.perf_counter() - started
        result.put({"seconds": seconds, "written": (root / "next.parquet").stat().st_size, "table": (root / "state.parquet").stat().st_size,
                    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "before_mb": 0.0})  # fmt: skip


def scenario_scans(size: int, changes: int, windows: int, result: Any) -> None:
    """Full-scan seconds after 1, 10 and `windows` windows, after folding the deletes, and of a fresh table."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        handle = seed_table(root, size)
        rng, scans, applies = random.Random(size), {}, []
        for n in range(1, windows + 1):
            applies.append(apply_window(handle, window_file(root / f"w{n}.parquet", n, rng, size, changes), n)[0])
            if n in (1, 10, windows):
                scans[n] = min(scan_seconds(handle) for _ in range(2))
        current = handle.refresh().scan().to_arrow()
        fold(handle)
        folded = min(scan_seconds(handle) for _ in range(2))
        assert handle.scan().to_arrow().sort_by("Id").equals(current.sort_by("Id")), "the fold changed the rows"
        fresh = seed_table(root, 0, "Fresh", current.select(["Id", "Name", "Qty", "Note"]))
        assert fresh.scan().to_arrow().num_rows == current.num_rows
        result.put(
            {"scans": scans, "folded": folded, "fresh": min(scan_seconds(fresh) for _ in range(2)), "applies": applies}
        )


def _run(target: Any, *args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=target, args=(*args, queue))
    process.start()
    while True:
        try:
            out = queue.get(timeout=5)
            break
        except Exception:  # queue.Empty: the scenario still runs, unless its process died
            if not process.is_alive():
                raise RuntimeError(f"{target.__name__} failed (exit {process.exitcode})") from None
    process.join()
    return dict(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000", help="table sizes in rows (default: 100000,1000000)")
    parser.add_argument("--changes", type=int, default=1000, help="changes per window (default: 1000)")
    parser.add_argument("--windows", type=int, default=50, help="windows before the last full scan (default: 50)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(
        f"{'rows':>9}  {'apply s':>8}  {'baseline s':>10}  {'written / table':>15}  {'baseline written':>16}  {'peak MB':>8}  {'baseline MB':>11}"
    )
    applied = {}
    for size in sizes:
        with tempfile.TemporaryDirectory() as root:
            _run(scenario_seed, root, size)
            mor = _run(scenario_apply, root, size, args.changes)
        base = _run(scenario_baseline, size, args.changes)
        applied[size] = mor
        print(f"{size:>9}  {mor['seconds']:>8.3f}  {base['seconds']:>10.3f}  {mor['written'] / mor['table']:>14.2%}  "
              f"{base['written'] / base['table']:>15.0%}  {mor['peak_mb']:>8.0f}  {base['peak_mb']:>11.0f}")  # fmt: skip
    small, large = applied[sizes[0]], applied[sizes[-1]]
    report("state apply: large / small table", large["seconds"] / small["seconds"], 1.5, "x", higher_is_better=False)
    report("state bytes written / table", 100 * large["written"] / large["table"], 5.0, "%", higher_is_better=False)
    report(
        "state apply peak memory: large / small",
        max(large["peak_mb"] - large["before_mb"], 1) / max(small["peak_mb"] - small["before_mb"], 1),
        1.5,
        "x",
        higher_is_better=False,
    )
    scans = _run(scenario_scans, sizes[-1], args.changes, args.windows)
    print(f"full scan of {sizes[-1]} rows: " + ", ".join(f"after {n} windows {s:.3f} s" for n, s in scans["scans"].items())
          + f"; folded {scans['folded']:.3f} s; fresh table {scans['fresh']:.3f} s; apply s first/last window "
          f"{scans['applies'][0]:.3f}/{scans['applies'][-1]:.3f}")  # fmt: skip
    report(
        "state full scan after windows and fold / fresh",
        scans["folded"] / scans["fresh"],
        1.3,
        "x",
        higher_is_better=False,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
