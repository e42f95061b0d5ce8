"""MUTABLE_KEY_RANGE change records as query result rows: the google.spanner.v1.ChangeStreamRecord proto.

GoogleSQL `READ_<stream>` returns it as a PROTO column (`proto_type_fqn` names the message), PostgreSQL
`spanner.read_proto_bytes_<stream>` as BYTES; on the wire both are the base64 text of the serialized message.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from google.cloud.spanner_v1.types import ChangeStreamRecord, ResultSetMetadata, StructType, Type, TypeCode
from google.protobuf import struct_pb2

from spanner_cdc.local_spanner import wire
from spanner_cdc.local_spanner.record_encoding import RecordEncoder, metadata, spanner_type

PROTO_FQN = "google.spanner.v1.ChangeStreamRecord"
_Record = ChangeStreamRecord.pb()
_Data = _Record.DataChangeRecord
_MOD_TYPES = {name: number for name, number in _Data.ModType.items()}
_CAPTURE_TYPES = {name: number for name, number in _Data.ValueCaptureType.items()}


def proto_metadata(stream: str, postgres: bool) -> bytes:
    """ResultSetMetadata of a MUTABLE_KEY_RANGE query: PostgreSQL names the BYTES column after the function."""
    if postgres:
        return metadata([(f"read_proto_bytes_{stream}", {"code": "BYTES"})])
    column = StructType.Field(name="ChangeRecord", type_=Type(code=TypeCode.PROTO, proto_type_fqn=PROTO_FQN))
    return ResultSetMetadata.serialize(ResultSetMetadata(row_type=StructType(fields=[column])))


def _timestamp(target: Any, value: datetime) -> None:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    target.FromDatetime(aware.astimezone(UTC))


def _value(value: Any) -> struct_pb2.Value:
    """A change stream JSON value (INT64 as a string, FLOAT64 as a number, ...) as a protobuf Value."""
    out = struct_pb2.Value()
    if value is None:
        out.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, (int, float)):
        out.number_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list):
        out.list_value.values.extend(_value(v) for v in value)
    else:
        out.struct_value.update(value)
    return out


def _data_change_record(target: Any, r: dict[str, Any]) -> None:
    _timestamp(target.commit_timestamp, r["commit_timestamp"])
    target.record_sequence = r["record_sequence"]
    target.server_transaction_id = r["server_transaction_id"]
    target.is_last_record_in_transaction_in_partition = r["is_last_record_in_transaction_in_partition"]
    target.table = r["table_name"]
    index: dict[str, int] = {}
    for position, column in enumerate(r["column_types"]):
        index[column["name"]] = position
        target.column_metadata.add(
            name=column["name"],
            type_=Type.pb(spanner_type(column["type"])),
            is_primary_key=column["is_primary_key"],
            ordinal_position=column["ordinal_position"],
        )
    for mod in r["mods"]:
        out = target.mods.add()
        for field in ("keys", "old_values", "new_values"):
            for name, value in (mod[field] or {}).items():
                getattr(out, field).add(column_metadata_index=index[name], value=_value(value))
    target.mod_type = _MOD_TYPES[r["mod_type"]]
    target.value_capture_type = _CAPTURE_TYPES[r["value_capture_type"]]
    target.number_of_records_in_transaction = r["number_of_records_in_transaction"]
    target.number_of_partitions_in_transaction = r["number_of_partitions_in_transaction"]
    target.transaction_tag = r["transaction_tag"]
    target.is_system_transaction = r["is_system_transaction"]


def to_proto(record: dict[str, Any]) -> Any:
    """An engine record of either mode's shape ({"data_change_record": {...}}, {"partition_event_record": ...})."""
    message = _Record()
    kind, body = next(iter(record.items()))
    if kind == "data_change_record":
        _data_change_record(message.data_change_record, body)
    elif kind == "heartbeat_record":
        _timestamp(message.heartbeat_record.timestamp, body["timestamp"])
    elif kind == "partition_start_record":
        target = message.partition_start_record
        _timestamp(target.start_timestamp, body["start_timestamp"])
        target.record_sequence = body["record_sequence"]
        target.partition_tokens.extend(body["partition_tokens"])
    elif kind == "partition_end_record":
        target = message.partition_end_record
        _timestamp(target.end_timestamp, body["end_timestamp"])
        target.record_sequence = body["record_sequence"]
        target.partition_token = body["partition_token"]
    elif kind == "partition_event_record":
        target = message.partition_event_record
        _timestamp(target.commit_timestamp, body["commit_timestamp"])
        target.record_sequence = body["record_sequence"]
        target.partition_token = body["partition_token"]
        for move_in in body["move_in_events"]:
            target.move_in_events.add(source_partition_token=move_in["source_partition_token"])
        for move_out in body["move_out_events"]:
            target.move_out_events.add(destination_partition_token=move_out["destination_partition_token"])
    else:
        raise ValueError(f"no ChangeStreamRecord field for {kind}")
    return message


class ProtoRecordEncoder(RecordEncoder):
    """Each record as the base64 text of its serialized ChangeStreamRecord (the same in both dialects)."""

    def row(self, record: dict[str, Any]) -> Any:
        return base64.b64encode(to_proto(record).SerializeToString()).decode()

    def encode(self, record: dict[str, Any]) -> bytes:
        return wire.string(self.row(record))
