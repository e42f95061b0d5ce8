"""Extract end to end on a MUTABLE_KEY_RANGE stream: key ranges move during the windows, a run dies mid-way, the
lake is exact, started partitions join the lineage READY, ended ones are FINISHED, moves are kept as edges."""

from __future__ import annotations

import signal
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.token import FAILPOINT_ENV
from spanner_cdc.extract.window import run_window
from spanner_cdc.store import MetadataStore
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.test_extract_crash import extract
from tests.integration.extract.workload import STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)",
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX)) PRIMARY KEY (Id)",
    f"CREATE CHANGE STREAM {STREAM} FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')",
]


def test_two_windows_with_moves_and_a_crash_land_exactly(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore, pg_url: str,
    spark_connect_server: Any,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    # the crash tests' Spark Connect server: the extract processes do not each start a driver JVM
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work = SmallWorkload(database)
    bounds = [datetime.now(UTC)]
    for n, actions in enumerate((("split", "move"), ("merge", "split"))):
        for step, action in enumerate(actions):
            work.phase(range(n * 24 + step * 8, n * 24 + step * 8 + 8))
            getattr(local_spanner.control, action)(database.name, STREAM)
        work.phase(range(n * 24 + 16, n * 24 + 24))
        bounds.append(datetime.now(UTC))

    # the first window's run dies after publishing a token's files, before committing them; the rerun finishes it
    assert extract(settings, bounds[0], bounds[1], lease="2", **{FAILPOINT_ENV: "after_publish:1"}) == -signal.SIGKILL
    assert extract(settings, bounds[0], bounds[1], lease="2") == 0
    second = run_window(settings, bounds[1], bounds[2])
    assert second.complete and second.transaction_check["ok"]

    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)
    lineage = store.get_lineage(STREAM, settings.namespace)
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
