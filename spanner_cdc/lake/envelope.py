"""Event envelope rows: one lake row per mod of a data change record, batched into bounded Arrow batches."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from spanner_cdc.json_text import float_free_text, may_hold_floats, value_text
from spanner_cdc.lake.columns import LAKE_SCHEMA, PARTITION_COLUMN, SOURCE_SCHEMA, TIMESTAMP
from spanner_cdc.model.records import ColumnType, DataChangeRecord

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


def _values_encoder(column_types: tuple[ColumnType, ...]) -> Callable[[Any], bytes]:
    """How a table's mod values become JSON's UTF-8 text: msgspec's when no column can hold a float, else msgspec's
    or json's as the floats of each value allow (the text is json's either way)."""
    return value_text if may_hold_floats(c.type for c in column_types) else float_free_text


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
        self._names = frozenset(self.schema.names)
        self._types_of = {field.name: field.type for field in self.schema}
        self._window = (micros(context.window_start), micros(context.window_end))
        self._types: dict[int, tuple[tuple[ColumnType, ...], tuple[str, list[str], Callable[[Any], bytes]]]] = {}
        self._stream = f"{context.stream_name}|"
        # the ids' namespace hashed once: each record's id text continues it
        self._sha1 = hashlib.sha1(_NAMESPACE_BYTES)
        self._stamp: datetime | None = None
        self._commit = 0
        self._tokens: list[str] | None = None  # joined(): each record's partition token (else the context's, constant)
        self._reset()

    @classmethod
    def joined(cls, batchers: Sequence[EnvelopeBatcher]) -> EnvelopeBatcher:
        """The rows the batchers gathered (each of its own token, none taken yet), in their order, in one batcher whose
        take() builds them at once: the rows their own take()s would give one after another. A small partition's
        rows are a few, and building a batch costs ~0.5 ms whatever its size: a wave task builds its small tokens'
        rows together. Every batcher must share the first one's stream, read method, window and schema."""
        first = batchers[0]
        out = cls(first.context, max_rows=first.max_rows, max_bytes=first.max_bytes, with_partition_column=first.schema is SOURCE_SCHEMA)
        out._tokens = []
        for batcher in batchers:
            ctx = batcher.context
            if (ctx.stream_name, ctx.read_method, ctx.window_start, ctx.window_end) != (
                first.context.stream_name, first.context.read_method, first.context.window_start, first.context.window_end
            ) or batcher.schema is not out.schema:  # fmt: skip
                raise ValueError("joined: batchers of another stream, read method, window or schema")
            out._digests += batcher._digests
            out._keys += batcher._keys
            out._new += batcher._new
            out._old += batcher._old
            out._records += batcher._records
            out._counts += batcher._counts
            out._tokens += [ctx.partition_token] * len(batcher._records)
            out._rows += batcher._rows
            out._bytes += batcher._bytes
        return out

    @property
    def held_bytes(self) -> int:
        """The rough size of the rows gathered and not taken yet (their texts, ~200 bytes a row besides)."""
        return self._bytes

    def table_rows(self) -> dict[str, int]:
        """The rows gathered and not taken yet, by table, in the order the tables first came."""
        rows: dict[str, int] = {}
        for (record, *_), count in zip(self._records, self._counts, strict=True):
            rows[record.table_name] = rows.get(record.table_name, 0) + count
        return rows

    def _reset(self) -> None:
        self._digests = bytearray()  # the ids' SHA-1 digests, 20 bytes per mod
        self._keys: list[bytes] = []
        self._new: list[bytes] = []
        self._old: list[bytes] = []
        self._records: list[tuple[Any, ...]] = []
        self._counts: list[int] = []
        self._rows = 0
        self._bytes = 0
        if self._tokens is not None:
            self._tokens = []

    def __len__(self) -> int:
        return self._rows

    @property
    def full(self) -> bool:
        return len(self) >= self.max_rows or self._bytes >= self.max_bytes

    def _column_types(self, column_types: tuple[ColumnType, ...]) -> tuple[str, list[str], Callable[[Any], bytes]]:
        # the reader shares one column_types tuple per table: encode it once, not per record
        cached = self._types.get(id(column_types))
        if cached is None or cached[0] is not column_types:
            json_text = column_types_json(column_types)
            cached = (column_types, (json_text, primary_keys(column_types), _values_encoder(column_types)))
            self._types[id(column_types)] = cached
        return cached[1]

    def add(self, record: DataChangeRecord, read_timestamp: datetime | None = None) -> int:
        """Append one row per mod of `record`; returns the number of rows added.

        Only the mods' JSON texts and the ids' SHA-1 digests are made here, per mod; the rest of each row (its
        index, the uuid's text, the record's values) is built for the whole batch at once by take().
        """
        mods = record.mods
        count = len(mods)
        if not count:
            return 0
        stamp = record.commit_timestamp
        if stamp is not self._stamp:  # a transaction's records share one timestamp
            self._stamp, self._commit = stamp, micros(stamp)
        commit = self._commit
        read = micros(read_timestamp) if read_timestamp is not None else time.time_ns() // 1000
        types_json, keys, encode = self._column_types(record.column_types)
        prefix = f"{self._stream}{commit}|{record.server_transaction_id}|{record.record_sequence}|"
        named = self._sha1.copy()
        named.update(prefix.encode())  # the ids' common part, hashed once per record
        if count == 1:
            named.update(b"0")
            self._digests += named.digest()
            mod = mods[0]
            texts: tuple[bytes, ...] = (encode(mod.keys), encode(mod.new_values), encode(mod.old_values))
            self._keys.append(texts[0])
            self._new.append(texts[1])
            self._old.append(texts[2])
        else:
            for index in _mod_indexes(count):
                one = named.copy()
                one.update(index)
                self._digests += one.digest()
            texts = (*map(encode, map(_KEYS, mods)), *map(encode, map(_NEW, mods)), *map(encode, map(_OLD, mods)))
            self._keys += texts[:count]
            self._new += texts[count : 2 * count]
            self._old += texts[2 * count :]
        self._records.append((record, commit, read, types_json, keys))
        self._counts.append(count)
        self._rows += count
        self._bytes += sum(map(len, texts)) + count * 200 + len(types_json)
        return count

    def _record_columns(self) -> dict[str, pa.Array]:
        """The columns of one value per record (repeated per mod by take()); a column twice (object and the table's
        partition column, the source and commit timestamps) is the same array."""
        rows = self._records
        records = [r[0] for r in rows]
        by_attribute: dict[str, pa.Array] = {}
        columns: dict[str, pa.Array] = {}
        for name, attribute in _RECORD_FIELDS.items():
            if name in self._names:
                column = by_attribute.get(attribute)
                if column is None:
                    column = by_attribute[attribute] = pa.array(list(map(attrgetter(attribute), records)), self._types_of[name])
                columns[name] = column
        commit = pa.array([r[1] for r in rows], TIMESTAMP)
        columns["source_timestamp"] = columns["commit_timestamp"] = commit
        columns["read_timestamp"] = pa.array([r[2] for r in rows], TIMESTAMP)
        columns["column_types"] = pa.array([r[3] for r in rows], pa.string())
        columns["primary_keys"] = pa.array([r[4] for r in rows], pa.list_(pa.string()))
        columns["is_deleted"] = pa.array([r.mod_type == "DELETE" for r in records], pa.bool_())
        if self._tokens is not None:
            columns["partition_token"] = pa.array(self._tokens, pa.string())
        return columns

    def _constant_columns(self, rows: int) -> dict[str, pa.Array]:
        """The columns every row of the extract shares."""
        ctx, (start, end) = self.context, self._window
        values = {"stream_name": ctx.stream_name, "read_method": ctx.read_method, "partition_token": ctx.partition_token,
                  "window_start": start, "window_end": end}  # fmt: skip
        if self._tokens is not None:  # joined: a column of each record's own token (_record_columns)
            del values["partition_token"]
        return {name: pa.repeat(pa.scalar(value, self._types_of[name]), rows) for name, value in values.items()}

    def take(self) -> pa.RecordBatch | None:
        """The rows gathered so far as one batch (None if there are none); starts a new batch."""
        rows = self._rows
        if not rows:
            return None
        counts = np.array(self._counts, dtype=np.int32)
        record_of_row = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        firsts = np.cumsum(counts, dtype=np.int32) - counts  # each record's first row
        per_record = self._record_columns()
        if rows != len(counts):  # a record of many mods: its values repeated on each of its rows
            names = list(per_record)
            repeated = pa.RecordBatch.from_arrays(list(per_record.values()), names=names).take(pa.array(record_of_row))
            per_record = dict(zip(names, repeated.columns, strict=True))
        columns = {
            **per_record,
            **self._constant_columns(rows),
            "uuid": _uuid_texts(self._digests, rows),
            "mod_index": pa.array(np.arange(rows, dtype=np.int32) - firsts[record_of_row]),
            "keys": _text_array(self._keys),
            "new_values": _text_array(self._new),
            "old_values": _text_array(self._old),
        }
        self._reset()
        return pa.RecordBatch.from_arrays([columns[name] for name in self.schema.names], schema=self.schema)


_KEYS, _NEW, _OLD = attrgetter("keys"), attrgetter("new_values"), attrgetter("old_values")
_INDEXES = tuple(str(i).encode() for i in range(64))  # the mod indexes' text in the ids, for the usual counts


def _mod_indexes(count: int) -> Iterable[bytes]:
    return _INDEXES[:count] if count <= len(_INDEXES) else (str(i).encode() for i in range(count))


# the uuid's text: each digest byte as two hex digits, at its place among the 36 characters (dashes at 8, 13, 18, 23)
_HEX_DIGITS = np.frombuffer(b"".join(f"{b:02x}".encode() for b in range(256)), dtype=np.uint8).reshape(256, 2)
_HEX_PLACES = np.array([i for i in range(36) if i not in (8, 13, 18, 23)], dtype=np.intp)
_UUID_TEMPLATE = np.frombuffer(b"00000000-0000-0000-0000-000000000000", dtype=np.uint8)


def _uuid_texts(digests: bytearray, rows: int) -> pa.Array:
    """The uuid5 text of each SHA-1 digest (20 bytes each, in order), as _uuid_text writes one, for all rows at once."""
    octets = np.frombuffer(digests, dtype=np.uint8).reshape(rows, 20)[:, :16].copy()
    octets[:, 6] = (octets[:, 6] & 0x0F) | 0x50  # version 5
    octets[:, 8] = (octets[:, 8] & 0x3F) | 0x80  # RFC 4122 variant
    text = np.tile(_UUID_TEMPLATE, (rows, 1))
    text[:, _HEX_PLACES] = _HEX_DIGITS[octets].reshape(rows, 32)
    offsets = np.arange(0, 36 * rows + 1, 36, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(text))


def _text_array(texts: list[bytes]) -> pa.Array:
    """UTF-8 texts as one string array: their bytes joined, offsets from their lengths."""
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=offsets[1:])
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(len(texts), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(texts)))
    return pa.array(texts, pa.string())
