"""The `spanner_verify` data source: Spark tasks that hash a state table's rows per key, from the source (a PartitionQuery
partition of a stale read) or from the lake (a key bucket's files at the window's snapshot); the driver compares them."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.errors import ExtractError
from spanner_cdc.lake.current_state import key_text, typed
from spanner_cdc.lake.verify_rows import SHOWN, row_hash, state_problem
from spanner_cdc.spark import registry
from spanner_cdc.spark.state_job import Candidate, _bucketer, _deleted_positions
from spanner_cdc.spark.task_groups import grouped

if TYPE_CHECKING:
    from pyiceberg.table import StaticTable
    from pyspark.sql import SparkSession

    from spanner_cdc.policy import PolicyApplier

VERIFY_SOURCE = "spanner_verify"
VERIFY_DDL = "`table` STRING, `side` STRING, `key` STRING, `hash` STRING"


@dataclass(frozen=True)
class VerifyTask:
    """`source`: one PartitionQuery partition (`partition`, base64) of the shared read-only transaction at the window's
    end - 1 us, its rows hashed; `lake`: the bucket's data files at the window's snapshot (`candidates`), less their
    deleted rows, hashed. Either keeps only keys in `buckets` (None: every key)."""

    kind: str
    table: str
    metadata_location: str
    io: dict[str, str]
    schema_id: int
    buckets: list[int] | None
    candidates: list[Candidate] = field(default_factory=list)
    project: str = ""
    instance: str = ""
    database: str = ""
    emulator_host: str | None = None
    sql: str = ""
    session_id: str = ""
    transaction_id: str = ""
    partition: str = ""
    read_options: str = ""  # the stream's ReadOptions as text: Data Boost, priority, directed reads of the source side


def _open(task: VerifyTask) -> tuple[StaticTable, pa.Schema, list[str]]:
    """The table, the Arrow schema of the window's snapshot and its key columns."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.table import StaticTable

    handle = StaticTable.from_metadata(task.metadata_location, properties=task.io)
    schema = handle.metadata.schema_by_id(task.schema_id) or handle.schema()
    keys = [schema.find_field(i).name for i in schema.identifier_field_ids]
    return handle, schema_to_pyarrow(schema, include_field_ids=False), keys


def _hashed(
    task: VerifyTask, handle: StaticTable, arrow: pa.Schema, keys: list[str], data: pa.Table
) -> Iterator[tuple[str, str, str, str]]:
    """Rows (already typed as the state's columns) -> (table, side, key, hash) of those whose key is in the buckets."""
    column, bucket_of = _bucketer(handle)
    wanted = None if task.buckets is None or column is None else set(task.buckets)
    for row in data.to_pylist():
        if wanted is not None and bucket_of(row[column]) not in wanted:
            continue
        yield task.table, task.kind, key_text({k: row[k] for k in keys}), row_hash([row[n] for n in arrow.names])


def _conform(data: pa.Table, arrow: pa.Schema) -> pa.Table:
    """A data file's rows as the snapshot's columns, by name (an older file lacks a column added since: null)."""
    columns = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
        for f in arrow
    ]
    return pa.Table.from_arrays(columns, schema=arrow)


def lake_rows(task: VerifyTask) -> Iterator[tuple[str, str, str, str]]:
    """Executor side: the bucket's live rows at the window's snapshot, hashed."""
    import pyarrow.parquet as pq

    handle, arrow, keys = _open(task)
    for candidate in task.candidates:
        with handle.io.new_input(candidate.path).open() as stream:
            data = pq.read_table(stream)
        deleted = _deleted_positions(handle, candidate)
        if deleted:
            data = data.filter(pa.array([i not in deleted for i in range(data.num_rows)]))
        yield from _hashed(task, handle, arrow, keys, _conform(data, arrow))


def source_rows(task: VerifyTask, policy: PolicyApplier | None = None) -> Iterator[tuple[str, str, str, str]]:
    """Executor side: one partition of the stale read, each row through the window's landing `policy` (hashed,
    masked and nulled as the lake holds it) and typed as the state types it, hashed."""
    from google.cloud.spanner_v1.database import BatchSnapshot

    from spanner_cdc.policy import HASHED_TYPE
    from spanner_cdc.read_options import ReadOptions
    from spanner_cdc.source.snapshot_tables import plain, type_json
    from spanner_cdc.spark.executor import _database

    handle, arrow, keys = _open(task)
    shared = {"session_id": task.session_id, "transaction_id": base64.b64decode(task.transaction_id)}
    snapshot = BatchSnapshot.from_dict(_database(task), shared)
    batch_query = ReadOptions.from_text(task.read_options).batch_query(task.sql, base64.b64decode(task.partition), tag="spanner-cdc-verify")
    results = snapshot.process_query_batch(batch_query, lazy_decode=True)
    batch: list[dict[str, Any]] = []
    types: list[tuple[str, dict[str, Any]]] = []
    rules = policy.rules_of(task.table) if policy is not None else {}
    for row in results:
        if not types:  # the metadata arrives with the first rows
            types = [(f.name, HASHED_TYPE if rules.get(f.name) in ("hash", "mask") else type_json(f.type_)) for f in results.fields]
        values = {name: plain(value) for (name, _), value in zip(types, row, strict=True)}
        if rules and policy is not None:
            values = policy.values(task.table, values)
        batch.append({name: typed(kind, values.get(name)) for name, kind in types})
        if len(batch) >= 10_000:
            yield from _hashed(task, handle, arrow, keys, pa.Table.from_pylist(batch, schema=arrow))
            batch = []
    if batch:
        yield from _hashed(task, handle, arrow, keys, pa.Table.from_pylist(batch, schema=arrow))


def _tasks(options: Mapping[str, str]) -> list[VerifyTask]:
    out = []
    for t in json.loads(options["tasks"]):
        t["candidates"] = [Candidate(**c) for c in t.get("candidates", [])]
        out.append(VerifyTask(**t))
    return out


class VerifyReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return grouped(len(json.loads(self.options["tasks"])))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from spanner_cdc.policy import applier_from

        tasks = _tasks(self.options)
        policy = applier_from(self.options.get("policy") or "", self.options.get("policy_secret") or "")
        for index in partition.value:
            task = tasks[index]
            yield from (lake_rows(task) if task.kind == "lake" else source_rows(task, policy))


class VerifyDataSource(DataSource):
    """`spark.read.format("spanner_verify").option("tasks", json).load()`: rows are (table, side, key, hash)."""

    @classmethod
    def name(cls) -> str:
        return VERIFY_SOURCE

    def schema(self) -> str:
        return VERIFY_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return VerifyReader(self.options)


@dataclass
class Compared:
    """One table's comparison: rows on each side, mismatching keys, the first SHOWN of them as (key, problem)."""

    lake_rows: int = 0
    source_rows: int = 0
    mismatches: int = 0
    examples: list[tuple[str, str]] = field(default_factory=list)


def run_verify_job(spark: SparkSession, tasks: list[VerifyTask], policy: str = "", policy_secret: str = "") -> dict[str, Compared]:
    """Driver side: the tasks hash both sides in Spark, which joins them by key; only per-table counts and the first
    mismatching keys come back (one action: the source is read once). `policy` and `policy_secret`: the window's
    landing policy (JSON text) and its key as hex, applied to the source's rows (an option Spark redacts)."""
    from pyspark.sql import functions as F

    registry.register(spark, VerifyDataSource)
    rows = (
        spark.read.format(VERIFY_SOURCE)
        .schema(VERIFY_DDL)
        .option("tasks", json.dumps([asdict(t) for t in tasks]))
        .option("policy", policy)
        .option("policy_secret", policy_secret)
        .load()
    )
    lake, source = F.col("side") == "lake", F.col("side") == "source"
    keyed = rows.groupBy("table", "key").agg(
        F.max(F.when(lake, F.col("hash"))).alias("lake_hash"),
        F.max(F.when(source, F.col("hash"))).alias("source_hash"),
        F.sum(F.when(lake, 1).otherwise(0)).alias("lake_n"),
        F.sum(F.when(source, 1).otherwise(0)).alias("source_n"),
    )
    bad = (
        F.col("lake_hash").isNull() | F.col("source_hash").isNull() | (F.col("lake_hash") != F.col("source_hash"))
        | (F.col("lake_n") > 1) | (F.col("source_n") > 1)
    )  # fmt: skip
    wrong = F.when(bad, F.struct("key", "lake_hash", "source_hash", "lake_n", "source_n"))
    per_table = keyed.groupBy("table").agg(
        F.sum("lake_n").alias("lake_rows"),
        F.sum("source_n").alias("source_rows"),
        F.sum(F.when(bad, 1).otherwise(0)).alias("mismatches"),
        F.slice(F.sort_array(F.collect_list(wrong)), 1, SHOWN).alias("examples"),
    )
    try:
        found = per_table.collect()
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
        raise ExtractError(f"the verify job failed in Spark: {text}") from exc
    out = {}
    for r in found:
        examples = []
        for e in r["examples"]:
            problem = state_problem(e["lake_hash"], e["source_hash"], int(e["lake_n"]), int(e["source_n"]))
            examples.append((str(e["key"]), problem or "values differ"))
        out[str(r["table"])] = Compared(int(r["lake_rows"]), int(r["source_rows"]), int(r["mismatches"]), examples)
    return out
