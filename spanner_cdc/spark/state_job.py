"""The `spanner_current_state` data source: one Spark task per table, previous state + one window's changes -> new state."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.errors import ExtractError
from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import TIMESTAMP
from spanner_cdc.lake.current_state import CHANGE_COLUMNS, TableState, apply_changes
from spanner_cdc.spark import registry
from spanner_cdc.spark.datasource import FILES_DDL
from spanner_cdc.spark.executor import FILES_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STATE_SOURCE = "spanner_current_state"


@dataclass(frozen=True)
class StateTask:
    """One table's step: its previous state (if any), the change files to apply (commits in [start, end)) and where to write."""

    table: str
    previous: str | None
    snapshot: list[str]  # the initial snapshot's files: applied whole (every row is at T0, before the window)
    changes: list[str]
    start: datetime
    end: datetime
    destination: str


def _read(location: str, columns: list[str] | None = None) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(storage.bare(location), columns=columns, filesystem=storage.filesystem(location))


def step(task: StateTask) -> pa.RecordBatch:
    """Executor side: fold the table's changes into its previous state, publish the new state whole; its listing."""
    import pyarrow.parquet as pq

    states = {task.table: TableState.from_arrow(task.table, _read(task.previous)) if task.previous else TableState(task.table)}
    for path in task.snapshot:
        apply_changes(states, _read(path, list(CHANGE_COLUMNS)).to_pylist())
    bounds = pa.scalar(task.start, TIMESTAMP), pa.scalar(task.end, TIMESTAMP)
    window: list[dict[str, Any]] = []
    for path in task.changes:
        data = _read(path, list(CHANGE_COLUMNS))
        stamp = data.column("commit_timestamp")
        # a file of a token that fell behind may hold other windows' commits: only this window's are applied
        window += data.filter(pc.and_(pc.greater_equal(stamp, bounds[0]), pc.less(stamp, bounds[1]))).to_pylist()
    apply_changes(states, window)  # in commit order across the files: a parent's and its children's changes interleave
    table = states[task.table].to_arrow()
    scratch = storage.scratch_for(task.destination, Path(tempfile.gettempdir()) / "spanner-cdc" / uuid.uuid4().hex)
    pq.write_table(table, scratch, compression="snappy")
    size = storage.put_file(scratch, task.destination)
    return pa.RecordBatch.from_arrays(
        [pa.array([task.table]), pa.array([task.destination]), pa.array([table.num_rows], pa.int64()), pa.array([size], pa.int64())],
        schema=FILES_SCHEMA,
    )


def _tasks(options: Mapping[str, str]) -> list[StateTask]:
    out = []
    for t in json.loads(options["tasks"]):
        t["start"], t["end"] = datetime.fromisoformat(t["start"]), datetime.fromisoformat(t["end"])
        out.append(StateTask(**t))
    return out


class StateReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(len(json.loads(self.options["tasks"])))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        yield step(_tasks(self.options)[int(partition.value)])


class StateDataSource(DataSource):
    """`spark.read.format("spanner_current_state").option("tasks", json).load()`: rows are the written state files."""

    @classmethod
    def name(cls) -> str:
        return STATE_SOURCE

    def schema(self) -> str:
        return FILES_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return StateReader(self.options)


def run_state_job(spark: SparkSession, tasks: list[StateTask]) -> list[dict[str, Any]]:
    """Driver side: a task per table; only the listing of the written states comes back."""
    registry.register(spark, StateDataSource)
    payload = json.dumps([{**t.__dict__, "start": t.start.isoformat(), "end": t.end.isoformat()} for t in tasks])
    try:
        return [row.asDict() for row in spark.read.format(STATE_SOURCE).schema(FILES_DDL).option("tasks", payload).load().collect()]
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
        raise ExtractError(f"the current-state job failed in Spark: {text}") from exc
