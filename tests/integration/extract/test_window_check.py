"""The window's transaction check over staged lake files, by Spark and in the driver (the same results)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.lake.check import driver_transaction_check, iso_timestamp
from spanner_cdc.lake.publish import staged_files
from spanner_cdc.spark import check as spark_check
from tests.unit.lake.records import T0, data_record
from tests.unit.lake.test_publish import stage

pytestmark = pytest.mark.integration
E = T0 + timedelta(hours=1)


def paths(data_dir: Path) -> list[str]:
    return [str(f.path) for f in staged_files(data_dir)]


@pytest.fixture(params=["spark", "driver"])
def transaction_check(request: pytest.FixtureRequest) -> Any:
    """The check as the close runs it above its driver bound (a Spark job) and below it (pyarrow in this process)."""
    if request.param == "driver":
        return driver_transaction_check
    spark = request.getfixturevalue("spark")
    return lambda files, **window: spark_check.transaction_check(spark, files, **window)


def test_transactions_must_land_all_their_records(transaction_check: Any, tmp_path: Path) -> None:
    # tx-a: 2 records (one with 2 mods) in two tables, all landed; tx-b says 3 records, 1 landed
    records = [
        data_record(0, tx="tx-a", seq="1", records_in_tx=2, mods=2),
        data_record(0, tx="tx-a", seq="2", records_in_tx=2, table="Orders"),
        data_record(5, tx="tx-b", seq="1", records_in_tx=3),
    ]
    stage(tmp_path / "d", records)
    check = transaction_check(paths(tmp_path / "d"), window_start=T0, window_end=E)
    assert (check["transactions"], check["rows"], check["duplicate_rows"], check["outside_window_rows"]) == (2, 4, 0, 0)
    assert check["ok"] is False and check["mismatched"] == 1
    assert check["examples"] == [{"server_transaction_id": "tx-b", "landed_records": 1, "number_of_records_in_transaction": 3}]
    only_orders = [p for p in paths(tmp_path / "d") if "Orders" in p]
    assert transaction_check(only_orders, window_start=T0, window_end=E)["mismatched"] == 1  # tx-a lacks Users
    assert transaction_check([], window_start=T0, window_end=E)["ok"] is True
    # a landing policy that leaves tables out: tx-a's Users record (only Orders landed) and tx-b are partial, not failed
    partial = transaction_check(only_orders, window_start=T0, window_end=E, partial=True)
    assert (partial["ok"], partial["mismatched"], partial["partial_transactions"]) == (True, 0, 1)
    every = transaction_check(paths(tmp_path / "d"), window_start=T0, window_end=E, partial=True)
    assert (every["ok"], every["mismatched"], every["partial_transactions"]) == (True, 0, 1)  # tx-b: 1 of 3 landed


def test_duplicates_fail_and_other_windows_are_not_checked(transaction_check: Any, tmp_path: Path) -> None:
    stage(tmp_path / "d", [data_record(0)], name="part-00000-a.c000.snappy.parquet")
    stage(tmp_path / "d", [data_record(0)], name="part-00000-b.c000.snappy.parquet")
    stage(tmp_path / "d", [data_record(-10, tx="old", records_in_tx=5)], name="part-00000-c.c000.snappy.parquet")
    check = transaction_check(paths(tmp_path / "d"), window_start=T0, window_end=E)
    assert check["mismatched"] == 0 and check["duplicate_rows"] == 1 and check["ok"] is False
    assert check["outside_window_rows"] == 1 and check["transactions"] == 1
    clean = transaction_check(paths(tmp_path / "d")[:1] + paths(tmp_path / "d")[2:], window_start=T0, window_end=E)
    assert clean["ok"] is True and clean["rows"] == 1


def test_spark_and_the_driver_agree(spark: Any, tmp_path: Path) -> None:
    records = [data_record(n, tx=f"tx-{n % 7}", seq=str(n % 3), records_in_tx=1 + n % 4, table=("Users", "Orders")[n % 2]) for n in range(60)]
    stage(tmp_path / "d", records, name="part-00000-a.c000.snappy.parquet")
    stage(tmp_path / "d", records[:5] + [data_record(-3, tx="old")], name="part-00000-b.c000.snappy.parquet")
    found = paths(tmp_path / "d")
    by_spark = spark_check.transaction_check(spark, found, window_start=T0, window_end=E)
    assert by_spark["mismatched"] and by_spark["duplicate_rows"] == 5 and by_spark["outside_window_rows"] == 1
    # the commit timestamp range of the rows inside the window (not the one of the earlier window's row)
    assert (by_spark["first_commit_timestamp"], by_spark["last_commit_timestamp"]) == (
        iso_timestamp(T0), iso_timestamp(T0 + timedelta(microseconds=59)),
    )  # fmt: skip
    assert driver_transaction_check(found, window_start=T0, window_end=E) == by_spark
