"""The window's transaction check in the driver, on crafted Arrow tables and on staged files."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from spanner_cdc.lake.check import (
    CHECKED,
    MAX_LISTED,
    check_table,
    driver_transaction_check,
    empty_check,
    iso_timestamp,
)
from spanner_cdc.lake.publish import staged_files
from tests.unit.lake.records import T0, data_record
from tests.unit.lake.test_publish import stage

E = T0 + timedelta(hours=1)


def table(*rows: tuple[Any, ...]) -> pa.Table:
    """Rows of (uuid, seconds after T0, transaction, record_sequence, number_of_records_in_transaction)."""
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in CHECKED]
    stamps = [None if s is None else T0 + timedelta(seconds=s) for s in columns[1]]
    return pa.Table.from_arrays([pa.array(columns[0]), pa.array(stamps), *(pa.array(c) for c in columns[2:])], schema=CHECKED)


def check(data: pa.Table) -> dict[str, Any]:
    return check_table(data, window_start=T0, window_end=E)


def test_complete_transactions_pass() -> None:
    # tx-a: 2 records, one of them with two mods (two rows, one record_sequence)
    result = check(table(("u1", 0, "tx-a", "1", 2), ("u2", 0, "tx-a", "1", 2), ("u3", 0, "tx-a", "2", 2), ("u4", 9, "tx-b", "1", 1)))
    assert result == {
        "ok": True, "transactions": 2, "rows": 4, "mismatched": 0, "partial_transactions": 0, "duplicate_rows": 0, "outside_window_rows": 0, "examples": [],
        "first_commit_timestamp": iso_timestamp(T0), "last_commit_timestamp": iso_timestamp(T0 + timedelta(seconds=9)),
    }  # fmt: skip


def test_a_missing_record_and_disagreeing_counts_are_mismatches_listed_in_order() -> None:
    result = check(table(
        ("u1", 0, "tx-c", "1", 3),  # 1 of 3 records
        ("u2", 1, "tx-b", "1", 2), ("u3", 1, "tx-b", "2", 3),  # 2 distinct records, the rows disagree on the count
        ("u4", 2, "tx-a", "1", 1),
    ))  # fmt: skip
    assert (result["ok"], result["transactions"], result["mismatched"]) == (False, 3, 2)
    assert result["examples"] == [
        {"server_transaction_id": "tx-b", "landed_records": 2, "number_of_records_in_transaction": 3},
        {"server_transaction_id": "tx-c", "landed_records": 1, "number_of_records_in_transaction": 3},
    ]


def test_examples_are_bounded() -> None:
    result = check(table(*((f"u{n}", 0, f"tx-{n:03}", "1", 2) for n in range(MAX_LISTED + 5))))
    assert result["mismatched"] == MAX_LISTED + 5 and len(result["examples"]) == MAX_LISTED
    assert result["examples"][0]["server_transaction_id"] == "tx-000"


def test_a_repeated_uuid_is_a_duplicate() -> None:
    result = check(table(("u1", 0, "tx-a", "1", 1), ("u1", 0, "tx-a", "1", 1)))
    assert (result["ok"], result["mismatched"], result["duplicate_rows"], result["rows"]) == (False, 0, 1, 2)


def test_rows_outside_the_window_are_counted_not_checked() -> None:
    # before the start, at the (exclusive) end, and without a timestamp: none is checked
    hour = int((E - T0).total_seconds())
    result = check(table(("u1", -1, "old", "1", 5), ("u2", hour, "next", "1", 5), ("u3", None, "null", "1", 5), ("u4", 0, "tx-a", "1", 1)))
    assert (result["ok"], result["transactions"], result["rows"], result["outside_window_rows"]) == (True, 1, 1, 3)
    # the first and last commit timestamps are those of the rows inside the window only
    assert (result["first_commit_timestamp"], result["last_commit_timestamp"]) == (iso_timestamp(T0), iso_timestamp(T0))
    assert check(table()) == empty_check()


def test_the_files_are_read_and_checked_together(tmp_path: Path) -> None:
    # tx-a's two records land in two tables' files: the check sees the transaction whole only across files
    stage(tmp_path / "d", [data_record(0, tx="tx-a", seq="1", records_in_tx=2), data_record(0, tx="tx-a", seq="2", records_in_tx=2, table="Orders"),
                           data_record(-10, tx="old", records_in_tx=5)])  # fmt: skip
    paths = [str(f.path) for f in staged_files(tmp_path / "d")]
    result = driver_transaction_check(paths, window_start=T0, window_end=E)
    assert (result["ok"], result["transactions"], result["rows"], result["outside_window_rows"]) == (True, 1, 2, 1)
    only_orders = driver_transaction_check([p for p in paths if "Orders" in p], window_start=T0, window_end=E)
    assert only_orders["mismatched"] == 1 and only_orders["examples"][0]["landed_records"] == 1
    assert driver_transaction_check([], window_start=T0, window_end=E)["ok"] is True


def test_files_that_hold_the_columns_differently_are_checked_as_one_window(tmp_path: Path) -> None:
    """The driver casts files that hold the checked columns alike together: files in another column order or with
    narrower integers (another writer) are still read, cast and checked with the rest, outside rows counted."""
    import pyarrow.parquet as pq

    first = table(("u1", 0, "tx-a", "1", 2), ("u2", 0, "tx-a", "1", 2))
    second = table(("u3", 1, "tx-a", "2", 2), ("u4", 4000, "tx-z", "1", 1))  # u4 after the window's end
    third = table(("u5", 2, "tx-b", "1", 2))  # tx-b lacks its second record
    other_writer = third.select(list(reversed(CHECKED.names)))
    narrow = pa.schema([pa.field(f.name, pa.int32()) if pa.types.is_integer(f.type) else f for f in other_writer.schema])
    paths = []
    for n, data in enumerate((first, second, other_writer.cast(narrow))):
        paths.append(str(tmp_path / f"f{n}.parquet"))
        pq.write_table(data, paths[-1])
    result = driver_transaction_check(paths, window_start=T0, window_end=E)
    assert result == check(pa.concat_tables([first, second, third]))
    assert (result["rows"], result["outside_window_rows"], result["mismatched"]) == (4, 1, 1)


def test_with_tables_left_out_a_short_transaction_is_partial_and_a_surplus_or_disagreement_still_fails() -> None:
    # tx-a lands 1 of its 3 records (the others' table left out), tx-b all of its 1
    short = table(("u1", 0, "tx-a", "1", 3), ("u2", 1, "tx-b", "1", 1))
    assert check(short)["ok"] is False  # without the policy, a missing record is a mismatch
    partial = check_table(short, window_start=T0, window_end=E, partial=True)
    assert (partial["ok"], partial["mismatched"], partial["partial_transactions"]) == (True, 0, 1)
    surplus = table(("u1", 0, "tx-a", "1", 1), ("u2", 0, "tx-a", "2", 1))  # more records than the transaction had
    disagree = table(("u1", 0, "tx-a", "1", 3), ("u2", 0, "tx-a", "2", 2))  # its rows disagree on the count
    duplicate = table(("u1", 0, "tx-a", "1", 3), ("u1", 0, "tx-a", "1", 3))
    for data in (surplus, disagree, duplicate):
        assert check_table(data, window_start=T0, window_end=E, partial=True)["ok"] is False
