"""Malformed or unknown records raise SourceError carrying the raw record, never KeyError/IndexError."""

from __future__ import annotations

from typing import Any

import pytest

from spanner_cdc.errors import SourceError
from spanner_cdc.source.decode.mapper import row_mapper
from tests.unit.source import test_decode_examples as ex

DIALECTS = ex.MODES


def map_one(mode: str, example: Any) -> Any:
    dialect, fields, rows = ex.rows_for(mode, [example])
    return row_mapper(dialect, fields)(rows[0])


def dcr(**changes: Any) -> dict[str, Any]:
    return ex.with_changes(ex.TRANSFER_1, **changes)


BAD_IN_BOTH = {
    "null commit timestamp": dcr(commit_timestamp=None),
    "unknown mod type": dcr(mod_type="UPSERT"),
    "unknown value capture type": dcr(value_capture_type="EVERYTHING"),
    "no mods": dcr(mods=[]),
    "null keys": dcr(mods=[{"keys": None, "new_values": {}, "old_values": {}}]),
    "keys is an array": dcr(mods=[{"keys": ["Id1"], "new_values": {}, "old_values": {}}]),
    "keys is a scalar": dcr(mods=[{"keys": "Id1", "new_values": {}, "old_values": {}}]),
    "new values is an array": dcr(mods=[{"keys": {"A": 1}, "new_values": [1], "old_values": {}}]),
    "column type is not an object": dcr(column_types=[{"name": "A", "type": "INT64", "is_primary_key": True, "ordinal_position": 1}]),
    "null table name": dcr(table_name=None),
    "null record count": dcr(number_of_records_in_transaction=None),
    "null child token": ex.with_changes(ex.MERGE, child_partitions=[{"token": None, "parent_partition_tokens": []}]),
    "null heartbeat timestamp": {"heartbeat_record": {"timestamp": None}},
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", sorted(BAD_IN_BOTH))
def test_malformed_record_raises_source_error_with_raw(dialect: str, case: str) -> None:
    with pytest.raises(SourceError) as info:
        map_one(dialect, BAD_IN_BOTH[case])
    assert info.value.raw is not None
    assert "malformed change record" in str(info.value)
    assert "raw record:" in str(info.value)


BAD_POSTGRESQL = {
    "no key": {},
    "two keys": {"heartbeat_record": {"timestamp": "2022-09-27T12:35:00.312486Z"}, "child_partitions_record": {}},
    "unknown kind": {"partition_event_record": {"timestamp": "2022-09-27T12:35:00.312486Z"}},
    "kind is not an object": {"heartbeat_record": "2022-09-27T12:35:00.312486Z"},
    "row is an array": [ex.HEARTBEAT],
    "row is null": None,
    "row is a scalar": 7,
    "missing field": {"heartbeat_record": {"ts": "2022-09-27T12:35:00.312486Z"}},
    "missing data change field": {"data_change_record": {k: v for k, v in ex.TRANSFER_1["data_change_record"].items() if k != "mods"}},
    "timestamp without zone": {"heartbeat_record": {"timestamp": "2022-09-27T12:35:00.312486"}},
    "timestamp not RFC 3339": {"heartbeat_record": {"timestamp": "yesterday at noon"}},
    "count is text": dcr(number_of_records_in_transaction="two"),
    "boolean is text": dcr(is_system_transaction="false"),
    "mods is an object": dcr(mods={"keys": {"A": 1}}),
    "mod is not an object": dcr(mods=["x"]),
}


@pytest.mark.parametrize("mode", ["POSTGRESQL", "POSTGRESQL_LAZY"])
@pytest.mark.parametrize("case", sorted(BAD_POSTGRESQL))
def test_malformed_postgresql_row_raises_source_error(case: str, mode: str) -> None:
    with pytest.raises(SourceError) as info:
        map_one(mode, BAD_POSTGRESQL[case])
    assert "malformed change record" in str(info.value)


def test_postgresql_error_names_the_keys_it_found() -> None:
    with pytest.raises(SourceError, match="exactly one of .*got keys"):
        map_one("POSTGRESQL", BAD_POSTGRESQL["two keys"])


def test_googlesql_element_without_any_record_is_refused() -> None:
    fields, _ = ex.googlesql_rows([])
    element = {"data_change_record": [], "heartbeat_record": None, "child_partitions_record": []}
    _, rows = ex._decode(ex.ResultSetMetadata(row_type=ex.StructType(fields=fields)), [ex.encode([element], ex.CHANGE_RECORD_TYPE)])
    with pytest.raises(SourceError, match="holds no record") as info:
        row_mapper("GOOGLE_STANDARD_SQL", fields)(rows[0])
    assert info.value.raw == rows[0]


def test_googlesql_empty_change_record_array_is_refused() -> None:
    fields, _ = ex.googlesql_rows([])
    _, rows = ex._decode(ex.ResultSetMetadata(row_type=ex.StructType(fields=fields)), [ex.encode([], ex.CHANGE_RECORD_TYPE)])
    with pytest.raises(SourceError, match="empty ChangeRecord"):
        row_mapper("GOOGLE_STANDARD_SQL", fields)(rows[0])


def test_googlesql_unknown_record_kind_is_refused() -> None:
    record_type = ex._array_of_struct(
        ("data_change_record", ex.DATA_CHANGE_TYPE), ("heartbeat_record", ex.HEARTBEAT_TYPE),
        ("child_partitions_record", ex.CHILD_PARTITIONS_TYPE), ("partition_event_record", ex.HEARTBEAT_TYPE),
    )  # fmt: skip
    fields, rows = ex.googlesql_rows([{"partition_event_record": {"timestamp": "2022-09-27T12:35:00.312486Z"}}], record_type)
    with pytest.raises(SourceError, match="unknown record kind"):
        row_mapper("GOOGLE_STANDARD_SQL", fields)(rows[0])


def test_googlesql_metadata_lacking_a_field_is_refused_before_any_row() -> None:
    dcr_fields = [(f.name, f.type_) for f in ex.DATA_CHANGE_TYPE.array_element_type.struct_type.fields if f.name != "table_name"]
    record_type = ex._array_of_struct(("data_change_record", ex._array_of_struct(*dcr_fields)), ("heartbeat_record", ex.HEARTBEAT_TYPE))
    fields, _ = ex.googlesql_rows([], record_type)
    with pytest.raises(SourceError, match="lacks table_name"):
        row_mapper("GOOGLE_STANDARD_SQL", fields)


def test_googlesql_metadata_without_change_record_column_is_refused() -> None:
    fields, _ = ex.googlesql_rows([])
    two = [ex.StructType.Field(name="a", type_=ex.STRING), ex.StructType.Field(name="b", type_=ex.STRING)]
    with pytest.raises(SourceError, match="no ChangeRecord column"):
        row_mapper("GOOGLE_STANDARD_SQL", two)
    with pytest.raises(SourceError, match="ARRAY<STRUCT>"):
        row_mapper("GOOGLE_STANDARD_SQL", [ex.StructType.Field(name="ChangeRecord", type_=ex.STRING)])
    assert fields  # the well-formed metadata itself is accepted
    row_mapper("GOOGLE_STANDARD_SQL", fields)


@pytest.mark.parametrize("text", ["", "{not json", "null"])
def test_undecoded_postgresql_row_that_is_not_a_json_object_is_refused(text: str) -> None:
    fields, _ = ex.postgresql_rows([])
    with pytest.raises(SourceError, match="malformed change record: the row is not"):
        row_mapper("POSTGRESQL", fields)([ex.Value(string_value=text)])
    with pytest.raises(SourceError, match="the row is null"):
        row_mapper("POSTGRESQL", fields)([ex.Value(null_value=0)])


def test_postgresql_metadata_must_be_one_json_column() -> None:
    with pytest.raises(SourceError, match="one JSON column"):
        row_mapper("POSTGRESQL", [ex.StructType.Field(name="x", type_=ex.STRING)])


def test_googlesql_short_struct_is_a_source_error_not_index_error() -> None:
    """A row whose struct has fewer values than its metadata names (a broken server)."""
    fields, rows = ex.googlesql_rows([ex.HEARTBEAT])
    broken = [[[[], [[]], []]]]  # heartbeat struct with no timestamp value at all
    with pytest.raises(SourceError) as info:
        row_mapper("GOOGLE_STANDARD_SQL", fields)(broken)
    assert not isinstance(info.value, IndexError)
    assert "IndexError" in str(info.value)
    assert row_mapper("GOOGLE_STANDARD_SQL", fields)(rows[0])  # the intact row maps
