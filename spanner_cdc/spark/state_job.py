"""The `spanner_current_state` data source: Spark tasks that seed a state table from snapshot files, or apply one
window's changes to one key bucket of it (new row versions + position deletes); rows are the written files' entries."""

from __future__ import annotations

import base64
import json
import pickle
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.errors import ExtractError
from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import TIMESTAMP
from spanner_cdc.lake.current_state import CHANGE_COLUMNS, KeyChange, fold, key_text
from spanner_cdc.spark import registry
from spanner_cdc.spark.task_groups import grouped

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import StaticTable
    from pyspark.sql import SparkSession

STATE_SOURCE = "spanner_current_state"
STATE_DDL = "`table` STRING, `kind` STRING, `entry` STRING"  # kind: data or deletes; entry: the DataFile, pickled
ROW_GROUP_BYTES = 4 << 20  # in-memory (Arrow) bytes of a row group of a state table's data file
BATCH_ROWS = 65_536  # rows of a change file read at a time
READ_BUFFER = 1 << 20  # bytes of a column chunk read at a time (0: the whole chunk at once)

# The tasks read Parquet without Arrow's thread pools (use_threads=False, pre_buffer=False): under a memory bound a
# pool thread that cannot get its stack leaves the read waiting for it forever, where an allocation fails cleanly.


class Window(dict[tuple[Any, ...], dict[str, KeyChange]]):
    """One table's window of changes, folded, by (table, inputs, start, end): what the buckets applied one after
    another (in one Spark task, spark/task_groups.py, or in the driver, `run_here`) read once."""


@dataclass(frozen=True)
class Candidate:
    """A data file of the bucket that may hold a changed key, with the position-delete files that apply to it."""

    path: str
    deletes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StateTask:
    """One task: `seed` writes a snapshot file's rows (`inputs`) as data files, bucketed; `apply` applies the window's
    changes (`inputs`: its change files, commits in [start, end)) whose key falls in `bucket` to `candidates`;
    `compact` rewrites the bucket's `candidates` less their deleted rows as one data file."""

    kind: str
    table: str
    metadata_location: str
    io: dict[str, str]
    inputs: list[str]
    bucket: int | None = None
    candidates: list[Candidate] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None
    memory: int | None = None  # bytes the task may allocate beyond its worker's at its start (None: no bound)


def _read(location: str, columns: list[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(storage.bare(location), columns=columns, filesystem=storage.filesystem(location))


def _open(task: StateTask) -> StaticTable:
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(task.metadata_location, properties=task.io)


def _bucketer(handle: StaticTable) -> tuple[str | None, Any]:
    """(the bucketed key column, value -> bucket) of the table's spec; (None, None) when unpartitioned."""
    spec, schema = handle.metadata.spec(), handle.schema()
    if not spec.fields:
        return None, None
    part = spec.fields[0]
    source = schema.find_field(part.source_id)
    return source.name, part.transform.transform(source.field_type)


def _partition(handle: StaticTable, column: str | None, bucket: int | None) -> Any:
    """The partition key of a bucket (pyiceberg takes the transformed value)."""
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

    if column is None:
        return None
    spec, schema = handle.metadata.spec(), handle.schema()
    return PartitionKey([PartitionFieldValue(spec.fields[0], bucket)], spec, schema)


def _write_rows(handle: StaticTable, rows: list[dict[str, Any]], partition_key: Any) -> DataFile:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = handle.schema()
    arrow = schema_to_pyarrow(schema, include_field_ids=False)
    keys = [schema.find_field(i).name for i in schema.identifier_field_ids]
    rows.sort(key=lambda r: tuple((r[k] is not None, r[k]) for k in keys))  # key order, as the table's sort order says
    return write_data(handle, pa.Table.from_pylist([{name: r.get(name) for name in arrow.names} for r in rows], schema=arrow), partition_key)


def write_data(handle: Any, data: pa.Table, partition_key: Any) -> DataFile:
    """One data file of the table's rows `data` (in key order), in row groups of about ROW_GROUP_BYTES each: a task
    that needs a few rows' other columns reads their row groups only, so its memory does not follow the file's size."""
    from pyiceberg.io.pyarrow import write_file
    from pyiceberg.table import TableProperties, WriteTask

    rows = max(1, min(TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT, ROW_GROUP_BYTES * data.num_rows // max(data.nbytes, 1)))
    metadata = handle.metadata.model_copy(
        update={"properties": {**handle.metadata.properties, TableProperties.PARQUET_ROW_GROUP_LIMIT: str(rows)}}
    )
    task = WriteTask(uuid.uuid4(), 0, handle.schema(), data.to_batches(), partition_key=partition_key)
    return next(iter(write_file(handle.io, metadata, iter([task]))))


def _entry(table: str, kind: str, data_file: DataFile) -> dict[str, str]:
    return {"table": table, "kind": kind, "entry": base64.b64encode(pickle.dumps(data_file)).decode()}


def seed(task: StateTask) -> list[dict[str, str]]:
    """Executor side: one snapshot file's rows (every one an INSERT at T0) -> a data file per key bucket."""
    handle = _open(task)
    column, bucket_of = _bucketer(handle)
    by_bucket: dict[int | None, list[dict[str, Any]]] = {}
    for path in task.inputs:
        rows = _read(path, list(CHANGE_COLUMNS)).to_pylist()
        for change in fold(rows).values():
            if change.row is not None:
                by_bucket.setdefault(bucket_of(change.row[column]) if column else None, []).append(change.row)
    return [_entry(task.table, "data", _write_rows(handle, rows, _partition(handle, column, b))) for b, rows in by_bucket.items()]


def _window_changes(task: StateTask) -> list[dict[str, Any]]:
    assert task.start is not None and task.end is not None
    bounds = pa.scalar(task.start, TIMESTAMP), pa.scalar(task.end, TIMESTAMP)
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for path in task.inputs:
        with pq.ParquetFile(storage.bare(path), filesystem=storage.filesystem(path)) as parquet:
            for batch in parquet.iter_batches(columns=list(CHANGE_COLUMNS), batch_size=BATCH_ROWS, use_threads=False):
                stamp = batch.column("commit_timestamp")
                # a file of a token that fell behind may hold other windows' commits: only this window's, of this table
                keep = pc.and_(
                    pc.equal(batch.column("object"), task.table),
                    pc.and_(pc.greater_equal(stamp, bounds[0]), pc.less(stamp, bounds[1])),
                )
                rows += batch.filter(keep).to_pylist()
    return rows


def _deleted_positions(handle: StaticTable, candidate: Candidate, cache: dict[str, pa.Table] | None = None) -> set[int]:
    """The positions of a data file that its delete files remove (each delete file read once per task with `cache`)."""
    import pyarrow.parquet as pq

    out: set[int] = set()
    for path in candidate.deletes:
        data = cache.get(path) if cache is not None else None
        if data is None:
            with handle.io.new_input(path).open() as stream:
                data = pq.read_table(stream, use_threads=False, pre_buffer=False)
            if cache is not None:
                cache[path] = data
        out.update(data.filter(pc.equal(data.column("file_path"), candidate.path)).column("pos").to_pylist())
    return out


def _folded(task: StateTask, window: Window | None) -> dict[str, KeyChange]:
    """The window's net change of every key of the task's table; kept in `window` (one table's at a time) for the
    next bucket of the same table and window."""
    if window is None:
        return fold(_window_changes(task))
    key = (task.table, tuple(task.inputs), task.start, task.end)
    if key not in window:
        window.clear()
        window[key] = fold(_window_changes(task))
    return window[key]


def apply(task: StateTask, window: Window | None = None) -> list[dict[str, str]]:
    """Executor side: the window's net change of every key in the bucket; the live rows those keys had (found by the
    key columns of the bucket's files) are deleted by position and their new versions written to one new data file.
    `window`: the folded changes already read for another bucket of the same run (see `_folded`)."""
    import pyarrow.parquet as pq

    handle = _open(task)
    column, bucket_of = _bucketer(handle)
    changes = {
        k: c for k, c in _folded(task, window).items() if column is None or bucket_of(c.keys[column]) == task.bucket
    }
    if not changes:
        return []
    schema = handle.schema()
    keys = [schema.find_field(i).name for i in schema.identifier_field_ids]
    firsts = pa.array(sorted({c.keys[keys[0]] for c in changes.values()}, key=repr))
    bases: dict[str, dict[str, Any]] = {}
    positions: list[tuple[str, int]] = []
    cache: dict[str, pa.Table] = {}  # a window's delete file names many of the bucket's data files
    for candidate in task.candidates:
        with handle.io.new_input(candidate.path).open() as stream:
            parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=READ_BUFFER)
            offset, deleted = 0, None
            for group in range(parquet.metadata.num_row_groups):  # a row group's key columns at a time
                key_columns = parquet.read_row_group(group, columns=keys, use_threads=False)
                hits = pc.indices_nonzero(
                    pc.is_in(key_columns.column(keys[0]), firsts.cast(key_columns.schema.field(keys[0]).type))
                ).to_pylist()
                if hits and deleted is None:
                    deleted = _deleted_positions(handle, candidate, cache)
                found = [
                    (pos, key_text({k: key_columns.column(k)[pos].as_py() for k in keys}))
                    for pos in hits
                    if offset + pos not in (deleted or ())
                ]
                found = [(pos, text) for pos, text in found if text in changes]
                partial = [(pos, text) for pos, text in found if not changes[text].whole and changes[text].row is not None]
                if partial:  # NEW_VALUES / OLD_AND_NEW_VALUES: the row's other columns, as it was (this row group's only)
                    whole = parquet.read_row_group(group, use_threads=False).take([pos for pos, _ in partial]).to_pylist()
                    bases.update({text: row for (_, text), row in zip(partial, whole, strict=True)})
                positions += [(candidate.path, offset + pos) for pos, _ in found]
                offset += key_columns.num_rows
    rows = [row for text, change in changes.items() if (row := _resolved(change, bases.get(text))) is not None]
    partition = _partition(handle, column, task.bucket)
    out = [_entry(task.table, "data", _write_rows(handle, rows, partition))] if rows else []
    if positions:
        out.append(_entry(task.table, "deletes", _write_deletes(handle, positions, partition)))
    return out


def _resolved(change: KeyChange, base: dict[str, Any] | None) -> dict[str, Any] | None:
    return change.resolve(base)


def _write_deletes(handle: StaticTable, positions: list[tuple[str, int]], partition_key: Any) -> DataFile:
    """An Iceberg v2 position-delete file: (file_path, pos) of each replaced or deleted row, sorted by both."""
    import pyarrow.parquet as pq
    from pyiceberg.table.locations import load_location_provider
    from pyiceberg.typedef import Record

    from spanner_cdc.lake.state_table import DELETE_SCHEMA, delete_data_file

    positions.sort()
    data = pa.table(
        [pa.array([p for p, _ in positions]), pa.array([n for _, n in positions], pa.int64())], schema=DELETE_SCHEMA
    )
    provider = load_location_provider(
        table_location=handle.metadata.location, table_properties=handle.metadata.properties
    )
    path = provider.new_data_location(f"deletes-{uuid.uuid4()}.parquet", partition_key=partition_key)
    output = handle.io.new_output(path)
    with output.create(overwrite=False) as stream:
        pq.write_table(data, stream, compression="zstd")
    size = len(output)
    files = {p for p, _ in positions}
    partition = partition_key.partition if partition_key is not None else Record()
    return delete_data_file(
        handle, path, len(positions), size, partition, next(iter(files)) if len(files) == 1 else None
    )


def compact(task: StateTask) -> list[dict[str, str]]:
    """Executor side: the bucket's data files, less the rows their position deletes remove, as one data file."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    handle = _open(task)
    column, _ = _bucketer(handle)
    arrow = schema_to_pyarrow(handle.schema(), include_field_ids=False)
    rows: list[dict[str, Any]] = []
    cache: dict[str, pa.Table] = {}
    for candidate in task.candidates:
        with handle.io.new_input(candidate.path).open() as stream:
            data = pq.read_table(stream, use_threads=False, pre_buffer=False)
        deleted = _deleted_positions(handle, candidate, cache)
        if deleted:
            data = data.filter(pa.array([i not in deleted for i in range(data.num_rows)]))
        # by name: an older file lacks a column added since (null) and keeps one dropped since (left out)
        rows += [{name: row.get(name) for name in arrow.names} for row in data.to_pylist()]
    if not rows:
        return []
    return [_entry(task.table, "data", _write_rows(handle, rows, _partition(handle, column, task.bucket)))]


def decode_entry(text: str) -> DataFile:
    return pickle.loads(base64.b64decode(text))  # noqa: S301 (written by this job's own tasks)


def _tasks(options: Mapping[str, str]) -> list[StateTask]:
    out = []
    for t in json.loads(options["tasks"]):
        for bound in ("start", "end"):
            t[bound] = datetime.fromisoformat(t[bound]) if t.get(bound) else None
        t["candidates"] = [Candidate(**c) for c in t.get("candidates", [])]
        out.append(StateTask(**t))
    return out


def run_task(task: StateTask, window: Window | None = None) -> list[dict[str, str]]:
    """The task's written files' entries; with a memory bound, from a process of its own bounded to it (task_memory).
    `window`: an apply task's folded changes, shared by the buckets run one after another (unbounded tasks only)."""
    if task.memory is None:
        return apply(task, window) if task.kind == "apply" else _RUN[task.kind](task)
    from spanner_cdc.spark.task_memory import run_bounded

    bucket = "" if task.bucket is None else f", bucket {task.bucket}"
    what = f"the current-state {task.kind} task of table {task.table}{bucket}"
    return list(json.loads(run_bounded(__name__, _payload([task]), task.memory, what)))


_RUN = {"seed": seed, "apply": apply, "compact": compact}


def _bounded_main() -> int:
    """`python -m spanner_cdc.spark.state_job`: one task (a payload of one, on stdin) in this process, its memory
    bounded once the modules the task uses are imported; its entries as JSON on stdout."""
    import sys

    import pyarrow.parquet  # noqa: F401 (imported before the bound: modules are the process's, not the task's)
    import pyiceberg.io.pyarrow  # noqa: F401
    import pyiceberg.table  # noqa: F401

    from spanner_cdc.spark.task_memory import MEMORY_EXIT, limit_this_process

    (task,) = _tasks({"tasks": sys.stdin.read()})
    assert task.memory is not None
    limit_this_process(task.memory)
    try:
        rows = _RUN[task.kind](task)
    except MemoryError as exc:  # pyarrow's ArrowMemoryError is one too
        print(f"MemoryError: {exc}", file=sys.stderr)
        return MEMORY_EXIT
    json.dump(rows, sys.stdout)
    return 0


class StateReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return grouped(len(json.loads(self.options["tasks"])))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        tasks, window = _tasks(self.options), Window()
        for index in partition.value:
            for row in run_task(tasks[index], window):
                yield (row["table"], row["kind"], row["entry"])


class StateDataSource(DataSource):
    """`spark.read.format("spanner_current_state").option("tasks", json).load()`: rows are the written files' entries."""

    @classmethod
    def name(cls) -> str:
        return STATE_SOURCE

    def schema(self) -> str:
        return STATE_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return StateReader(self.options)


def _payload(tasks: list[StateTask]) -> str:
    def plain(t: StateTask) -> dict[str, Any]:
        out = asdict(t)
        out["start"], out["end"] = (t.start.isoformat() if t.start else None), (t.end.isoformat() if t.end else None)
        return out

    return json.dumps([plain(t) for t in tasks])


def run_state_job(spark: SparkSession, tasks: list[StateTask]) -> list[tuple[str, str, DataFile]]:
    """Driver side: the tasks run in Spark; only the written files' entries (table, kind, DataFile) come back."""
    registry.register(spark, StateDataSource)
    try:
        rows = spark.read.format(STATE_SOURCE).schema(STATE_DDL).option("tasks", _payload(tasks)).load().collect()
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
        raise ExtractError(f"the current-state job failed in Spark: {text}") from exc
    return [(row["table"], row["kind"], decode_entry(row["entry"])) for row in rows]


def run_here(tasks: list[StateTask]) -> list[tuple[str, str, DataFile]]:
    """Driver side without Spark: the same tasks one after another in this process, the same entries as
    `run_state_job` (for inputs so small that a driver's start and a job cost more than the work)."""
    window = Window()
    return [(row["table"], row["kind"], decode_entry(row["entry"])) for task in tasks for row in run_task(task, window)]


if __name__ == "__main__":
    raise SystemExit(_bounded_main())
