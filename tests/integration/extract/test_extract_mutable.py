"""Extract end to end on a MUTABLE_KEY_RANGE stream, in both dialects: key ranges move during the windows, a run dies
mid-way, the lake is exact, started partitions join the lineage READY, ended ones are FINISHED, moves are kept as edges,
and a key whose range moved inside a window has its changes in commit order by the lake's sort keys."""

from __future__ import annotations

import dataclasses
import json
import signal
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.extract.window import run_window
from spanner_cdc.source import client
from spanner_cdc.store import MetadataStore
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.test_extract_crash import extract
from tests.integration.extract.workload import STREAM, SmallWorkload, change

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GOOGLESQL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)",
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE Tallies (Id INT64 NOT NULL, N INT64) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')",
]
# quoted: the workload writes the same mixed-case names; the stream's unquoted name folds to lower case
POSTGRESQL = [
    'CREATE TABLE "Accounts" ("Id" bigint NOT NULL, "Owner" varchar, "Balance" bigint, PRIMARY KEY ("Id"))',
    'CREATE TABLE "Events" ("Id" bigint NOT NULL, "Kind" varchar, PRIMARY KEY ("Id"))',
    'CREATE TABLE "Tallies" ("Id" bigint NOT NULL, "N" bigint, PRIMARY KEY ("Id"))',
    f"CREATE CHANGE STREAM {STREAM.lower()} FOR ALL WITH (partition_mode = 'MUTABLE_KEY_RANGE')",
]
TALLIES = range(8)  # keys updated in every phase: their hash ranges move with the splits, moves and merges
COMMIT_ORDER = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")


class MovingWorkload(SmallWorkload):
    """The small workload, plus a counter per tally key bumped after each phase: a key's updates straddle moves."""

    def __init__(self, database: Any) -> None:
        super().__init__(database)
        self.tally = 0
        with self.database.batch() as batch:
            batch.insert("Tallies", ["Id", "N"], [[k, 0] for k in TALLIES])
        self.expected += [change(batch.committed, "Tallies", "INSERT", {"Id": str(k)}, {"N": "0"}, {}) for k in TALLIES]

    def phase(self, ids: range) -> None:
        super().phase(ids)
        with self.database.batch() as batch:
            batch.update("Tallies", ["Id", "N"], [[k, self.tally + 1] for k in TALLIES])
        self.expected += [
            change(batch.committed, "Tallies", "UPDATE", {"Id": str(k)}, {"N": str(self.tally + 1)}, {"N": str(self.tally)})
            for k in TALLIES
        ]
        self.tally += 1


def assert_tallies_in_commit_order(rows: list[dict[str, Any]], phases: int) -> None:
    """Each tally key's rows, sorted by the lake's commit-order keys, count 0, 1, 2, ... whichever partition read them;
    and at least one key changed partition between two of its updates inside one window."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["object"] == "Tallies":
            by_key[row["keys"]].append(row)
    assert len(by_key) == len(TALLIES)
    moved_inside_a_window = 0
    for key_rows in by_key.values():
        key_rows.sort(key=lambda r: tuple(r[c] for c in COMMIT_ORDER))
        assert [json.loads(r["new_values"])["N"] for r in key_rows] == [str(n) for n in range(phases + 1)]
        assert [json.loads(r["old_values"]).get("N") for r in key_rows] == [None, *(str(n) for n in range(phases))]
        assert all(json.loads(r["column_types"]) == json.loads(key_rows[0]["column_types"]) for r in key_rows)
        moved_inside_a_window += any(
            a["partition_token"] != b["partition_token"] and a["window_start"] == b["window_start"]
            for a, b in zip(key_rows, key_rows[1:], strict=False)
        )
    assert moved_inside_a_window, "no tally key changed partition inside a window: the ordering check proves nothing"


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"], ids=["googlesql", "postgresql"])
def test_two_windows_with_moves_and_a_crash_land_exactly(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore, pg_url: str,
    spark_connect_server: Any, monkeypatch: pytest.MonkeyPatch, dialect: str,
) -> None:  # fmt: skip
    postgres = dialect == "POSTGRESQL"
    database = make_spanner_database(POSTGRESQL if postgres else GOOGLESQL, dialect)
    stream = STREAM.lower() if postgres else STREAM
    # the crash tests' Spark Connect server: the extract processes do not each start a driver JVM
    settings = extract_settings(database.database_id, stream, spark_master=spark_connect_server.url)
    bounds = [datetime.now(UTC)]
    work = MovingWorkload(database)
    for n, actions in enumerate((("split", "move"), ("merge", "split"))):
        for step, action in enumerate(actions):
            work.phase(range(n * 12 + step * 4, n * 12 + step * 4 + 4))
            getattr(local_spanner.control, action)(database.name, stream)
        work.phase(range(n * 12 + 8, n * 12 + 12))
        bounds.append(datetime.now(UTC))

    # the first window's run dies after publishing a token's files, before committing them; a rerun (in this
    # process, with the same short lease so it takes the dead run's token over) finishes it
    assert extract(settings, bounds[0], bounds[1], lease="2", **{FAILPOINT_ENV: "after_publish:1"}) == -signal.SIGKILL
    settings = dataclasses.replace(settings, lease_s=2.0)
    opened: list[Any] = []
    monkeypatch.setattr(client, "open_database", lambda s, real=client.open_database: opened.append(s) or real(s))
    for start, end in zip(bounds, bounds[1:], strict=False):
        summary = run_window(settings, start, end)
        assert summary.complete and summary.transaction_check["ok"]
    # one Spanner client per run for its plan and all its waves (its plan and each wave opened one, with a session thread)
    assert len(opened) == 2, opened

    rows = published_rows(settings.output_root)
    assert Counter(change_of(r) for r in rows) == Counter(work.expected)
    assert all(json.loads(r["column_types"]) for r in rows)
    int64 = {"code": "INT64"}
    assert {c["name"]: c["type"] for r in rows if r["object"] == "Accounts" for c in json.loads(r["column_types"])} == {
        "Id": int64, "Owner": {"code": "STRING"}, "Balance": int64,
    }  # fmt: skip
    assert_tallies_in_commit_order(rows, phases=6)
    lineage = store.get_lineage(stream, settings.namespace)
    assert [w.state for w in store.windows(lineage.id)] == ["COMPLETE"] * 2
    partitions = {p.token: p for p in store.partitions(lineage.id)}
    assert len(partitions) == 4  # two roots, two started by splits; the merge ended one of them
    assert Counter(p.state for p in partitions.values())["FINISHED"] == 1
    assert all(not p.parents for p in partitions.values())  # long-lived partitions have no parents to wait for
    with sa.create_engine(pg_url).connect() as conn:
        moves = conn.execute(
            sa.text("SELECT source_token, destination_token, moved_at FROM cdc_partition_moves WHERE lineage_id = :id"),
            {"id": lineage.id},
        ).all()
    # split, move, merge, split: four moves, each between known partitions and inside the windows
    assert len(moves) == 4 and len({m.moved_at for m in moves}) == 4
    assert all(m.source_token in partitions and m.destination_token in partitions for m in moves)
    assert all(bounds[0] <= m.moved_at < bounds[2] for m in moves)
