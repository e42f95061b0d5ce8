"""With --data-dir, tables, schema, change records, partitions and tokens survive a restart (or a crash)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from tests.integration.local_spanner.reading import data_records, read_stream

pytestmark = pytest.mark.integration

UPDATE_DDL_METADATA = "type.googleapis.com/google.spanner.admin.database.v1.UpdateDatabaseDdlMetadata"
DDL = ["CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"]


@pytest.fixture
def durable_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSpanner]:
    # server time starts two hours back and runs 60x: history builds up fast, as in a demo
    server = LocalSpanner(data_dir=tmp_path / "data", clock_start=datetime.now(UTC) - timedelta(hours=2), clock_rate=60.0,
                          log_path=tmp_path / "server.log")
    with server:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
        yield server


def database_of(server: LocalSpanner) -> Any:
    return spanner.Client(project="p").instance("i").database("d")


def write(database: Any, first: int, count: int) -> datetime:
    for n in range(first, first + count):
        with database.batch() as batch:
            batch.insert_or_update("t", ["k", "v"], [[n % 7, f"v{n}"], [100 + n, f"w{n}"]])
    return batch.committed


def test_history_reads_the_same_after_restart_and_after_a_crash(durable_server: LocalSpanner) -> None:
    database = create_database(durable_server.host, "p", "i", "d", DDL)
    operations = database.list_database_operations(filter_=f"metadata.@type:{UPDATE_DDL_METADATA}")
    start = max(ts for op in operations for s, ts in zip(op.metadata.statements, op.metadata.commit_timestamps, strict=True) if "STREAM" in s)
    end = write(database, 0, 20)
    durable_server.control.split(database.name, "s")
    end = write(database, 20, 10)
    history = read_stream(database, "s", start, end)
    assert len(history) >= 4 and len(data_records(history)) >= 30

    durable_server.restart()
    again = database_of(durable_server)
    assert read_stream(again, "s", start, end) == history  # same tokens, same records
    with again.snapshot() as snapshot:
        rows = list(snapshot.execute_sql("SELECT k, v FROM t"))
    assert len(rows) == 7 + 30 and [6, "v27"] in rows
    later = write(again, 30, 5)
    assert later > end  # the clock continues after the last commit

    durable_server.restart(crash=True)
    after_crash = database_of(durable_server)
    full = read_stream(after_crash, "s", start, later)
    assert set(history) <= set(full)
    assert [r for r in data_records(full) if r["commit_timestamp"] <= end] == data_records(history)
    assert len(data_records(full)) > len(data_records(history))
    assert write(after_crash, 35, 1) > later
