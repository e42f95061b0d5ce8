"""JSON parsed by msgspec (PostgreSQL data change rows, GoogleSQL mods): the same records as json's way through the
client's decoding, for the usual rows and for the unusual ones msgspec leaves to json."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spanner_cdc.model.records import MOD_TYPES, VALUE_CAPTURE_TYPES
from spanner_cdc.source.decode.mapper import row_mapper
from spanner_cdc.source.decode.pg_json import FastDataChanges
from tests.unit.source import test_decode_examples as ex

DATA_CHANGES = [ex.TRANSFER_1, ex.TRANSFER_2, ex.NEW_VALUES, ex.NEW_ROW]
# valid JSON that msgspec refuses and json reads (Infinity, a lone surrogate), and values at its edges
ODD_VALUES = {"inf": float("inf"), "surrogate": "\ud800", "big": 10**30, "tiny": 1.5e-320, "nested": [1, {"b": None}], "é": '"q"'}


def _mod(**changes: Any) -> dict[str, Any]:
    mod = {"keys": {"AccountId": "Id1"}, "new_values": {"Balance": 1}, "old_values": {"Balance": 2}}
    mod.update(changes)
    return mod


# data change records whose JSON the fast paths must read like json does, or leave to it
VARIANTS = {
    "null new_values": ex.with_changes(ex.TRANSFER_1, mods=[_mod(new_values=None)]),
    "empty objects": ex.with_changes(ex.TRANSFER_1, mods=[_mod(keys={}, new_values={}, old_values={})]),
    "odd JSON values": ex.with_changes(ex.TRANSFER_1, mods=[_mod(new_values=ODD_VALUES), _mod()]),
    "null tag and flags": ex.with_changes(ex.TRANSFER_1, transaction_tag=None, is_system_transaction=None,
                                          is_last_record_in_transaction_in_partition=None),  # fmt: skip
    "false flags": ex.with_changes(ex.TRANSFER_1, is_system_transaction=False, is_last_record_in_transaction_in_partition=False),
    "INT64 as text": ex.with_changes(ex.TRANSFER_1, number_of_records_in_transaction="2"),
    "numeric record_sequence": ex.with_changes(ex.TRANSFER_1, record_sequence=7),
    "nanoseconds": ex.with_changes(ex.TRANSFER_1, commit_timestamp="2022-09-27T12:30:00.123456789Z"),
    "many mods": ex.with_changes(ex.TRANSFER_1, mods=[_mod(keys={"AccountId": f"Id{i}"}) for i in range(50)]),
}


def _records(mode: str, examples: list[dict[str, Any]]) -> list[Any]:
    dialect, fields, rows = ex.rows_for(mode, examples)
    mapper = row_mapper(dialect, fields)
    return [record for row in rows for record in mapper(row)]


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_undecoded_rows_map_like_client_decoded_ones(dialect: str, name: str) -> None:
    examples = [*DATA_CHANGES, VARIANTS[name], ex.HEARTBEAT, ex.CHILD_PARTITIONS]
    if dialect == "GOOGLE_STANDARD_SQL" and name in ("numeric record_sequence", "null tag and flags"):
        examples = DATA_CHANGES  # a STRUCT's STRING field cannot hold a number; NULL flags: covered by test_decode_errors
    fast = _records(f"{dialect}_LAZY", examples)
    assert fast == _records(dialect, examples)
    assert len(fast) == len(examples)


def test_usual_postgresql_data_changes_take_the_fast_path_and_unusual_ones_do_not() -> None:
    fast = FastDataChanges()
    for example in [*DATA_CHANGES, VARIANTS["null tag and flags"], VARIANTS["empty objects"], VARIANTS["many mods"]]:
        assert fast(json.dumps(example)) is not None
    unusual = ["odd JSON values", "INT64 as text", "numeric record_sequence", "null new_values"]
    for text in [json.dumps(VARIANTS[name]) for name in unusual] + [
        json.dumps(ex.HEARTBEAT), json.dumps({**ex.TRANSFER_1, "heartbeat_record": None}), "", "null", "[1]", "{",
        json.dumps(ex.with_changes(ex.TRANSFER_1, mods=[])), json.dumps(ex.with_changes(ex.TRANSFER_1, mod_type="UPSERT")),
    ]:  # fmt: skip
        assert fast(text) is None, text


def test_column_types_are_mapped_once_per_text() -> None:
    fast = FastDataChanges()
    first, second = (fast(json.dumps(example)) for example in (ex.TRANSFER_1, ex.TRANSFER_2))
    assert first is not None and second is not None
    assert first.column_types is second.column_types
    assert first.column_types == _records("POSTGRESQL", [ex.TRANSFER_1])[0].column_types


def test_a_tables_changed_column_types_are_mapped_anew_and_the_same_text_maps_alike_again() -> None:
    """As after a schema change mid-stream (a column added, then a record of the old schema): each text its own."""
    fast = FastDataChanges()
    columns = ex.TRANSFER_1["data_change_record"]["column_types"]
    added = [*columns, {"name": "Note", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 4}]
    examples = [ex.TRANSFER_1, ex.with_changes(ex.TRANSFER_1, column_types=added), ex.TRANSFER_1]
    records = [fast(json.dumps(example)) for example in examples]
    assert [r.column_types if r else None for r in records] == [r.column_types for r in _records("POSTGRESQL", examples)]
    assert [len(r.column_types) if r else 0 for r in records] == [3, 4, 3]


@pytest.mark.parametrize(
    ("field", "accepted"), [("mod_type", MOD_TYPES), ("value_capture_type", VALUE_CAPTURE_TYPES)]
)
def test_each_mod_type_and_capture_type_takes_the_fast_path_and_maps_like_the_slow_one(field: str, accepted: tuple[str, ...]) -> None:
    fast = FastDataChanges()
    for value in accepted:
        example = ex.with_changes(ex.TRANSFER_1, **{field: value})
        record = fast(json.dumps(example))
        assert record is not None and getattr(record, field) == value
        assert record == _records("POSTGRESQL", [example])[0]
    assert fast(json.dumps(ex.with_changes(ex.TRANSFER_1, **{field: accepted[0].lower()}))) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [({"a": 1}, {"a": 1}), ([1, 2], "not a JSON object"), ("text", "not a JSON object"), (None, "is null")],
)
def test_the_clients_json_objects_are_told_apart_through_their_public_serialization(value: Any, expected: Any) -> None:
    from google.cloud.spanner_v1.data_types import JsonObject

    from spanner_cdc.source.decode.fields import Malformed, as_json_object

    if isinstance(expected, dict):
        assert as_json_object(JsonObject(value), "mods.keys", False) == expected
        assert type(as_json_object(JsonObject(value), "mods.keys", False)) is dict
        return
    with pytest.raises(Malformed, match=expected):
        as_json_object(JsonObject(value), "mods.keys", False)
    if value is None:
        assert as_json_object(JsonObject(value), "mods.new_values", True) == {}
