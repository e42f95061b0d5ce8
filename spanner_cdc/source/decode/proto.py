"""MUTABLE_KEY_RANGE rows (the google.spanner.v1.ChangeStreamRecord proto) -> typed change records, both dialects.

GoogleSQL returns the record as a PROTO column, PostgreSQL as BYTES; both arrive as the base64 text of the
serialized message, which the reader asks the client to hand over undecoded (`lazy_decode=True`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from google.cloud.spanner_v1 import TypeAnnotationCode, TypeCode
from google.cloud.spanner_v1.types import ChangeStreamRecord
from google.protobuf.message import DecodeError

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import (
    ChangeRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
)
from spanner_cdc.source.decode.fields import RowMapper

_Record = ChangeStreamRecord.pb()
_MOD_TYPES = {number: name for name, number in _Record.DataChangeRecord.ModType.items()}
_CAPTURE_TYPES = {number: name for name, number in _Record.DataChangeRecord.ValueCaptureType.items()}
_TYPE_CODES = {int(code): name for name, code in TypeCode.__members__.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _timestamp(value: Any) -> datetime:
    # µs like the rest of the pipeline; nanoseconds are truncated
    return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def spanner_json_type(type_: Any) -> dict[str, Any]:
    """A google.spanner.v1.Type message as the JSON type of the IMMUTABLE_KEY_RANGE records ({"code": "INT64"})."""
    out: dict[str, Any] = {"code": _TYPE_CODES.get(type_.code, str(type_.code))}
    if type_.HasField("array_element_type"):
        out["array_element_type"] = spanner_json_type(type_.array_element_type)
    if type_.HasField("struct_type"):
        out["struct_type"] = {
            "fields": [{"name": f.name, "type": spanner_json_type(f.type_)} for f in type_.struct_type.fields]
        }
    if type_.type_annotation:
        out["type_annotation"] = TypeAnnotationCode(type_.type_annotation).name
    if type_.proto_type_fqn:
        out["proto_type_fqn"] = type_.proto_type_fqn
    return out


def _python(value: Any) -> Any:
    """A protobuf Value as the JSON value the IMMUTABLE_KEY_RANGE records carry (INT64 stays text)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "list_value":
        return [_python(v) for v in value.list_value.values]
    if kind == "struct_value":
        return {k: _python(v) for k, v in value.struct_value.fields.items()}
    return None


def _data_change(r: Any) -> DataChangeRecord:
    columns = tuple(
        ColumnType(c.name, spanner_json_type(c.type_), c.is_primary_key, c.ordinal_position) for c in r.column_metadata
    )
    names = [c.name for c in columns]

    def values(items: Any) -> dict[str, Any]:
        return {names[v.column_metadata_index]: _python(v.value) for v in items}

    mods = tuple(Mod(values(m.keys), values(m.new_values), values(m.old_values)) for m in r.mods)
    if not mods:
        raise ValueError("data change record without mods")
    return DataChangeRecord(
        _timestamp(r.commit_timestamp), r.record_sequence, r.server_transaction_id,
        r.is_last_record_in_transaction_in_partition, r.table, columns, mods, _MOD_TYPES[r.mod_type],
        _CAPTURE_TYPES[r.value_capture_type], r.number_of_records_in_transaction,
        r.number_of_partitions_in_transaction, r.transaction_tag, r.is_system_transaction,
    )  # fmt: skip


def decode_record(data: bytes) -> ChangeRecord:
    """One serialized ChangeStreamRecord as a typed record; ValueError / DecodeError / KeyError when malformed."""
    message = _Record.FromString(data)
    kind = message.WhichOneof("record")
    if kind == "data_change_record":
        return _data_change(message.data_change_record)
    if kind == "heartbeat_record":
        return HeartbeatRecord(_timestamp(message.heartbeat_record.timestamp))
    if kind == "partition_start_record":
        r = message.partition_start_record
        return PartitionStartRecord(_timestamp(r.start_timestamp), r.record_sequence, tuple(r.partition_tokens))
    if kind == "partition_end_record":
        r = message.partition_end_record
        return PartitionEndRecord(_timestamp(r.end_timestamp), r.record_sequence, r.partition_token)
    if kind == "partition_event_record":
        r = message.partition_event_record
        return PartitionEventRecord(
            _timestamp(r.commit_timestamp), r.record_sequence, r.partition_token,
            tuple(e.source_partition_token for e in r.move_in_events),
            tuple(e.destination_partition_token for e in r.move_out_events),
        )  # fmt: skip
    raise ValueError(f"a ChangeStreamRecord without a known record ({kind})")


def proto_row_mapper(fields: Sequence[Any]) -> RowMapper:
    """Rows of a MUTABLE_KEY_RANGE query (undecoded: protobuf Values holding base64 text) -> records."""
    if len(fields) != 1 or fields[0].type_.code not in (TypeCode.PROTO, TypeCode.BYTES):
        raise SourceError(
            "unexpected result metadata: expected one PROTO (GoogleSQL) or BYTES (PostgreSQL) column of "
            "google.spanner.v1.ChangeStreamRecord",
            raw=str(list(fields)),
        )

    def map_row(row: Sequence[Any]) -> list[ChangeRecord]:
        if len(row) != 1:
            raise SourceError("malformed change record: expected one column", raw=row)
        value = row[0]
        text = value.string_value if hasattr(value, "string_value") else value
        try:
            data = base64.b64decode(text) if isinstance(text, str) else bytes(text)
            return [decode_record(data)]
        except (binascii.Error, DecodeError, ValueError, KeyError, IndexError) as exc:
            raise SourceError(f"malformed change record: {exc}", raw=str(text)[:200]) from None

    return map_row
