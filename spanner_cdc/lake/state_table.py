"""Current-state Iceberg tables: one per watched table, key as identifier fields, bucketed by key, one snapshot per window."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spanner_cdc.compat import pyiceberg as pyiceberg_compat
from spanner_cdc.errors import ExtractError
from spanner_cdc.lake.completeness import record_from_summary, summary_properties
from spanner_cdc.lake.current_state import Column
from spanner_cdc.lake.iceberg import METADATA_PROPERTIES, WINDOW_END, WINDOW_START
from spanner_cdc.lake.layout import escape_table
from spanner_cdc.lake.storage import join

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.types import IcebergType

    from spanner_cdc.lake.layout import LakeLayout

log = logging.getLogger(__name__)

STATE_DIR = "_current"  # under the lineage's root: readers of the change log's plain files skip it
SNAPSHOT_AT = "spanner-cdc.snapshot-at"  # the seed's snapshot: the state at the initial snapshot's T0
SOURCE_TABLE = "spanner-cdc.source-table"
COLUMN_TYPES = "spanner-cdc.column-types"  # the Spanner type of each column, as the change stream names it
BUCKETS = 16  # partitions of the key: a window's changes are applied a bucket at a time (a few buckets a Spark task)
BUCKET_FIELD = "key_bucket"
# Iceberg v2 position-delete files: reserved field ids of their two columns
DELETE_FILE_PATH_ID, DELETE_POS_ID = 2147483546, 2147483545
DELETE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(DELETE_FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(DELETE_POS_ID).encode()}),
])  # fmt: skip
_NOT_BUCKETED = ("BOOL", "FLOAT64", "FLOAT32")  # Iceberg's bucket transform takes no boolean or float
# pyiceberg retries a commit that lost a race by building its snapshot again on the new one: position deletes found in
# the old snapshot's files (or a fold dropping every delete file) would then be wrong; the apply decides (extract's _commit)
NO_COMMIT_RETRIES = {"commit.retry.num-retries": "0"}


class StateTypeError(ExtractError):
    """A column the state table cannot hold (raised before anything is written or committed)."""


def state_identifier(layout: LakeLayout, table: str) -> tuple[str, str]:
    """`<namespace>.<stream>__current__<table>`: beside the change log `<namespace>.<stream>` in the same catalog."""
    return (layout.namespace, f"{layout.stream}__current__{table}")


def state_location(layout: LakeLayout, table: str) -> str:
    root = layout.location if layout.is_url else os.path.abspath(layout.location)
    return join(root, STATE_DIR, f"table={escape_table(table)}")


def iceberg_type(table: str, column: str, spanner_type: dict[str, Any], next_id: Callable[[], int]) -> IcebergType:
    """A Spanner column type -> the Iceberg type the state holds it as (the same values as the Arrow types of
    `lake.current_state.arrow_type`: NUMERIC exactly, PostgreSQL's numeric and JSON as text)."""
    from pyiceberg import types as t

    code = str(spanner_type.get("code"))
    if code == "ARRAY":
        element = iceberg_type(table, column, spanner_type.get("array_element_type") or {"code": "STRING"}, next_id)
        return t.ListType(element_id=next_id(), element_type=element, element_required=False)
    if spanner_type.get("type_annotation") == "PG_NUMERIC":
        return t.StringType()
    scalars: dict[str, IcebergType] = {
        "INT64": t.LongType(), "FLOAT64": t.DoubleType(), "FLOAT32": t.FloatType(), "STRING": t.StringType(),
        "BOOL": t.BooleanType(), "TIMESTAMP": t.TimestamptzType(), "DATE": t.DateType(), "BYTES": t.BinaryType(),
        "NUMERIC": t.DecimalType(38, 9), "JSON": t.StringType(), "ENUM": t.StringType(), "PROTO": t.BinaryType(),
    }  # fmt: skip
    return scalars.get(code, t.StringType())


def _same_type(a: IcebergType, b: IcebergType) -> bool:
    from pyiceberg.types import ListType

    if isinstance(a, ListType) and isinstance(b, ListType):
        return _same_type(a.element_type, b.element_type)
    return a == b


def state_schema(table: str, columns: Sequence[Column]) -> Schema:
    """The state table's schema: the key columns required and its identifier fields, every column typed."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    counter = iter(range(1, 1_000_000))
    ids = {c.name: next(counter) for c in columns}
    fields, keys = [], []
    for c in columns:
        field_type = iceberg_type(table, c.name, c.type, lambda: next(counter))
        if c.is_primary_key:
            if str(c.type.get("code")) in ("FLOAT64", "FLOAT32", "ARRAY"):
                raise StateTypeError(
                    f"current state of table {table}: key column {c.name} of type {c.type.get('code')} cannot be an Iceberg "
                    "identifier field (accepted key types: INT64, STRING, BYTES, BOOL, DATE, TIMESTAMP, NUMERIC)"
                )
            keys.append(ids[c.name])
        fields.append(NestedField(ids[c.name], c.name, field_type, required=c.is_primary_key))
    return Schema(*fields, identifier_field_ids=keys)


def bucket_source(columns: Sequence[Column]) -> Column | None:
    """The key column the table is bucketed by: the first one, when Iceberg can bucket its type."""
    first = next((c for c in columns if c.is_primary_key), None)
    return first if first is not None and str(first.type.get("code")) not in _NOT_BUCKETED else None


def ensure_state_table(catalog: Catalog, layout: LakeLayout, table: str, columns: Sequence[Column]) -> Table:
    """The table's state table, created (bucketed by its first key column, sorted by its key) or evolved to `columns`:
    new columns added (older rows read them as null), columns gone dropped; a type change is a StateTypeError."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    identifier = state_identifier(layout, table)
    schema = state_schema(table, columns)  # raises before anything is created for a type the state cannot hold
    catalog.create_namespace_if_not_exists(identifier[0])
    try:
        handle = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            return _create(catalog, layout, table, schema, columns)
        except TableAlreadyExistsError:
            handle = catalog.load_table(identifier)
    return _evolve(handle, table, schema, columns)


def _types_text(columns: Sequence[Column]) -> str:
    import json

    return json.dumps([c.__dict__ for c in columns], sort_keys=True)


def state_columns(handle: Table) -> list[Column]:
    """The state table's columns with their Spanner types (kept in a table property)."""
    import json

    return [Column(**c) for c in json.loads(handle.properties.get(COLUMN_TYPES, "[]"))]


def _create(catalog: Catalog, layout: LakeLayout, table: str, schema: Schema, columns: Sequence[Column]) -> Table:
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    identifier = state_identifier(layout, table)
    properties = {SOURCE_TABLE: table, COLUMN_TYPES: _types_text(columns), "format-version": "2", "write.delete.mode": "merge-on-read",
                  "write.update.mode": "merge-on-read", **NO_COMMIT_RETRIES, **METADATA_PROPERTIES}  # fmt: skip
    with catalog.create_table_transaction(
        identifier, schema=schema, location=state_location(layout, table), properties=properties
    ) as tx:
        source = bucket_source(columns)
        if source is not None:
            with tx.update_spec() as spec:
                spec.add_field(source.name, BucketTransform(BUCKETS), BUCKET_FIELD)
        with tx.update_sort_order() as order:
            for c in columns:
                if c.is_primary_key:
                    order.asc(c.name, IdentityTransform())
    log.info("%s: created current-state table %s", layout.stream, ".".join(identifier))
    return catalog.load_table(identifier)


def _evolve(handle: Table, table: str, schema: Schema, columns: Sequence[Column]) -> Table:
    current = {f.name: f for f in handle.schema().fields}
    wanted = {f.name: f for f in schema.fields}
    for name, field in wanted.items():
        if name in current and not _same_type(current[name].field_type, field.field_type):
            raise StateTypeError(
                f"current state of table {table}: column {name} changed type from {current[name].field_type} to "
                f"{field.field_type}; the state table cannot change a column's type (drop and re-add the column under "
                "another name, or drop the state table to rebuild it)"
            )
    added = [n for n in wanted if n not in current]
    dropped = [n for n in current if n not in wanted]
    types = _types_text(columns)
    retries = all(handle.properties.get(k) == v for k, v in NO_COMMIT_RETRIES.items())
    if not added and not dropped and handle.properties.get(COLUMN_TYPES) == types and retries:
        return handle
    with handle.transaction() as tx:  # the columns and their Spanner types change together
        if added or dropped:
            with tx.update_schema() as update:
                for name in dropped:
                    update.delete_column(name)
                for name in added:
                    update.add_column(name, wanted[name].field_type)
        tx.set_properties({COLUMN_TYPES: types, **NO_COMMIT_RETRIES})  # the second: tables made before it
    log.info("current-state table %s: columns added %s, dropped %s", handle.name(), added, dropped)
    return handle


def window_properties(
    window_start: datetime, window_end: datetime, completeness: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """A window snapshot's summary: the window, and the window's completeness record (`lake/completeness.py`), the
    one its marker and the change log's snapshot carry: a consumer of the state reads how complete it is there."""
    properties = {WINDOW_START: _iso(window_start), WINDOW_END: _iso(window_end)}
    return {**properties, **(summary_properties(completeness) if completeness else {})}


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def applied_ends(handle: Table) -> dict[str, int]:
    """Window end (ISO) -> snapshot id, for every window (and the seed, under its T0) the table holds."""
    out = {}
    for snap in handle.snapshots():
        summary = snap.summary.additional_properties if snap.summary else {}
        end = summary.get(WINDOW_END) or summary.get(SNAPSHOT_AT)
        if end:
            out[end] = snap.snapshot_id
    return out


def snapshot_at(handle: Table, window_end: datetime) -> int | None:
    """The snapshot that holds the state as of `window_end` (None: the table has no such window)."""
    return applied_ends(handle).get(_iso(window_end))


def live_rows(handle: Table, snapshot_id: int | None = None) -> int:
    """Rows in the state at a snapshot, from its summary: data rows less position deletes (each deletes a live row)."""
    snap = handle.snapshot_by_id(snapshot_id) if snapshot_id is not None else handle.current_snapshot()
    summary = snap.summary.additional_properties if snap and snap.summary else {}
    return int(summary.get("total-records", 0)) - int(summary.get("total-position-deletes", 0))


def commit_row_delta(
    handle: Table, data_files: Sequence[DataFile], delete_files: Sequence[DataFile], properties: dict[str, str]
) -> int:
    """One snapshot adding data files and position-delete files (Iceberg's RowDelta): the window's new row versions
    and the positions of the rows they replace or delete. Nothing else changes, so no existing manifest is rewritten."""
    from pyiceberg.table.snapshots import Operation

    with handle.transaction() as tx:
        operation = Operation.OVERWRITE if delete_files else Operation.APPEND
        with pyiceberg_compat.row_delta_producer()(
            operation, tx, handle.io, snapshot_properties=properties, delete_files=delete_files
        ) as producer:
            for data_file in data_files:
                producer.append_data_file(data_file)
    current = handle.current_snapshot()
    assert current is not None
    return current.snapshot_id


def commit_fold(handle: Table, replaced: Sequence[DataFile], added: Sequence[DataFile], properties: dict[str, str]) -> int:
    """One snapshot that replaces data files by their rewrites without deleted rows and drops every position-delete
    file (the caller folded every delete file the table has into the rewrites: the rows read stay the same)."""
    from pyiceberg.table.snapshots import Operation

    with handle.transaction() as tx:
        with pyiceberg_compat.fold_producer()(Operation.OVERWRITE, tx, handle.io, snapshot_properties=properties) as producer:
            for data_file in replaced:
                producer.delete_data_file(data_file)
            for data_file in added:
                producer.append_data_file(data_file)
    current = handle.current_snapshot()
    assert current is not None
    return current.snapshot_id


def delete_data_file(
    handle: Table, path: str, rows: int, size: int, partition: Any, referenced: str | None
) -> DataFile:
    """The manifest entry of a position-delete file written by an apply task; `referenced`: the one data file it
    names, if one (its bounds let readers skip it for every other file)."""
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.types import StringType

    bounds = {DELETE_FILE_PATH_ID: to_bytes(StringType(), referenced)} if referenced else None
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET, partition=partition,
        record_count=rows, file_size_in_bytes=size, spec_id=handle.metadata.default_spec_id,
        lower_bounds=bounds, upper_bounds=bounds,
    )  # fmt: skip


def read_state(handle: Table, snapshot_id: int) -> pa.Table:
    """The state at a snapshot, with pyiceberg (data files less their position deletes), in key order."""
    data = handle.scan(snapshot_id=snapshot_id).to_arrow()
    keys = [handle.schema().find_field(i).name for i in handle.schema().identifier_field_ids]
    return data.sort_by([(k, "ascending") for k in keys]) if data.num_rows else data


def table_entry(handle: Table, kind: str, source_table: str | None) -> dict[str, Any]:
    """`lake show`'s entry of one table: its identifier, kind, source table and snapshots (oldest first), each with
    its window, the rows it added and removed (a state table removes rows by position deletes) and the window's
    completeness record (None for the seed and maintenance)."""
    snapshots = []
    for snap in handle.snapshots():
        summary = snap.summary.additional_properties if snap.summary else {}
        removed = int(summary.get("deleted-records", 0)) + int(summary.get("added-position-deletes", 0))
        snapshots.append({
            "snapshot_id": snap.snapshot_id,
            "window_start": summary.get(WINDOW_START),
            "window_end": summary.get(WINDOW_END) or summary.get(SNAPSHOT_AT),
            "rows_added": int(summary.get("added-records", 0)),
            "rows_removed": removed,
            "completeness": record_from_summary(summary),
        })  # fmt: skip
    return {"identifier": list(handle.name()), "kind": kind, "source_table": source_table, "snapshots": snapshots}


def stream_tables(catalog: Catalog, layout: LakeLayout) -> list[dict[str, Any]]:
    """Every Iceberg table of a stream's lineage: its change log (if any) first, then each current-state table."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    out = []
    try:
        out.append(table_entry(catalog.load_table((layout.namespace, layout.stream)), "change_log", None))
    except (NoSuchTableError, NoSuchNamespaceError):
        pass
    prefix = f"{layout.stream}__current__"
    try:
        names = sorted(i for i in catalog.list_tables(layout.namespace) if i[-1].startswith(prefix))
    except NoSuchNamespaceError:
        names = []
    for identifier in names:
        handle = catalog.load_table(identifier)
        out.append(table_entry(handle, "current_state", str(handle.properties.get(SOURCE_TABLE, identifier[-1][len(prefix) :]))))
    return out
