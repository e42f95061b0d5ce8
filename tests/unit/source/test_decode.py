"""Every record example of the spec, mapped in both dialects through the real client decoding, field by field."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
)
from spanner_cdc.source.decode.mapper import row_mapper
from tests.unit.source import test_decode_examples as ex

DIALECTS = ex.MODES  # GoogleSQL, PostgreSQL decoded by the client, PostgreSQL undecoded (what the reader asks for)


def map_examples(mode: str, examples: list[dict[str, Any]]) -> list[ChangeRecord]:
    dialect, fields, rows = ex.rows_for(mode, examples)
    mapper = row_mapper(dialect, fields)
    return [record for row in rows for record in mapper(row)]


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


ACCOUNT_ID = ColumnType(name="AccountId", type={"code": "STRING"}, is_primary_key=True, ordinal_position=1)
LAST_UPDATE = ColumnType(name="LastUpdate", type={"code": "TIMESTAMP"}, is_primary_key=False, ordinal_position=2)
BALANCE = ColumnType(name="Balance", type={"code": "INT"}, is_primary_key=False, ordinal_position=3)


def expected_data_change(**fields: Any) -> DataChangeRecord:
    base: dict[str, Any] = dict(
        commit_timestamp=datetime(2022, 9, 27, 12, 30, 0, 123456, tzinfo=UTC),
        server_transaction_id="6329047911",
        is_last_record_in_transaction_in_partition=True,
        table_name="AccountBalance",
        mod_type="UPDATE",
        transaction_tag="app=banking,env=prod,action=update",
        is_system_transaction=False,
    )
    base.update(fields)
    return DataChangeRecord(**base)


EXPECTED: dict[str, tuple[dict[str, Any], ChangeRecord]] = {
    "transfer_1": (ex.TRANSFER_1, expected_data_change(
        record_sequence="00000000",
        column_types=(ACCOUNT_ID, LAST_UPDATE, BALANCE),
        mods=(Mod(keys={"AccountId": "Id1"},
                  new_values={"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000},
                  old_values={"LastUpdate": "2022-09-26T11:28:00.189413Z", "Balance": 1500}),),
        value_capture_type="OLD_AND_NEW_VALUES",
        number_of_records_in_transaction=2, number_of_partitions_in_transaction=2)),
    "transfer_2": (ex.TRANSFER_2, expected_data_change(
        record_sequence="00000001",
        column_types=(ACCOUNT_ID, LAST_UPDATE, BALANCE),
        mods=(Mod(keys={"AccountId": "Id2"},
                  new_values={"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 2000},
                  old_values={"LastUpdate": "2022-01-20T11:25:00.199915Z", "Balance": 1500}),),
        value_capture_type="OLD_AND_NEW_VALUES",
        number_of_records_in_transaction=2, number_of_partitions_in_transaction=2)),
    "new_values": (ex.NEW_VALUES, expected_data_change(
        record_sequence="00000000",
        column_types=(ACCOUNT_ID, LAST_UPDATE),
        mods=(Mod(keys={"AccountId": "Id1"}, new_values={"LastUpdate": "2022-09-27T12:30:00.123456Z"}, old_values={}),),
        value_capture_type="NEW_VALUES",
        number_of_records_in_transaction=1, number_of_partitions_in_transaction=1)),
    "new_row": (ex.NEW_ROW, expected_data_change(
        record_sequence="00000000",
        column_types=(ACCOUNT_ID, LAST_UPDATE, BALANCE),
        mods=(Mod(keys={"AccountId": "Id1"},
                  new_values={"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000}, old_values={}),),
        value_capture_type="NEW_ROW",
        number_of_records_in_transaction=1, number_of_partitions_in_transaction=1)),
    "heartbeat": (ex.HEARTBEAT, HeartbeatRecord(timestamp=datetime(2022, 9, 27, 12, 35, 0, 312486, tzinfo=UTC))),
    "child_partitions": (ex.CHILD_PARTITIONS, ChildPartitionsRecord(
        start_timestamp=datetime(2022, 9, 27, 12, 40, 0, 562986, tzinfo=UTC),
        record_sequence="00000001",
        child_partitions=(ChildPartition("child_token_1", ("parent_token_1", "parent_token_2")),))),
    "roots_1": (ex.ROOTS_1, ChildPartitionsRecord(
        start_timestamp=datetime(2022, 5, 1, 9, 0, 1, tzinfo=UTC),
        record_sequence="1000012389",
        child_partitions=(ChildPartition("child_token_1", ()), ChildPartition("child_token_2", ())))),
    "roots_2": (ex.ROOTS_2, ChildPartitionsRecord(
        start_timestamp=datetime(2022, 5, 1, 9, 0, 1, tzinfo=UTC),
        record_sequence="1000012390",
        child_partitions=(ChildPartition("child_token_3", ()),))),
    "merge": (ex.MERGE, ChildPartitionsRecord(
        start_timestamp=datetime(2022, 5, 1, 9, 30, 15, tzinfo=UTC),
        record_sequence="1000012389",
        child_partitions=(ChildPartition("child_token_4", ("child_token_2", "child_token_3")),))),
}  # fmt: skip


def assert_same_fields(actual: object, expected: object) -> None:
    """Compare attribute by attribute, so a failure names the field; timestamps must be aware UTC."""
    assert type(actual) is type(expected)
    for name in expected.__slots__:  # type: ignore[attr-defined]
        got, want = getattr(actual, name), getattr(expected, name)
        if isinstance(want, datetime):
            assert got == want, name
            assert got.utcoffset() is not None and got.utcoffset().total_seconds() == 0, name
        elif isinstance(want, tuple) and want and hasattr(want[0], "__slots__"):
            assert len(got) == len(want), name
            for got_item, want_item in zip(got, want, strict=True):
                assert_same_fields(got_item, want_item)
        else:
            assert got == want, name
            assert type(got) is type(want), name


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_spec_example_maps_field_by_field(dialect: str, name: str) -> None:
    example, expected = EXPECTED[name]
    (record,) = map_examples(dialect, [example])
    assert_same_fields(record, expected)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_json_values_become_plain_dicts(dialect: str) -> None:
    (record,) = map_examples(dialect, [ex.TRANSFER_1])
    assert isinstance(record, DataChangeRecord)
    for value in (record.mods[0].keys, record.mods[0].new_values, record.mods[0].old_values, record.column_types[0].type):
        assert type(value) is dict


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_mod_and_column_of_a_record_is_mapped_in_order(dialect: str) -> None:
    mods = [{"keys": {"AccountId": f"Id{i}"}, "new_values": {"Balance": i}, "old_values": {}} for i in range(5)]
    example = ex.with_changes(ex.NEW_ROW, mods=mods, value_capture_type="NEW_ROW_AND_OLD_VALUES", mod_type="INSERT")
    (record,) = map_examples(dialect, [example])
    assert isinstance(record, DataChangeRecord)
    assert [m.keys["AccountId"] for m in record.mods] == [f"Id{i}" for i in range(5)]
    assert [m.new_values for m in record.mods] == [{"Balance": i} for i in range(5)]
    assert record.value_capture_type == "NEW_ROW_AND_OLD_VALUES" and record.mod_type == "INSERT"
    assert [c.ordinal_position for c in record.column_types] == [1, 2, 3]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_stream_of_rows_maps_in_order(dialect: str) -> None:
    names = ["roots_1", "transfer_1", "heartbeat", "transfer_2", "merge"]
    records = map_examples(dialect, [EXPECTED[n][0] for n in names])
    assert records == [EXPECTED[n][1] for n in names]


def test_every_element_of_every_googlesql_array_is_mapped() -> None:
    """A ChangeRecord array with several elements, each with several records, loses none."""
    fields, _ = ex.googlesql_rows([])
    record_type = ex.CHANGE_RECORD_TYPE
    body_1, body_2 = ex.TRANSFER_1["data_change_record"], ex.TRANSFER_2["data_change_record"]
    elements = [
        {"data_change_record": [body_1, body_2], "heartbeat_record": [], "child_partitions_record": None},
        {"data_change_record": None, "heartbeat_record": [ex.HEARTBEAT["heartbeat_record"]] * 2, "child_partitions_record": []},
    ]
    _, rows = ex._decode(ex.ResultSetMetadata(row_type=ex.StructType(fields=fields)), [ex.encode(elements, record_type)])
    records = row_mapper("GOOGLE_STANDARD_SQL", fields)(rows[0])
    assert [type(r).__name__ for r in records] == ["DataChangeRecord", "DataChangeRecord", "HeartbeatRecord", "HeartbeatRecord"]
    assert [r.record_sequence for r in records[:2]] == ["00000000", "00000001"]  # type: ignore[union-attr]


def test_googlesql_fields_are_found_by_name_not_position() -> None:
    """A server that orders the struct fields differently still maps correctly."""
    dcr = ex.DATA_CHANGE_TYPE.array_element_type.struct_type.fields
    shuffled = ex._array_of_struct(*[(f.name, f.type_) for f in reversed(list(dcr))])
    record_type = ex._array_of_struct(
        ("child_partitions_record", ex.CHILD_PARTITIONS_TYPE), ("heartbeat_record", ex.HEARTBEAT_TYPE), ("data_change_record", shuffled)
    )
    fields, rows = ex.googlesql_rows([ex.TRANSFER_1, ex.MERGE], record_type)
    mapper = row_mapper("GOOGLE_STANDARD_SQL", fields)
    assert [r for row in rows for r in mapper(row)] == [EXPECTED["transfer_1"][1], EXPECTED["merge"][1]]


def test_postgresql_timestamps_with_offsets_and_nanoseconds_are_utc_microseconds() -> None:
    example = {"heartbeat_record": {"timestamp": "2022-09-27T14:35:00.312486789+02:00"}}
    (record,) = map_examples("POSTGRESQL_LAZY", [example])
    assert record == HeartbeatRecord(datetime(2022, 9, 27, 12, 35, 0, 312486, tzinfo=UTC))
    assert record.timestamp.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
