"""Event envelope rows: one lake row per mod of a data change record, batched into bounded Arrow batches."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa

from spanner_cdc.lake.schema import LAKE_SCHEMA, PARTITION_COLUMN, SOURCE_SCHEMA
from spanner_cdc.records import ColumnType, DataChangeRecord

# Fixed namespace of the event ids: changing it would change every uuid ever landed.
EVENT_NAMESPACE = uuid.UUID("5d2b8f0e-7c1a-4f6e-9a53-2f8d1c0b7e41")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
DEFAULT_MAX_ROWS = 8192
DEFAULT_MAX_BYTES = 16 << 20

READ_METHODS = ("spanner-change-stream", "spanner-change-stream-backfill")


def micros(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact: no float on the way)."""
    return (value - EPOCH) // MICROSECOND


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def event_uuid(stream: str, commit_timestamp: datetime, server_transaction_id: str, record_sequence: str, mod_index: int) -> str:
    """Same change, same id: (stream, commit timestamp, transaction, record sequence, mod index) -> uuid5."""
    name = f"{stream}|{micros(commit_timestamp)}|{server_transaction_id}|{record_sequence}|{mod_index}"
    return str(uuid.uuid5(EVENT_NAMESPACE, name))


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def column_types_json(column_types: tuple[ColumnType, ...]) -> str:
    return _json(
        [
            {
                "name": c.name,
                "type": c.type,
                "is_primary_key": c.is_primary_key,
                "ordinal_position": c.ordinal_position,
            }
            for c in column_types
        ]
    )


def primary_keys(column_types: tuple[ColumnType, ...]) -> list[str]:
    return [c.name for c in sorted(column_types, key=lambda c: c.ordinal_position) if c.is_primary_key]


@dataclass(frozen=True)
class EnvelopeContext:
    """What every row of one token's extract shares."""

    stream_name: str
    read_method: str
    partition_token: str
    window_start: datetime
    window_end: datetime


class EnvelopeBatcher:
    """Accumulates envelope rows column-wise and hands out batches of at most `max_rows` rows / ~`max_bytes`."""

    def __init__(
        self,
        context: EnvelopeContext,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        with_partition_column: bool = True,
    ) -> None:
        self.context = context
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.schema = SOURCE_SCHEMA if with_partition_column else LAKE_SCHEMA
        self._window = (micros(context.window_start), micros(context.window_end))
        self._reset()

    def _reset(self) -> None:
        self._columns: dict[str, list[Any]] = {name: [] for name in self.schema.names}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._columns["uuid"])

    @property
    def full(self) -> bool:
        return len(self) >= self.max_rows or self._bytes >= self.max_bytes

    def add(self, record: DataChangeRecord, read_timestamp: datetime | None = None) -> int:
        """Append one row per mod of `record`; returns the number of rows added."""
        ctx = self.context
        cols = self._columns
        commit = micros(record.commit_timestamp)
        read = micros(read_timestamp) if read_timestamp is not None else time.time_ns() // 1000
        types_json = column_types_json(record.column_types)
        keys = primary_keys(record.column_types)
        deleted = record.mod_type == "DELETE"
        for index, mod in enumerate(record.mods):
            keys_json, new_json, old_json = _json(mod.keys), _json(mod.new_values), _json(mod.old_values)
            self._bytes += len(keys_json) + len(new_json) + len(old_json) + len(types_json) + 200
            cols["uuid"].append(
                event_uuid(ctx.stream_name, record.commit_timestamp, record.server_transaction_id, record.record_sequence, index)
            )
            cols["stream_name"].append(ctx.stream_name)
            cols["read_method"].append(ctx.read_method)
            cols["object"].append(record.table_name)
            cols["source_timestamp"].append(commit)
            cols["read_timestamp"].append(read)
            cols["commit_timestamp"].append(commit)
            cols["server_transaction_id"].append(record.server_transaction_id)
            cols["record_sequence"].append(record.record_sequence)
            cols["mod_index"].append(index)
            cols["change_type"].append(record.mod_type)
            cols["is_deleted"].append(deleted)
            cols["primary_keys"].append(keys)
            cols["keys"].append(keys_json)
            cols["new_values"].append(new_json)
            cols["old_values"].append(old_json)
            cols["column_types"].append(types_json)
            cols["value_capture_type"].append(record.value_capture_type)
            cols["number_of_records_in_transaction"].append(record.number_of_records_in_transaction)
            cols["number_of_partitions_in_transaction"].append(record.number_of_partitions_in_transaction)
            cols["transaction_tag"].append(record.transaction_tag)
            cols["is_system_transaction"].append(record.is_system_transaction)
            cols["is_last_record_in_transaction_in_partition"].append(record.is_last_record_in_transaction_in_partition)
            cols["partition_token"].append(ctx.partition_token)
            cols["window_start"].append(self._window[0])
            cols["window_end"].append(self._window[1])
            if PARTITION_COLUMN in cols:
                cols[PARTITION_COLUMN].append(record.table_name)
        return len(record.mods)

    def take(self) -> pa.RecordBatch | None:
        """The rows gathered so far as one batch (None if there are none); starts a new batch."""
        if not len(self):
            return None
        arrays = [pa.array(self._columns[field.name], type=field.type) for field in self.schema]
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
