"""The initial snapshot's lake rows (the change log's envelope, one INSERT per row read at T0) and its marker (the lake side of
the snapshot extract/snapshot.py runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import PARTITION_COLUMN, SOURCE_SCHEMA
from spanner_cdc.lake.envelope import _uuid5, micros
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.names import SNAPSHOT_READ_METHOD
from spanner_cdc.policy import Policy

MARKER_FORMAT = 1


def snapshot_uuid(stream: str, at: datetime, table: str, keys_json: str) -> str:
    """Same row, same snapshot, same id: (stream, T0, table, key) -> uuid5 in the change log's namespace."""
    return _uuid5(f"{stream}|snapshot|{micros(at)}|{table}|{keys_json}")


@dataclass(frozen=True)
class SnapshotContext:
    """What every row of one table's snapshot shares."""

    stream: str
    at: datetime
    table: str
    value_capture_type: str
    column_types_json: str
    primary_keys: tuple[str, ...]


def snapshot_batch(context: SnapshotContext, keys: Sequence[str], new_values: Sequence[str]) -> pa.RecordBatch:
    """Rows (keys and new_values as JSON text) -> one lake batch: change_type INSERT, every timestamp T0."""
    count = len(keys)
    at = micros(context.at)
    constant: dict[str, Any] = {
        "stream_name": context.stream,
        "read_method": SNAPSHOT_READ_METHOD,
        "object": context.table,
        "source_timestamp": at,
        "read_timestamp": at,
        "commit_timestamp": at,
        "server_transaction_id": f"snapshot-{at}",
        "record_sequence": "00000000",
        "mod_index": 0,
        "change_type": "INSERT",
        "is_deleted": False,
        "primary_keys": list(context.primary_keys),
        "old_values": "{}",
        "column_types": context.column_types_json,
        "value_capture_type": context.value_capture_type,
        "number_of_records_in_transaction": 1,
        "number_of_partitions_in_transaction": 1,
        "transaction_tag": None,
        "is_system_transaction": False,
        "is_last_record_in_transaction_in_partition": True,
        "partition_token": "",
        "window_start": at,
        "window_end": at,
        PARTITION_COLUMN: context.table,
    }
    columns: dict[str, Any] = {
        "uuid": [snapshot_uuid(context.stream, context.at, context.table, k) for k in keys],
        "keys": list(keys),
        "new_values": list(new_values),
    }
    arrays = []
    for field in SOURCE_SCHEMA:
        if field.name in columns:
            arrays.append(pa.array(columns[field.name], type=field.type))
        else:
            arrays.append(pa.array([constant[field.name]] * count, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SOURCE_SCHEMA)


def write_snapshot_marker(layout: LakeLayout, at: datetime, files: Sequence[Any], policy: Policy | None = None) -> str:
    """The marker naming exactly the snapshot's files (paths relative to the lineage's root), rows per table and the
    landing policy the rows went through (its fingerprint and text: `policy.py`)."""
    policy = policy or Policy()
    base = layout.location.rstrip("/") + "/"
    tables: dict[str, int] = {}
    for f in files:
        tables[f.table] = tables.get(f.table, 0) + f.rows
    payload = {
        "format": MARKER_FORMAT,
        "stream": layout.stream,
        "namespace": layout.namespace,
        "at": at.isoformat().replace("+00:00", "Z"),
        "read_method": SNAPSHOT_READ_METHOD,
        "rows": sum(tables.values()),
        "tables": dict(sorted(tables.items())),
        "policy_fingerprint": policy.fingerprint,
        "policy": policy.to_json(),
        "files": [
            {"path": f.path[len(base):] if f.path.startswith(base) else f.path, "table": f.table, "rows": f.rows, "bytes": f.bytes}
            for f in sorted(files, key=lambda f: f.path)
        ],
    }
    location = layout.snapshot_marker_location
    storage.write_bytes(location, json.dumps(payload, indent=2, sort_keys=True).encode())
    return location


def read_snapshot_marker(layout: LakeLayout) -> dict[str, Any] | None:
    data = storage.read_bytes(layout.snapshot_marker_location)
    return None if data is None else dict(json.loads(data))
