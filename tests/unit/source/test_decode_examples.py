"""The spec's example records, and how the real client decodes them in each dialect (wire fixtures)."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from google.cloud.spanner_v1 import PartialResultSet, ResultSetMetadata, StructType, Type, TypeAnnotationCode, TypeCode
from google.cloud.spanner_v1.data_types import JsonObject
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.protobuf.struct_pb2 import ListValue, Value

# ---- the spec's examples, transcribed as JSON (PostgreSQL form); "..." placeholders dropped ----

_COLUMNS_3 = [
    {"name": "AccountId", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "LastUpdate", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Balance", "type": {"code": "INT"}, "is_primary_key": False, "ordinal_position": 3},
]
_TXN = {"server_transaction_id": "6329047911", "is_last_record_in_transaction_in_partition": True,
        "table_name": "AccountBalance", "mod_type": "UPDATE",
        "transaction_tag": "app=banking,env=prod,action=update", "is_system_transaction": False}  # fmt: skip

TRANSFER_1 = {
    "data_change_record": {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z", "record_sequence": "00000000", **_TXN,
        "column_types": _COLUMNS_3,
        "mods": [{"keys": {"AccountId": "Id1"},
                  "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000},
                  "old_values": {"LastUpdate": "2022-09-26T11:28:00.189413Z", "Balance": 1500}}],
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 2, "number_of_partitions_in_transaction": 2,
    }
}  # fmt: skip
TRANSFER_2 = {
    "data_change_record": {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z", "record_sequence": "00000001", **_TXN,
        "column_types": _COLUMNS_3,
        "mods": [{"keys": {"AccountId": "Id2"},
                  "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 2000},
                  "old_values": {"LastUpdate": "2022-01-20T11:25:00.199915Z", "Balance": 1500}}],
        "value_capture_type": "OLD_AND_NEW_VALUES",
        "number_of_records_in_transaction": 2, "number_of_partitions_in_transaction": 2,
    }
}  # fmt: skip
NEW_VALUES = {
    "data_change_record": {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z", "record_sequence": "00000000", **_TXN,
        "column_types": _COLUMNS_3[:2],
        "mods": [{"keys": {"AccountId": "Id1"},
                  "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z"}, "old_values": {}}],
        "value_capture_type": "NEW_VALUES",
        "number_of_records_in_transaction": 1, "number_of_partitions_in_transaction": 1,
    }
}  # fmt: skip
NEW_ROW = {
    "data_change_record": {
        "commit_timestamp": "2022-09-27T12:30:00.123456Z", "record_sequence": "00000000", **_TXN,
        "column_types": _COLUMNS_3,
        "mods": [{"keys": {"AccountId": "Id1"},
                  "new_values": {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000}, "old_values": {}}],
        "value_capture_type": "NEW_ROW",
        "number_of_records_in_transaction": 1, "number_of_partitions_in_transaction": 1,
    }
}  # fmt: skip
HEARTBEAT = {"heartbeat_record": {"timestamp": "2022-09-27T12:35:00.312486Z"}}
CHILD_PARTITIONS = {
    "child_partitions_record": {
        "start_timestamp": "2022-09-27T12:40:00.562986Z", "record_sequence": "00000001",
        "child_partitions": [{"token": "child_token_1", "parent_partition_tokens": ["parent_token_1", "parent_token_2"]}],
    }
}  # fmt: skip
# the query workflow's examples: a numeric record_sequence, NULL parents of root partitions, an extra field
ROOTS_1 = {
    "child_partitions_record": {
        "record_type": "child_partitions", "start_timestamp": "2022-05-01T09:00:01Z", "record_sequence": 1000012389,
        "child_partitions": [{"token": "child_token_1", "parent_partition_tokens": [None]},
                             {"token": "child_token_2", "parent_partition_tokens": [None]}],
    }
}  # fmt: skip
ROOTS_2 = {
    "child_partitions_record": {
        "record_type": "child_partitions", "start_timestamp": "2022-05-01T09:00:01Z", "record_sequence": 1000012390,
        "child_partitions": [{"token": "child_token_3", "parent_partition_tokens": [None]}],
    }
}  # fmt: skip
MERGE = {
    "child_partitions_record": {
        "record_type": "child_partitions", "start_timestamp": "2022-05-01T09:30:15Z", "record_sequence": 1000012389,
        "child_partitions": [{"token": "child_token_4", "parent_partition_tokens": ["child_token_2", "child_token_3"]}],
    }
}  # fmt: skip

# ---- GoogleSQL wire shape (SPANNER_WIRE.md), built as the server would send it -------------


def _scalar(code: TypeCode) -> Type:
    return Type(code=code)


def _array_of_struct(*fields: tuple[str, Type]) -> Type:
    struct = StructType(fields=[StructType.Field(name=name, type_=t) for name, t in fields])
    return Type(code=TypeCode.ARRAY, array_element_type=Type(code=TypeCode.STRUCT, struct_type=struct))


STRING, BOOL, INT64, JSON, TIMESTAMP = (
    _scalar(TypeCode.STRING), _scalar(TypeCode.BOOL), _scalar(TypeCode.INT64), _scalar(TypeCode.JSON), _scalar(TypeCode.TIMESTAMP),
)  # fmt: skip
DATA_CHANGE_TYPE = _array_of_struct(
    ("commit_timestamp", TIMESTAMP), ("record_sequence", STRING), ("server_transaction_id", STRING),
    ("is_last_record_in_transaction_in_partition", BOOL), ("table_name", STRING),
    ("column_types", _array_of_struct(("name", STRING), ("type", JSON), ("is_primary_key", BOOL), ("ordinal_position", INT64))),
    ("mods", _array_of_struct(("keys", JSON), ("new_values", JSON), ("old_values", JSON))),
    ("mod_type", STRING), ("value_capture_type", STRING), ("number_of_records_in_transaction", INT64),
    ("number_of_partitions_in_transaction", INT64), ("transaction_tag", STRING), ("is_system_transaction", BOOL),
)  # fmt: skip
HEARTBEAT_TYPE = _array_of_struct(("timestamp", TIMESTAMP))
CHILD_PARTITIONS_TYPE = _array_of_struct(
    ("start_timestamp", TIMESTAMP), ("record_sequence", STRING),
    ("child_partitions", _array_of_struct(("token", STRING), ("parent_partition_tokens", Type(code=TypeCode.ARRAY, array_element_type=STRING)))),
)  # fmt: skip
CHANGE_RECORD_TYPE = _array_of_struct(
    ("data_change_record", DATA_CHANGE_TYPE), ("heartbeat_record", HEARTBEAT_TYPE), ("child_partitions_record", CHILD_PARTITIONS_TYPE)
)


def encode(value: Any, t: Type) -> Value:
    """A Python value (JSON form) as the protobuf Value Spanner sends for type `t`."""
    if value is None:
        return Value(null_value=0)
    code = t.code
    if code == TypeCode.STRUCT:
        fields = t.struct_type.fields
        return Value(list_value=ListValue(values=[encode(value.get(f.name), f.type_) for f in fields]))
    if code == TypeCode.ARRAY:
        return Value(list_value=ListValue(values=[encode(item, t.array_element_type) for item in value]))
    if code == TypeCode.BOOL:
        return Value(bool_value=value)
    if code == TypeCode.JSON:
        return Value(string_value=json.dumps(value))
    return Value(string_value=str(value))  # STRING, INT64, TIMESTAMP all travel as text


def _decode(metadata: ResultSetMetadata, values: Sequence[Value], lazy: bool = False) -> tuple[list[Any], list[list[Any]]]:
    """Feed the messages through the client's own StreamedResultSet, as a real query would."""
    message = PartialResultSet(metadata=metadata, resume_token=b"t")
    PartialResultSet.pb(message).values.extend(values)
    results = StreamedResultSet(iter([message]), lazy_decode=lazy)
    rows = list(results)
    return list(results.fields), rows


def googlesql_rows(
    examples: Sequence[dict[str, Any]], record_type: Type = CHANGE_RECORD_TYPE, lazy: bool = False
) -> tuple[list[Any], list[list[Any]]]:
    """Each example as one GoogleSQL row: ChangeRecord = [STRUCT<data_change_record, heartbeat_record, ...>];
    `lazy`: left undecoded (protobuf Values, as the reader asks for them)."""
    metadata = ResultSetMetadata(row_type=StructType(fields=[StructType.Field(name="ChangeRecord", type_=record_type)]))
    element = record_type.array_element_type
    values = []
    for example in examples:
        ((kind, body),) = example.items()
        struct = {f.name: ([body] if f.name == kind else []) for f in element.struct_type.fields}
        values.append(encode([struct], record_type))
    return _decode(metadata, values, lazy)


def postgresql_rows(examples: Sequence[Any], lazy: bool = False) -> tuple[list[Any], list[list[Any]]]:
    """Each example as one PostgreSQL-dialect row: a single JSON (PG_JSONB) column; `lazy`: left undecoded."""
    column = Type(code=TypeCode.JSON, type_annotation=TypeAnnotationCode.PG_JSONB)
    metadata = ResultSetMetadata(row_type=StructType(fields=[StructType.Field(name="read_json_s", type_=column)]))
    return _decode(metadata, [Value(string_value=json.dumps(example)) for example in examples], lazy)


# how rows reach the mapper: decoded by the client, or raw (lazy_decode, what the reader asks for)
MODES = ("GOOGLE_STANDARD_SQL", "GOOGLE_STANDARD_SQL_LAZY", "POSTGRESQL", "POSTGRESQL_LAZY")


def rows_for(mode: str, examples: Sequence[Any]) -> tuple[str, list[Any], list[list[Any]]]:
    """(dialect, result fields, rows) of the examples as the mapper receives them in `mode`."""
    lazy = mode.endswith("_LAZY")
    if mode.startswith("GOOGLE_STANDARD_SQL"):
        return ("GOOGLE_STANDARD_SQL", *googlesql_rows(examples, lazy=lazy))
    return ("POSTGRESQL", *postgresql_rows(examples, lazy=lazy))


def with_changes(example: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of an example with some fields of its record replaced."""
    example = copy.deepcopy(example)
    ((_, body),) = example.items()
    body.update(changes)
    return example


# ---- the fixtures' own assumptions about the client, checked ---------------------------------


def test_googlesql_structs_decode_as_positional_lists_and_json_as_jsonobject() -> None:
    fields, rows = googlesql_rows([TRANSFER_1])
    (record_array,) = rows[0]
    (element,) = record_array
    assert isinstance(element, list) and len(element) == 3
    data_change, heartbeat, child = element
    assert heartbeat == [] and child == []
    (struct,) = data_change
    assert struct[1] == "00000000" and struct[9] == 2
    assert isinstance(struct[6][0][0], JsonObject)
    assert [f.name for f in fields] == ["ChangeRecord"]


def test_postgresql_rows_decode_as_one_json_object() -> None:
    fields, rows = postgresql_rows([HEARTBEAT])
    assert isinstance(rows[0][0], JsonObject)
    assert rows[0][0] == HEARTBEAT
    _, raw = postgresql_rows([HEARTBEAT], lazy=True)
    assert isinstance(raw[0][0], Value) and json.loads(raw[0][0].string_value) == HEARTBEAT
    assert fields[0].type_.type_annotation == TypeAnnotationCode.PG_JSONB
