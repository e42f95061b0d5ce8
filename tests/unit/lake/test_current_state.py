"""Current state of a table from changes in commit order: per value capture type, schema changes, typed columns."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from spanner_cdc.lake.current_state import TableState, apply_changes

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


def rows(state: TableState) -> list[dict[str, Any]]:
    return state.to_arrow().to_pylist()


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
    states: dict[str, TableState] = {}
    apply_changes(states, reversed(changes))
    assert rows(states["T"]) == [{"Id": 1, "Name": "a", "Score": 2.5}, {"Id": 2, "Name": "c", "Score": 0.0}]
    assert states["T"].to_arrow().schema.field("Id").type == pa.int64()


def test_a_column_added_mid_window_joins_with_nulls_and_a_dropped_one_leaves_at_the_first_full_row() -> None:
    states: dict[str, TableState] = {}
    capture = "OLD_AND_NEW_VALUES"
    apply_changes(states, [
        change(1, "INSERT", 1, {"Name": "a", "Score": 1.0}, [KEY, NAME, SCORE], capture),
        change(2, "INSERT", 2, {"Name": "b", "Score": 2.0, "Added": "2026-01-01T00:00:02.5Z"}, [KEY, NAME, SCORE, ADDED], capture),
    ])  # fmt: skip
    assert rows(states["T"]) == [
        {"Id": 1, "Name": "a", "Score": 1.0, "Added": None},
        {"Id": 2, "Name": "b", "Score": 2.0, "Added": datetime(2026, 1, 1, 0, 0, 2, 500000, tzinfo=UTC)},
    ]
    apply_changes(states, [change(3, "UPDATE", 1, {"Name": "z"}, [KEY, NAME], capture)])  # partial: drops nothing
    assert "Score" in states["T"].columns
    apply_changes(states, [change(4, "INSERT", 3, {"Name": "c", "Added": None}, [KEY, NAME, ADDED], capture)])
    assert rows(states["T"])[0] == {"Id": 1, "Name": "z", "Added": None}


def test_a_written_state_reads_back_and_goes_on_the_same_way() -> None:
    types = [KEY, *({"name": n, "type": t, "is_primary_key": False, "ordinal_position": i} for i, (n, t) in enumerate([
        ("B", {"code": "BOOL"}), ("D", {"code": "DATE"}), ("Y", {"code": "BYTES"}), ("N", {"code": "NUMERIC"}),
        ("J", {"code": "JSON"}), ("A", {"code": "ARRAY", "array_element_type": {"code": "INT64"}}), ("F", {"code": "FLOAT64"}),
    ], 2))]  # fmt: skip
    values = {"B": True, "D": "2026-02-03", "Y": "AAEC", "N": "12.500000000", "J": '{"a":1}', "A": ["1", None], "F": "NaN"}
    states: dict[str, TableState] = {}
    apply_changes(states, [change(1, "INSERT", 7, values, types, "NEW_VALUES")])
    written = states["T"].to_arrow()
    row = written.to_pylist()[0]
    assert row["D"] == date(2026, 2, 3) and row["Y"] == b"\x00\x01\x02" and row["N"] == Decimal("12.5") and row["A"] == [1, None]
    assert row["F"] != row["F"] and row["J"] == '{"a":1}'  # NaN
    again = TableState.from_arrow("T", written)
    apply_changes({"T": again}, [change(2, "UPDATE", 7, {"B": False}, [KEY, types[1]], "NEW_VALUES")])
    assert {**row, "B": False, "F": None} == {**again.to_arrow().to_pylist()[0], "F": None}


def test_a_postgresql_numeric_keeps_its_text_whatever_its_scale() -> None:
    pg = {"name": "N", "type": {"code": "NUMERIC", "type_annotation": "PG_NUMERIC"}, "is_primary_key": False, "ordinal_position": 2}
    states: dict[str, TableState] = {}
    texts = ["0.125", "NaN", "1" * 40, None]
    apply_changes(states, [change(1, "INSERT", i, {"N": n}, [KEY, pg], "NEW_VALUES", seq=f"{i:08d}") for i, n in enumerate(texts)])
    written = states["T"].to_arrow()
    assert written.schema.field("N").type == pa.string() and written.column("N").to_pylist() == texts
    again = TableState.from_arrow("T", written)
    assert again.to_arrow().equals(written)


def test_a_state_step_applies_a_parent_and_a_childs_files_in_commit_order_and_only_the_window(tmp_path: Any) -> None:
    import pyarrow.parquet as pq

    from spanner_cdc.lake.current_state import CHANGE_COLUMNS
    from spanner_cdc.spark.state_job import StateTask, step

    capture = "NEW_VALUES"
    parent = [change(1, "INSERT", 1, {"Name": "a", "Score": 1.0}, [KEY, NAME, SCORE], capture),
              change(3, "DELETE", 1, {}, [KEY, NAME, SCORE], capture)]  # fmt: skip
    child = [change(5, "INSERT", 1, {"Name": "again", "Score": None}, [KEY, NAME, SCORE], capture),
             change(9, "UPDATE", 1, {"Name": "next window"}, [KEY, NAME], capture)]  # fmt: skip
    paths = []
    for name, rows_ in (("b-parent", parent), ("a-child", child)):  # the child's file sorts first by name
        paths.append(str(tmp_path / f"{name}.parquet"))
        pq.write_table(pa.Table.from_pylist(rows_).select(list(CHANGE_COLUMNS)), paths[-1])
    destination = str(tmp_path / "state" / "part-00000.parquet")
    listing = step(StateTask("T", None, [], sorted(paths), datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 0, 8, tzinfo=UTC), destination))
    assert listing.to_pylist()[0]["rows"] == 1
    assert pq.read_table(destination).to_pylist() == [{"Id": 1, "Name": "again", "Score": None}]
