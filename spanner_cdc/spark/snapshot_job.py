"""The `spanner_snapshot` data source: one Spark task per PartitionQuery partition of a table read at T0, landing Parquet."""

from __future__ import annotations

import base64
import json
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from spanner_cdc.errors import ExtractError
from spanner_cdc.lake.envelope import DEFAULT_MAX_ROWS, column_types_json
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.snapshot import SnapshotContext, snapshot_batch
from spanner_cdc.model.records import ColumnType
from spanner_cdc.policy import applier_from
from spanner_cdc.source.snapshot_tables import plain, type_json
from spanner_cdc.spark import registry
from spanner_cdc.spark.datasource import FILES_DDL
from spanner_cdc.spark.executor import TableFiles, _database

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SNAPSHOT_SOURCE = "spanner_snapshot"
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True)
class SnapshotJobSpec:
    """One table's partitioned read at `at`: the shared read-only transaction and every partition token (base64)."""

    project: str
    instance: str
    database: str
    emulator_host: str | None
    stream: str
    namespace: str
    output_root: str
    table: str
    sql: str
    keys: str  # JSON list of the key columns, in key order
    ordinals: str  # JSON object: column -> ordinal position in the table
    value_capture_type: str
    at: datetime
    session_id: str
    transaction_id: str
    partitions: str  # JSON list of base64 partition tokens
    max_rows: int = DEFAULT_MAX_ROWS
    # the landing policy's JSON text ("" for none) and its HMAC key as hex (as a token job's: `spark/spec.py`)
    policy: str = ""
    policy_secret: str = field(default="", repr=False)
    read_options: str = ""  # the stream's ReadOptions as text: Data Boost, priority, directed reads ("" for none)

    def options(self) -> dict[str, str]:
        return {k: v.isoformat() if isinstance(v, datetime) else str(v) for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> SnapshotJobSpec:
        values: dict[str, Any] = {name: options.get(name) for name in cls.__dataclass_fields__}
        values["emulator_host"] = values["emulator_host"] or None
        values["at"] = datetime.fromisoformat(str(values["at"]))
        values["max_rows"] = int(values["max_rows"] or DEFAULT_MAX_ROWS)
        values["policy"], values["policy_secret"] = values["policy"] or "", values["policy_secret"] or ""
        values["read_options"] = values["read_options"] or ""
        return cls(**values)

    @property
    def tokens(self) -> list[bytes]:
        return [base64.b64decode(t) for t in json.loads(self.partitions)]


def _column_types(spec: SnapshotJobSpec, fields: Any) -> tuple[ColumnType, ...]:
    keys, ordinals = set(json.loads(spec.keys)), json.loads(spec.ordinals)
    return tuple(ColumnType(f.name, type_json(f.type_), f.name in keys, int(ordinals.get(f.name, 0))) for f in fields)


def _batches(spec: SnapshotJobSpec, index: int) -> Iterator[pa.RecordBatch]:
    """Run partition `index` of the shared transaction; its rows as lake batches of at most max_rows, through the
    stream's landing policy (the same rules, and the same hashes, as the change log's)."""
    from google.cloud.spanner_v1.database import BatchSnapshot

    from spanner_cdc.read_options import ReadOptions

    shared = {"session_id": spec.session_id, "transaction_id": base64.b64decode(spec.transaction_id)}
    snapshot = BatchSnapshot.from_dict(_database(spec), shared)
    batch_query = ReadOptions.from_text(spec.read_options).batch_query(spec.sql, spec.tokens[index], tag="spanner-cdc-snapshot")
    results = snapshot.process_query_batch(batch_query, lazy_decode=True)
    key_count = len(json.loads(spec.keys))
    policy = applier_from(spec.policy, spec.policy_secret)
    context: SnapshotContext | None = None
    names: list[str] = []
    keys: list[str] = []
    values: list[str] = []
    for row in results:
        if context is None:  # the metadata arrives with the first rows
            types = _column_types(spec, results.fields)
            names = [c.name for c in types]
            primary = tuple(names[:key_count])
            landed = types if policy is None else policy.column_types(spec.table, types)
            context = SnapshotContext(spec.stream, spec.at, spec.table, spec.value_capture_type, column_types_json(landed), primary)
        key = {n: plain(v) for n, v in zip(names[:key_count], row[:key_count], strict=True)}
        value = {n: plain(v) for n, v in zip(names[key_count:], row[key_count:], strict=True)}
        if policy is not None:
            key, value = policy.values(spec.table, key), policy.values(spec.table, value)
        keys.append(_encode(key))
        values.append(_encode(value))
        if len(keys) >= spec.max_rows:
            yield snapshot_batch(context, keys, values)
            keys, values = [], []
    if context is not None and keys:
        yield snapshot_batch(context, keys, values)


def land_part(spec: SnapshotJobSpec, index: int) -> Iterator[pa.RecordBatch]:
    """Executor side: land partition `index` as one Parquet file at its deterministic name; yield its listing."""
    layout = LakeLayout(spec.output_root, spec.stream, spec.namespace)
    count = len(spec.tokens)
    files = TableFiles(lambda table: layout.snapshot_object(table, spec.at, index, count), Path(tempfile.gettempdir()) / "spanner-cdc" / uuid.uuid4().hex)
    try:
        for batch in _batches(spec, index):
            files.write(batch)
        listing = files.close()
    except Exception:
        files.abort()
        raise
    yield listing


class SpannerSnapshotReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(len(json.loads(self.options["partitions"])))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return land_part(SnapshotJobSpec.from_options(self.options), int(partition.value))


class SpannerSnapshotDataSource(DataSource):
    """`spark.read.format("spanner_snapshot").options(**SnapshotJobSpec.options()).load()`: rows are the landed files."""

    @classmethod
    def name(cls) -> str:
        return SNAPSHOT_SOURCE

    def schema(self) -> str:
        return FILES_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return SpannerSnapshotReader(self.options)


def run_snapshot_job(spark: SparkSession, spec: SnapshotJobSpec) -> list[dict[str, Any]]:
    """Driver side: one Spark job, a task per partition; only the files' listing comes back."""
    registry.register(spark, SpannerSnapshotDataSource)
    frame = spark.read.format(SNAPSHOT_SOURCE).schema(FILES_DDL).options(**spec.options()).load()
    try:
        return [row.asDict() for row in frame.collect()]
    except Exception as exc:  # pyspark raises its own (classic or Connect) exception types
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
        raise ExtractError(f"{spec.stream}: the snapshot of table {spec.table} failed in Spark: {text}") from exc
