"""GoogleSQL data change rows read from their serialized bytes: the same records as the client's decoding and as the
protobuf path, through the caches of repeated parts (table and column types, the record's last fields), and every
other row left to the protobuf path."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spanner_cdc.errors import SourceError
from spanner_cdc.source.decode.googlesql_bytes import BytesRecords
from spanner_cdc.source.decode.googlesql_values import wire_mapper
from spanner_cdc.source.decode.mapper import row_mapper
from tests.unit.source import test_decode_examples as ex

COLUMNS = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2},
]


def change(seq: int, **fields: Any) -> dict[str, Any]:
    body = {
        "commit_timestamp": f"2024-05-01T10:00:{seq // 4:02d}.{seq:06d}Z", "record_sequence": f"{seq:08d}",
        "server_transaction_id": f"txn-{seq // 4}", "is_last_record_in_transaction_in_partition": seq % 4 == 3,
        "table_name": "Singers", "column_types": COLUMNS,
        "mods": [{"keys": {"Id": str(seq)}, "new_values": {"Name": f"name {seq}"}, "old_values": {}}],
        "mod_type": "INSERT", "value_capture_type": "OLD_AND_NEW_VALUES", "number_of_records_in_transaction": 4,
        "number_of_partitions_in_transaction": 1, "transaction_tag": "", "is_system_transaction": False,
    }  # fmt: skip
    body.update(fields)
    return {"data_change_record": body}


def other_columns(**changes: Any) -> list[dict[str, Any]]:
    """COLUMNS with one field of the second column changed."""
    return [COLUMNS[0], {**COLUMNS[1], **changes}]


# each differs from its neighbours in what the caches key on: table and column types, or the record's last fields
STREAM = [
    change(0), change(1), change(2),
    change(3, table_name="Albums"),  # same column types, another table
    change(4, column_types=other_columns(is_primary_key=True)),  # column types differing in one field each
    change(5, column_types=other_columns(ordinal_position=3)),
    change(6, column_types=other_columns(type={"code": "BYTES"})),
    change(7, column_types=other_columns(name="Nome")),
    change(8, column_types=[*COLUMNS, {"name": "Added", "type": {"code": "BOOL"}, "is_primary_key": False, "ordinal_position": 3}]),
    change(9), change(10, mod_type="UPDATE"), change(11, value_capture_type="NEW_ROW"),  # a schema change, then back
    change(12, number_of_records_in_transaction=5), change(13, number_of_partitions_in_transaction=2),
    change(14, transaction_tag="app=x"), change(15, is_system_transaction=True), change(16, mod_type="DELETE"),
    change(17, mods=[{"keys": {"Id": str(n)}, "new_values": {"Name": "é" * n}, "old_values": {"Name": None}} for n in (1, 130, 20_000)]),
    change(18, record_sequence="x" * 200, server_transaction_id="t" * 300),  # lengths of two and three bytes
    ex.HEARTBEAT, ex.ROOTS_1, ex.MERGE, change(19), ex.TRANSFER_1, ex.TRANSFER_2, ex.NEW_ROW, change(20),
]  # fmt: skip


def mapped(mapper: Any, rows: list[list[Any]]) -> list[Any]:
    return [record for row in rows for record in mapper(row)]


def test_rows_map_like_the_clients_decoding_and_the_protobuf_path() -> None:
    fields, decoded = ex.googlesql_rows(STREAM)
    _, raw = ex.googlesql_rows(STREAM, lazy=True)
    bytes_path = wire_mapper(fields)
    assert type(bytes_path) is BytesRecords
    expected = mapped(row_mapper("GOOGLE_STANDARD_SQL", fields), decoded)
    assert len(expected) == len(STREAM)
    assert mapped(bytes_path, raw) == expected
    assert mapped(wire_mapper(fields, from_bytes=False), raw) == expected
    assert mapped(bytes_path, raw) == expected  # again, every part now from the caches


def test_only_unseen_parts_and_other_rows_take_the_protobuf_path() -> None:
    stream = [change(n, table_name=f"T{n % 3}") for n in range(30)] + [ex.HEARTBEAT, change(30, transaction_tag=None)]
    fields, _ = ex.googlesql_rows([])
    _, raw = ex.googlesql_rows(stream, lazy=True)
    protobuf_path = wire_mapper(fields, from_bytes=False)
    assert protobuf_path is not None
    slow_rows: list[Any] = []

    def slow(row: Any) -> Any:
        slow_rows.append(row)
        return protobuf_path(row)

    records = mapped(BytesRecords(0, slow), raw)
    assert records == mapped(protobuf_path, raw)
    # the first record of each table; the heartbeat; the NULL tag (which reads as untagged)
    assert [raw.index(row) for row in slow_rows] == [0, 1, 2, 30, 31]
    assert records[-1].transaction_tag == ""


ODD = {
    "NULL timestamp": {"commit_timestamp": None},
    "empty sequence": {"record_sequence": ""},
    "NULL flag": {"is_last_record_in_transaction_in_partition": None},
    "no mods": {"mods": []},
    "NULL old values": {"mods": [{"keys": {"Id": "1"}, "new_values": {"Name": "a"}, "old_values": None}]},
    "JSON msgspec refuses": {"mods": [{"keys": {"Id": "1"}, "new_values": {"x": math.nan}, "old_values": {}}]},
    "keys not an object": {"mods": [{"keys": [1], "new_values": {}, "old_values": {}}]},
    "unknown mod type": {"mod_type": "UPSERT"},
    "timestamp not RFC 3339": {"commit_timestamp": "yesterday"},
}


@pytest.mark.parametrize("fields", ODD.values(), ids=ODD.keys())
def test_rows_of_another_shape_map_or_fail_as_on_the_protobuf_path(fields: dict[str, Any]) -> None:
    stream = [change(0), change(1, **fields), change(2, **fields)]  # the second odd row after its parts were cached
    result_fields, _ = ex.googlesql_rows([])
    _, raw = ex.googlesql_rows(stream, lazy=True)
    outcomes = []
    for mapper in (wire_mapper(result_fields), wire_mapper(result_fields, from_bytes=False)):
        try:
            outcomes.append(mapped(mapper, raw))
        except SourceError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]


def test_two_records_in_one_row_take_the_protobuf_path() -> None:
    fields, _ = ex.googlesql_rows([])
    element = {"data_change_record": [change(0)["data_change_record"], change(1)["data_change_record"]],
               "heartbeat_record": [], "child_partitions_record": []}  # fmt: skip
    row = [ex.encode([element], ex.CHANGE_RECORD_TYPE)]
    bytes_path, protobuf_path = wire_mapper(fields), wire_mapper(fields, from_bytes=False)
    assert bytes_path is not None and protobuf_path is not None
    records = bytes_path(row)
    assert len(records) == 2 and records == protobuf_path(row)
