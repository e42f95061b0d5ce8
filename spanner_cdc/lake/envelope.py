"""Event envelope rows: one lake row per mod of a data change record, batched into bounded Arrow batches."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from spanner_cdc.json_text import float_free_text, may_hold_floats
from spanner_cdc.lake.columns import LAKE_SCHEMA, PARTITION_COLUMN, SOURCE_SCHEMA
from spanner_cdc.source.records import ColumnType, DataChangeRecord

# Fixed namespace of the event ids: changing it would change every uuid ever landed.
EVENT_NAMESPACE = uuid.UUID("5d2b8f0e-7c1a-4f6e-9a53-2f8d1c0b7e41")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
DEFAULT_MAX_ROWS = 8192
DEFAULT_MAX_BYTES = 16 << 20



def micros(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime (exact: no float on the way)."""
    return (value - EPOCH) // MICROSECOND


def from_micros(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def event_uuid(stream: str, commit_timestamp: datetime, server_transaction_id: str, record_sequence: str, mod_index: int) -> str:
    """Same change, same id: (stream, commit timestamp, transaction, record sequence, mod index) -> uuid5."""
    return _uuid5(f"{stream}|{micros(commit_timestamp)}|{server_transaction_id}|{record_sequence}|{mod_index}")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_encode = _ENCODER.encode
_NAMESPACE_BYTES = EVENT_NAMESPACE.bytes


def _json(value: Any) -> str:
    return _encode(value)


def _values_encoder(column_types: tuple[ColumnType, ...]) -> Callable[[Any], str | bytes]:
    """How a table's mod values become JSON text: the faster way when no column can hold a float, else json (the
    text is json's either way; bytes are UTF-8 text, which Arrow takes as a string)."""
    return _encode if may_hold_floats(c.type for c in column_types) else float_free_text


def _uuid5(name: str) -> str:
    """uuid.uuid5(EVENT_NAMESPACE, name) as text, without building UUID objects (a hot path)."""
    return _uuid_text(hashlib.sha1(_NAMESPACE_BYTES + name.encode()).digest())


def _uuid_text(sha1: bytes) -> str:
    digest = bytearray(sha1[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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


# Columns whose value is the same for every mod of a record: kept once per record, repeated at take().
_PER_MOD = ("uuid", "mod_index", "keys", "new_values", "old_values")
# the columns taken from the record itself, and those kept beside it (a row of _records: record, commit, read,
# column types' JSON, primary keys)
_RECORD_FIELDS = {
    "object": "table_name",
    PARTITION_COLUMN: "table_name",
    "server_transaction_id": "server_transaction_id",
    "record_sequence": "record_sequence",
    "change_type": "mod_type",
    "value_capture_type": "value_capture_type",
    "number_of_records_in_transaction": "number_of_records_in_transaction",
    "number_of_partitions_in_transaction": "number_of_partitions_in_transaction",
    "transaction_tag": "transaction_tag",
    "is_system_transaction": "is_system_transaction",
    "is_last_record_in_transaction_in_partition": "is_last_record_in_transaction_in_partition",
}
_ROW_FIELDS = {"source_timestamp": 1, "commit_timestamp": 1, "read_timestamp": 2, "column_types": 3, "primary_keys": 4}


class EnvelopeBatcher:
    """Accumulates envelope rows column-wise and hands out batches of at most ~`max_rows` rows / ~`max_bytes`.

    Per-record values are kept once per record and repeated per mod when the batch is built, so a
    record's cost is mostly its mods' JSON and ids.
    """

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
        self._types: dict[int, tuple[tuple[ColumnType, ...], str, list[str], Callable[[Any], str | bytes]]] = {}
        self._reset()

    def _reset(self) -> None:
        self._mods: dict[str, list[Any]] = {name: [] for name in _PER_MOD}
        self._records: list[tuple[Any, ...]] = []
        self._counts: list[int] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._mods["uuid"])

    @property
    def full(self) -> bool:
        return len(self) >= self.max_rows or self._bytes >= self.max_bytes

    def _column_types(self, column_types: tuple[ColumnType, ...]) -> tuple[str, list[str], Callable[[Any], str | bytes]]:
        # the reader shares one column_types tuple per table: encode it once, not per record
        cached = self._types.get(id(column_types))
        if cached is None or cached[0] is not column_types:
            json_text = column_types_json(column_types)
            cached = (column_types, json_text, primary_keys(column_types), _values_encoder(column_types))
            self._types[id(column_types)] = cached
        return cached[1], cached[2], cached[3]

    def add(self, record: DataChangeRecord, read_timestamp: datetime | None = None) -> int:
        """Append one row per mod of `record`; returns the number of rows added."""
        if not record.mods:
            return 0
        commit = micros(record.commit_timestamp)
        read = micros(read_timestamp) if read_timestamp is not None else time.time_ns() // 1000
        types_json, keys, encode = self._column_types(record.column_types)
        prefix = f"{self.context.stream_name}|{commit}|{record.server_transaction_id}|{record.record_sequence}|"
        named = hashlib.sha1(_NAMESPACE_BYTES + prefix.encode())  # the ids' common part, hashed once per record
        mods = self._mods
        uuids, indexes, key_texts, new_texts, old_texts = (mods[name] for name in _PER_MOD)
        size = 0
        for index, mod in enumerate(record.mods):
            keys_json, new_json, old_json = encode(mod.keys), encode(mod.new_values), encode(mod.old_values)
            size += len(keys_json) + len(new_json) + len(old_json)
            one = named.copy()
            one.update(str(index).encode())
            uuids.append(_uuid_text(one.digest()))
            indexes.append(index)
            key_texts.append(keys_json)
            new_texts.append(new_json)
            old_texts.append(old_json)
        count = len(record.mods)
        self._records.append((record, commit, read, types_json, keys))
        self._counts.append(count)
        self._bytes += size + count * 200 + len(types_json)
        return count

    def _record_column(self, name: str) -> list[Any]:
        """One value per record (repeated per mod by take())."""
        rows, ctx = self._records, self.context
        if name in _RECORD_FIELDS:
            return list(map(attrgetter(_RECORD_FIELDS[name]), (r[0] for r in rows)))
        if name in ("source_timestamp", "commit_timestamp", "read_timestamp", "column_types", "primary_keys"):
            return [r[_ROW_FIELDS[name]] for r in rows]
        if name == "is_deleted":
            return [r[0].mod_type == "DELETE" for r in rows]
        constants = {
            "stream_name": ctx.stream_name,
            "read_method": ctx.read_method,
            "partition_token": ctx.partition_token,
            "window_start": self._window[0],
            "window_end": self._window[1],
        }
        return [constants[name]] * len(rows)

    def take(self) -> pa.RecordBatch | None:
        """The rows gathered so far as one batch (None if there are none); starts a new batch."""
        if not len(self):
            return None
        repeat = pa.array(np.repeat(np.arange(len(self._counts), dtype=np.int32), self._counts))
        arrays = []
        for field in self.schema:
            if field.name in self._mods:
                arrays.append(pa.array(self._mods[field.name], type=field.type))
            else:
                arrays.append(pa.array(self._record_column(field.name), type=field.type).take(repeat))
        self._reset()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
