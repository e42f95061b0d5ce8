"""Test helper: a small workload of inserts, updates and deletes, with the changes it must produce, and CLI env."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from google.cloud import spanner

from tests.integration.extract.lake_reading import plain_utc

if TYPE_CHECKING:
    from spanner_cdc.devstack.spanner_server import LocalSpanner

DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)",
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE CHANGE STREAM Everything FOR ALL",
]
STREAM = "Everything"


def change(ts: datetime, table: str, kind: str, keys: dict, new: dict, old: dict) -> tuple[Any, ...]:
    return (plain_utc(ts), table, kind, *(json.dumps(d, sort_keys=True) for d in (keys, new, old)))


class SmallWorkload:
    """Each phase: one insert transaction over two tables, then one transaction of updates and deletes."""

    def __init__(self, database: Any) -> None:
        self.database = database
        self.balances: dict[int, int] = {}
        self.expected: list[tuple[Any, ...]] = []

    def phase(self, ids: range) -> None:
        with self.database.batch() as batch:
            batch.insert("Accounts", ["Id", "Owner", "Balance"], [[i, f"o{i}", i * 10] for i in ids])
            batch.insert("Events", ["Id", "Kind"], [[i, "open"] for i in ids])
        for i in ids:
            self.expected.append(change(batch.committed, "Accounts", "INSERT", {"Id": str(i)}, {"Owner": f"o{i}", "Balance": str(i * 10)}, {}))
            self.expected.append(change(batch.committed, "Events", "INSERT", {"Id": str(i)}, {"Kind": "open"}, {}))
            self.balances[i] = i * 10
        changed, gone = list(ids)[:3], list(ids)[3:5]
        with self.database.batch() as move:
            move.update("Accounts", ["Id", "Balance"], [[i, self.balances[i] + 1] for i in changed])
            move.delete("Accounts", spanner.KeySet(keys=[[i] for i in gone]))
        for i in changed:
            self.expected.append(
                change(move.committed, "Accounts", "UPDATE", {"Id": str(i)}, {"Balance": str(self.balances[i] + 1)}, {"Balance": str(self.balances[i])})
            )
            self.balances[i] += 1
        for i in gone:
            self.expected.append(
                change(move.committed, "Accounts", "DELETE", {"Id": str(i)}, {}, {"Owner": f"o{i}", "Balance": str(self.balances.pop(i))})
            )


def one_window(database: Any, server: LocalSpanner) -> tuple[SmallWorkload, datetime, datetime]:
    """A small workload over one window with a split in its middle: (workload, start, end)."""
    work = SmallWorkload(database)
    start = datetime.now(UTC)
    work.phase(range(0, 6))
    server.control.split(database.name, STREAM)
    work.phase(range(6, 12))
    return work, start, datetime.now(UTC)
