"""`spanner-cdc read --all-partitions` through forced splits and merges, both dialects, against what was written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.model.record_json import rfc3339
from spanner_cdc.source.client import stream_metadata
from spanner_cdc.source.reader import PartitionReader
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.reader.lineage_checks import (
    Mod,
    canonical_keys,
    check_every_mod_once_in_key_order,
    check_lineage,
    read_all,
)

pytestmark = pytest.mark.integration

SCHEMA = {
    "GOOGLE_STANDARD_SQL": (
        ["CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)",
         "CREATE TABLE Moves (Id INT64 NOT NULL, Seq INT64 NOT NULL, Amount INT64) PRIMARY KEY (Id, Seq)",
         "CREATE CHANGE STREAM Money FOR ALL"],
        "Money", ("Accounts", ("Id", "Owner", "Balance")), ("Moves", ("Id", "Seq", "Amount")),
    ),
    "POSTGRESQL": (
        ["create table accounts (id bigint primary key, owner varchar, balance bigint)",
         "create table moves (id bigint not null, seq bigint not null, amount bigint, primary key (id, seq))",
         "CREATE CHANGE STREAM money FOR ALL"],
        "money", ("accounts", ("id", "owner", "balance")), ("moves", ("id", "seq", "amount")),
    ),
}  # fmt: skip


class Writer:
    """Commits transactions through the client and keeps the ground truth: every mod with its commit timestamp."""

    def __init__(self, database: Any, dialect: str) -> None:
        _, _, self.accounts, self.moves = SCHEMA[dialect]
        self.database = database
        self.truth: list[Mod] = []
        self.balances: dict[int, int] = {}

    def round(self, ids: range, seq: int) -> None:
        (accounts, a_cols), (moves, m_cols) = self.accounts, self.moves
        for i in ids:
            with self.database.batch() as batch:
                mods: list[tuple[str, str, dict[str, int]]] = []
                if i in self.balances and i % 5 == 0:
                    batch.delete(accounts, keyset=_keyset([[i]]))
                    del self.balances[i]
                    mods.append((accounts, "DELETE", {a_cols[0]: i}))
                elif i in self.balances:
                    self.balances[i] += seq
                    batch.update(accounts, (a_cols[0], a_cols[2]), [(i, self.balances[i])])
                    mods.append((accounts, "UPDATE", {a_cols[0]: i}))
                else:
                    self.balances[i] = seq
                    batch.insert(accounts, a_cols, [(i, f"owner-{i}", seq)])
                    mods.append((accounts, "INSERT", {a_cols[0]: i}))
                # a second table and a second key in the same transaction: records in several partitions
                batch.insert(moves, m_cols, [(i, seq, seq * 10), (i + 1000, seq, -seq * 10)])
                mods += [(moves, "INSERT", {m_cols[0]: i, m_cols[1]: seq}), (moves, "INSERT", {m_cols[0]: i + 1000, m_cols[1]: seq})]
            committed = rfc3339(batch.committed)
            self.truth += [(table, kind, canonical_keys(keys), committed) for table, kind, keys in mods]


def _keyset(keys: list[list[int]]) -> Any:
    from google.cloud.spanner_v1 import KeySet

    return KeySet(keys=keys)


@pytest.mark.parametrize("dialect", list(SCHEMA))
def test_all_partitions_through_a_split_and_a_merge(local_spanner: LocalSpanner, dialect: str) -> None:
    ddl, stream, _, _ = SCHEMA[dialect]
    database_id = unique_database_id("rd")
    database = create_database(local_spanner.host, PROJECT, INSTANCE, database_id, ddl, dialect)
    created = stream_metadata(database, stream, dialect).created_at
    assert created is not None
    writer = Writer(database, dialect)
    writer.round(range(0, 40), seq=1)
    split_children = local_spanner.control.split(database.name, stream)
    writer.round(range(0, 40), seq=2)
    merged = local_spanner.control.merge(database.name, stream)
    writer.round(range(20, 60), seq=3)
    last = max(commit for *_, commit in writer.truth)

    lines, debug_log = read_all(local_spanner.host, database_id, stream, rfc3339(created), last)
    check_every_mod_once_in_key_order(lines, writer.truth)
    parents = check_lineage(lines, debug_log)
    assert len(split_children) == 2 and all(len(parents[child]) == 1 for child in split_children)
    assert len(parents[merged]) == 2, parents  # the merge child: read once (no record twice), after both parents
    assert lines[0]["partition_token"] is None and lines[0]["kind"] == "child_partitions"


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
def test_reader_survives_unavailable_mid_stream(local_spanner: LocalSpanner, dialect: str) -> None:
    """The client resumes UNAVAILABLE itself; through the typed reader nothing is lost or repeated."""
    ddl, stream, _, _ = SCHEMA[dialect]
    database = create_database(local_spanner.host, PROJECT, INSTANCE, unique_database_id("ru"), ddl, dialect)
    created = stream_metadata(database, stream, dialect).created_at
    writer = Writer(database, dialect)
    writer.round(range(0, 30), seq=1)
    end = max(commit for *_, commit in writer.truth)
    from spanner_cdc.cli.commands.read import parse_timestamp

    end_ts = parse_timestamp(end, "--end") + timedelta(microseconds=1)
    reader = PartitionReader(database, stream, dialect=dialect, heartbeat_ms=1000)
    roots = [c.token for r in reader.read(None, created, end_ts) for c in r.child_partitions]  # type: ignore[union-attr]

    def read_everything() -> list[Any]:
        return [record for token in roots for record in reader.read(token, created, end_ts)]

    clean = read_everything()
    injected = local_spanner.control.status()["failures_injected"]
    local_spanner.control.fail_next_reads(reads=2, after_rows=5)
    assert read_everything() == clean
    assert local_spanner.control.status()["failures_injected"] == injected + 2
    assert sum(len(r.mods) for r in clean if r.kind == "data_change") == len(writer.truth)
