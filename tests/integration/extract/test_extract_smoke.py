"""First end-to-end check: three windows with a split and a merge, own small workload, local Spark."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.local_spanner.launcher import LocalSpanner
from spanner_cdc.pipeline import run_window
from tests.integration.extract.lake_reading import change_of, plain_utc, published_rows

pytestmark = pytest.mark.integration
DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM Everything FOR ALL",
]


def canon(ts: datetime, kind: str, keys: dict, new: dict, old: dict) -> tuple[Any, ...]:
    dump = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731
    return (plain_utc(ts), "Accounts", kind, dump(keys), dump(new), dump(old))


def phase(database: Any, ids: range, balances: dict[int, int]) -> list[tuple[Any, ...]]:
    expected = []
    with database.batch() as batch:
        batch.insert("Accounts", ["Id", "Owner", "Balance"], [[i, f"o{i}", i * 10] for i in ids])
    expected += [canon(batch.committed, "INSERT", {"Id": str(i)}, {"Owner": f"o{i}", "Balance": str(i * 10)}, {}) for i in ids]
    balances.update({i: i * 10 for i in ids})
    changed, gone = list(ids)[:3], list(ids)[3:5]

    with database.batch() as move:
        move.update("Accounts", ["Id", "Balance"], [[i, balances[i] + 1] for i in changed])
        move.delete("Accounts", spanner.KeySet(keys=[[i] for i in gone]))
    ts = move.committed
    expected += [canon(ts, "UPDATE", {"Id": str(i)}, {"Balance": str(balances[i] + 1)}, {"Balance": str(balances[i])}) for i in changed]
    expected += [canon(ts, "DELETE", {"Id": str(i)}, {}, {"Owner": f"o{i}", "Balance": str(balances[i])}) for i in gone]
    return expected


def test_three_windows_with_split_and_merge(make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, spark: Any) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, "Everything")
    balances: dict[int, int] = {}
    bounds = [datetime.now(UTC)]
    expected = phase(database, range(0, 10), balances)
    local_spanner.control.split(database.name, "Everything")
    expected += phase(database, range(10, 20), balances)
    bounds.append(datetime.now(UTC))
    expected += phase(database, range(20, 30), balances)
    local_spanner.control.merge(database.name, "Everything")
    expected += phase(database, range(30, 40), balances)
    bounds.append(datetime.now(UTC))
    expected += phase(database, range(40, 50), balances)
    time.sleep(0.01)
    bounds.append(datetime.now(UTC))
    summaries = [run_window(settings, s, e) for s, e in zip(bounds, bounds[1:], strict=False)]
    for summary in summaries:
        assert summary.complete, summary
        assert summary.transaction_check["ok"] and summary.transaction_check["transactions"] > 0
    rows = published_rows(settings.output_root)
    assert Counter(change_of(r) for r in rows) == Counter(expected)
    assert sum(s.records for s in summaries) == len(expected)
    assert summaries[0].waves >= 2  # the split's children were read in a later wave of the same run
