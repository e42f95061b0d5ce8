"""Result encoding: hand-written protobuf bytes decode as the client expects, and chunked values merge back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.cloud.spanner_v1.types import PartialResultSet, ResultSet
from google.protobuf import struct_pb2

from spanner_cdc.local_spanner import wire
from spanner_cdc.local_spanner.record_bytes import FastRecordEncoder
from spanner_cdc.local_spanner.record_encoding import GOOGLESQL_METADATA, RecordEncoder, metadata, pg_metadata
from spanner_cdc.local_spanner.values import pb_to_python

COMMIT = datetime(2024, 5, 1, 12, 30, 0, 123456, tzinfo=UTC)


def data_change_record(mods: list[dict[str, Any]], tag: str = "app=x") -> dict[str, Any]:
    return {
        "data_change_record": {
            "commit_timestamp": COMMIT,
            "record_sequence": "00000001",
            "server_transaction_id": "tx1",
            "is_last_record_in_transaction_in_partition": True,
            "table_name": "Accounts",
            "column_types": [
                {"name": "Id", "type": {"code": "STRING"}, "is_primary_key": True, "ordinal_position": 1},
                {"name": "Balance", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 2},
                {"name": "Tags", "type": {"code": "ARRAY", "array_element_type": {"code": "STRING"}}, "is_primary_key": False, "ordinal_position": 3},
            ],
            "mods": mods,
            "mod_type": "UPDATE",
            "value_capture_type": "OLD_AND_NEW_VALUES",
            "number_of_records_in_transaction": 2,
            "number_of_partitions_in_transaction": 1,
            "transaction_tag": tag,
            "is_system_transaction": False,
        }
    }


def client_rows(messages: list[bytes]) -> list[list[Any]]:
    """Rows exactly as google-cloud-spanner decodes the PartialResultSets (including chunk merging)."""
    return list(StreamedResultSet(iter([PartialResultSet.deserialize(m) for m in messages])))


@pytest.mark.parametrize("value", ["", "ascii", "ünïcødé ✓" * 50, True, False, None, 1.5, -0.0, 3, [], [[], ["a", None, [True]]]])
def test_value_bytes_parse_as_protobuf_values(value: Any) -> None:
    parsed = struct_pb2.Value.FromString(wire.encode(value))
    assert pb_to_python(parsed) == (float(value) if type(value) is int else value)


def test_long_strings_and_nested_lists_use_multi_byte_lengths() -> None:
    value = [["x" * 300, ["y" * 20000]], "z" * 129]
    assert pb_to_python(struct_pb2.Value.FromString(wire.encode(value))) == value


def test_googlesql_data_change_record_decodes_field_by_field() -> None:
    mods = [{"keys": {"Id": "A1"}, "new_values": {"Balance": "20"}, "old_values": {"Balance": "10"}}]
    row = RecordEncoder(postgres=False).row(data_change_record(mods))
    (decoded,) = client_rows([wire.partial_result_set([wire.encode(row)], b"t1", GOOGLESQL_METADATA)])
    (change_record,) = decoded[0]
    data, heartbeat, children = change_record
    assert heartbeat == [] and children == []
    (fields,) = data
    assert fields[0] == COMMIT
    assert fields[1:5] == ["00000001", "tx1", True, "Accounts"]
    assert fields[5][2] == ["Tags", {"code": "ARRAY", "array_element_type": {"code": "STRING"}}, False, 3]
    assert fields[6] == [[{"Id": "A1"}, {"Balance": "20"}, {"Balance": "10"}]]
    assert fields[7:] == ["UPDATE", "OLD_AND_NEW_VALUES", 2, 1, "app=x", False]


def test_heartbeat_and_child_partitions_records() -> None:
    encoder = RecordEncoder(postgres=False)
    heartbeat = encoder.row({"heartbeat_record": {"timestamp": COMMIT}})
    children = encoder.row({"child_partitions_record": {"start_timestamp": COMMIT, "record_sequence": "00000002", "child_partitions": [
        {"token": "c1", "parent_partition_tokens": ["p1", "p2"]}, {"token": "c2", "parent_partition_tokens": []}]}})
    rows = client_rows([wire.partial_result_set([wire.encode(heartbeat), wire.encode(children)], b"t", GOOGLESQL_METADATA)])
    assert rows[0][0] == [[[], [[COMMIT]], []]]
    assert rows[1][0] == [[[], [], [[COMMIT, "00000002", [["c1", ["p1", "p2"]], ["c2", []]]]]]]


def test_postgresql_rows_are_one_json_object_with_string_timestamps() -> None:
    record = data_change_record([{"keys": {"Id": "A1"}, "new_values": {"Tags": ["a", None]}, "old_values": {}}])
    row = RecordEncoder(postgres=True).row(record)
    (decoded,) = client_rows([wire.partial_result_set([wire.encode(row)], b"t", pg_metadata("s"))])
    assert list(decoded[0]) == ["data_change_record"]
    body = decoded[0]["data_change_record"]
    assert body["commit_timestamp"] == "2024-05-01T12:30:00.123456Z"
    assert body["mods"][0]["new_values"] == {"Tags": ["a", None]}
    assert body["number_of_records_in_transaction"] == 2


@pytest.mark.parametrize("postgres", [False, True])
def test_a_value_bigger_than_a_message_arrives_whole_through_chunks(postgres: bool) -> None:
    big = "é" * 150_000 + "tail"
    mods = [{"keys": {"Id": f"K{i}"}, "new_values": {"Balance": str(i), "Tags": [big if i == 3 else "t", "u"]}, "old_values": {}} for i in range(6)]
    record = data_change_record(mods, tag="x" * 5000)
    value = RecordEncoder(postgres).row(record)
    budget = 64 * 1024
    parts = wire.chunks(value, budget)
    assert len(parts) >= len(wire.encode(value)) // budget >= 4
    assert all(len(p) <= budget + 64 for p in parts)
    meta = pg_metadata("s") if postgres else GOOGLESQL_METADATA
    messages = [wire.partial_result_set([p], b"r%d" % i, meta if i == 0 else b"", chunked=i < len(parts) - 1) for i, p in enumerate(parts)]
    whole = client_rows([wire.partial_result_set([wire.encode(value)], b"w", meta)])
    assert client_rows(messages) == whole
    if postgres:
        assert json.loads(json.dumps(whole[0][0]))["data_change_record"]["mods"][3]["new_values"]["Tags"][0] == big


def test_result_set_bytes_decode_as_a_result_set() -> None:
    meta = metadata([("A", {"code": "INT64"}), ("B", {"code": "ARRAY", "array_element_type": {"code": "STRING"}})], transaction_id=b"tx")
    decoded = ResultSet.deserialize(wire.result_set(meta, [[wire.encode("1"), wire.encode(["x"])], [wire.encode(None), wire.encode([])]]))
    assert [f.name for f in decoded.metadata.row_type.fields] == ["A", "B"]
    assert decoded.metadata.transaction.id == b"tx"
    assert [list(r) for r in decoded.rows] == [["1", ["x"]], [None, []]]


@pytest.mark.parametrize("postgres", [False, True])
def test_the_fast_encoder_writes_exactly_what_the_generic_one_writes(postgres: bool) -> None:
    odd_types = [{"name": "J", "type": {"code": "JSON", "type_annotation": "PG_JSONB"}, "is_primary_key": False, "ordinal_position": 4},
                 {"name": "A", "type": {"code": "ARRAY", "array_element_type": {"code": "NUMERIC"}}, "is_primary_key": False, "ordinal_position": 5}]
    records = [
        data_change_record([{"keys": {"Id": "A1"}, "new_values": {"Balance": "20"}, "old_values": {"Balance": "10"}}]),
        data_change_record([{"keys": {"Id": f"K{i}"}, "new_values": {"Tags": ["é", None, 'q"uote\\n']}, "old_values": {}} for i in range(300)],
                           tag='tag "with" ünïcode'),
        data_change_record([{"keys": {"Id": "x" * 20000}, "new_values": {}, "old_values": {"F": "NaN", "G": 1.5, "B": True}}]),
        {"heartbeat_record": {"timestamp": COMMIT}},
    ]
    records[2]["data_change_record"]["column_types"] = records[2]["data_change_record"]["column_types"] + odd_types
    records[2]["data_change_record"]["is_last_record_in_transaction_in_partition"] = False
    records[2]["data_change_record"]["is_system_transaction"] = True
    generic, fast = RecordEncoder(postgres), FastRecordEncoder(postgres)
    for _ in range(2):  # the second time from the caches
        assert [fast.encode(r) for r in records] == [generic.encode(r) for r in records] == [wire.encode(generic.row(r)) for r in records]


TEXTS = "".join(chr(i) for i in range(0x110000) if not 0xD800 <= i <= 0xDFFF)  # every code point a str can hold
FLOATS = [1e16, 1e-7, 5e-324, 1e300, float("nan"), float("inf"), -0.0, 0.1]


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
@pytest.mark.parametrize(
    "column_type",
    [{"code": "STRING"}, {"code": "FLOAT64"}, {"code": "FLOAT32"}, {"code": "JSON", "type_annotation": "PG_JSONB"},
     {"code": "ARRAY", "array_element_type": {"code": "FLOAT64"}}],  # fmt: skip
    ids=["no floats", "FLOAT64", "FLOAT32", "JSON", "ARRAY<FLOAT64>"],
)
def test_mod_values_are_jsons_text_whether_msgspec_or_json_writes_them(postgres: bool, column_type: dict[str, Any]) -> None:
    """msgspec writes the values of tables without a column that can hold a float: the text is json's all the same."""
    holds_floats = column_type["code"] != "STRING"
    values = {"T": [TEXTS[i : i + 5000] for i in range(0, len(TEXTS), 5000)], "I": [2**70, -(2**63), 0], "N": None,
              "B": [True, False], "O": {"k": {"n": [None, "\\u"]}}, **({"F": FLOATS} if holds_floats else {})}  # fmt: skip
    record = data_change_record([{"keys": {"Id": "k\x00\u2028"}, "new_values": values, "old_values": {"T": "é"}}])
    record["data_change_record"]["column_types"][2]["type"] = column_type
    generic, fast = RecordEncoder(postgres), FastRecordEncoder(postgres)
    assert fast.encode(record) == generic.encode(record) == wire.encode(generic.row(record))


@pytest.mark.parametrize(
    "when",
    [COMMIT, datetime(2024, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC), datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
     datetime(2026, 11, 26, 15, 0, 0, 999999), datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)],
)
def test_a_commit_response_written_directly_is_the_one_protobuf_writes(when: datetime) -> None:
    from google.cloud.spanner_v1.types import CommitResponse

    from spanner_cdc.local_spanner.values import pb_timestamp

    expected = CommitResponse.pb()()
    expected.commit_timestamp.CopyFrom(pb_timestamp(when))
    assert wire.commit_response(when) == expected.SerializeToString()
    assert CommitResponse.pb().FromString(wire.commit_response(when)).commit_timestamp.ToDatetime(tzinfo=UTC) == pb_timestamp(when).ToDatetime(tzinfo=UTC)
