"""Current state of a table from changes in commit order: per value capture type, schema changes, typed columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from spanner_cdc.lake.current_state import Column, SchemaFact, fold, schema_facts, target_columns

KEY = {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1}
NAME = {"name": "Name", "type": {"code": "STRING"}, "is_primary_key": False, "ordinal_position": 2}
SCORE = {"name": "Score", "type": {"code": "FLOAT64"}, "is_primary_key": False, "ordinal_position": 3}
ADDED = {"name": "Added", "type": {"code": "TIMESTAMP"}, "is_primary_key": False, "ordinal_position": 4}


def change(ts: int, kind: str, key: int, new: dict[str, Any], types: list[dict[str, Any]], capture: str, seq: str = "00000000") -> dict[str, Any]:
    return {
        "object": "T", "commit_timestamp": datetime(2026, 1, 1, 0, 0, ts, tzinfo=UTC), "server_transaction_id": f"tx{ts}",
        "record_sequence": seq, "mod_index": 0, "change_type": kind, "keys": json.dumps({"Id": str(key)}),
        "new_values": json.dumps(new), "column_types": json.dumps(types), "value_capture_type": capture,
    }  # fmt: skip


def resolved(changes: list[dict[str, Any]], bases: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows after the window, given the rows before it by Id."""
    out = [c.resolve(bases.get(c.keys["Id"])) for c in fold(changes).values()]
    return sorted((r for r in out if r is not None), key=lambda r: r["Id"])


@pytest.mark.parametrize("capture", ["OLD_AND_NEW_VALUES", "NEW_VALUES", "NEW_ROW", "NEW_ROW_AND_OLD_VALUES"])
def test_inserts_updates_and_deletes_in_commit_order_whatever_order_they_come_in(capture: str) -> None:
    full = capture.startswith("NEW_ROW")
    update_types = [KEY, NAME, SCORE] if full else [KEY, SCORE]
    changes = [
        change(1, "INSERT", 1, {"Name": "a", "Score": 1.5}, [KEY, NAME, SCORE], capture),
        change(1, "INSERT", 2, {"Name": "b", "Score": None}, [KEY, NAME, SCORE], capture, seq="00000001"),
        change(2, "UPDATE", 1, {"Name": "a", "Score": 2.5} if full else {"Score": 2.5}, update_types, capture),
        change(3, "DELETE", 2, {}, [KEY, NAME, SCORE], capture),
        change(4, "INSERT", 2, {"Name": "c", "Score": 0.0}, [KEY, NAME, SCORE], capture),
        change(5, "DELETE", 3, {}, [KEY, NAME, SCORE], capture),  # a row the state never saw
    ]
    assert resolved(list(reversed(changes)), {3: {"Id": 3, "Name": "x", "Score": 1.0}}) == [
        {"Id": 1, "Name": "a", "Score": 2.5}, {"Id": 2, "Name": "c", "Score": 0.0},
    ]  # fmt: skip


def test_a_partial_update_keeps_the_columns_the_row_had_before_the_window_and_a_whole_row_does_not() -> None:
    base = {"Id": 1, "Name": "old", "Score": 9.0}
    partial = [change(1, "UPDATE", 1, {"Score": 2.5}, [KEY, SCORE], "NEW_VALUES")]
    assert resolved(partial, {1: base}) == [{"Id": 1, "Name": "old", "Score": 2.5}]
    whole = [change(1, "UPDATE", 1, {"Score": 2.5}, [KEY, SCORE], "NEW_ROW")]  # a whole row without Name: Name is gone
    assert resolved(whole, {1: base}) == [{"Id": 1, "Score": 2.5}]
    again = [change(1, "DELETE", 1, {}, [KEY, NAME, SCORE], "NEW_VALUES"), change(2, "UPDATE", 1, {"Score": 1.0}, [KEY, SCORE], "NEW_VALUES")]
    assert resolved(again, {1: base}) == [{"Id": 1, "Score": 1.0}]  # after a delete, nothing of the old row


def test_values_are_typed_by_their_column_types() -> None:
    stamp = {**ADDED, "ordinal_position": 2}
    folded = fold([change(1, "INSERT", 7, {"Added": "2026-01-02T03:04:05.123456789Z"}, [KEY, stamp], "NEW_VALUES")])
    assert [c.row for c in folded.values()] == [{"Id": 7, "Added": datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)}]


def test_a_column_added_mid_window_joins_and_a_dropped_one_leaves_at_the_last_whole_row() -> None:

    changes = [
        change(1, "INSERT", 1, {"Name": "a", "Score": 1.5}, [KEY, NAME, SCORE], "NEW_VALUES"),
        change(2, "INSERT", 2, {"Name": "b"}, [KEY, NAME], "NEW_VALUES"),  # Score dropped: a whole row without it
        change(3, "UPDATE", 1, {"Added": None}, [KEY, ADDED], "NEW_VALUES"),  # Added: a later partial record's column
    ]
    data = pa.Table.from_pylist(changes)
    facts = schema_facts(data)
    assert {(f.full_row, f.last.second) for f in facts} == {(True, 1), (True, 2), (False, 3)}
    existing = [Column(**KEY), Column(**NAME), Column(**SCORE)]
    assert [c.name for c in target_columns(facts, existing)] == ["Id", "Name", "Added"]
    only_partial = [f for f in facts if not f.full_row]
    assert [c.name for c in target_columns(only_partial, existing)] == ["Id", "Name", "Score", "Added"]
    assert target_columns([], existing) == existing and isinstance(facts[0], SchemaFact)
