"""Reads at a timestamp see the rows as committed then (both dialects, Read and SQL), within version_retention_period."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, LocalSpanner, create_database
from spanner_cdc.local_spanner.values import parse_timestamp

pytestmark = [pytest.mark.integration, pytest.mark.heavy(12)]  # it mostly waits: started beside the busy modules, not last

SCHEMAS = {
    GOOGLE_STANDARD_SQL: ["CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)"],
    POSTGRESQL: ["CREATE TABLE t (k bigint NOT NULL, v varchar, PRIMARY KEY (k))"],
}
ONE_MICROSECOND = timedelta(microseconds=1)


def apply(database: Any, upserts: dict[int, str], deletes: list[int]) -> datetime:
    with database.batch() as batch:
        if upserts:
            batch.insert_or_update("t", ["k", "v"], [[k, v] for k, v in upserts.items()])
        if deletes:
            batch.delete("t", spanner.KeySet(keys=[[k] for k in deletes]))
    return batch.committed


def history(database: Any) -> list[tuple[datetime, dict[int, str]]]:
    """Four commits (inserts, updates, deletes); the state after each, as the test expects to read it back."""
    steps = [({k: f"a{k}" for k in range(8)}, []), ({2: "b2", 9: "b9", 10: "b10"}, [0, 1]), ({3: "c3"}, [9, 4]), ({k: f"d{k}" for k in range(11, 15)}, [2])]
    state: dict[int, str] = {}
    out = []
    for upserts, deletes in steps:
        committed = apply(database, upserts, deletes)
        state = {k: v for k, v in {**state, **upserts}.items() if k not in deletes}
        out.append((committed, dict(state)))
    return out


def read_both_ways(database: Any, postgres: bool, **bound: Any) -> tuple[dict[int, str], dict[int, str]]:
    with database.snapshot(**bound) as snapshot:
        by_read = {k: v for k, v in snapshot.read("t", ["k", "v"], spanner.KeySet(all_=True))}
    with database.snapshot(**bound) as snapshot:
        by_sql = {k: v for k, v in snapshot.execute_sql("SELECT k, v FROM t")}
    return by_read, by_sql


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_reads_at_past_timestamps_see_each_commit(make_spanner_database: Any, dialect: str) -> None:
    database = make_spanner_database(SCHEMAS[dialect], dialect=dialect)
    steps = history(database)
    previous: dict[int, str] = {}
    for committed, state in steps:
        assert read_both_ways(database, dialect == POSTGRESQL, read_timestamp=committed) == (state, state)
        before = read_both_ways(database, dialect == POSTGRESQL, read_timestamp=committed - ONE_MICROSECOND)
        assert before == (previous, previous)
        previous = state
    assert read_both_ways(database, dialect == POSTGRESQL) == (previous, previous)  # strong: today's rows


def test_exact_staleness_and_multi_use_snapshots_read_at_the_timestamp_they_report(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMAS[GOOGLE_STANDARD_SQL])
    steps = history(database)
    time.sleep(2)  # the next commit well after the last of the history, whatever the load
    later = apply(database, {100: "later"}, [])
    # aimed at the history's last commit; the server asks its clock later than this, so it reads a little after it
    with database.snapshot(exact_staleness=datetime.now(UTC) - steps[-1][0], multi_use=True) as snapshot:
        rows = dict(snapshot.execute_sql("SELECT k, v FROM t"))
        again = dict(snapshot.read("t", ["k", "v"], spanner.KeySet(all_=True)))
        read_at = snapshot._transaction_read_timestamp
    assert steps[-1][0] <= read_at < later  # it read the past, not today
    assert rows == again == steps[-1][1]


def test_a_read_older_than_the_retention_is_failed_precondition(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMAS[GOOGLE_STANDARD_SQL])
    apply(database, {1: "x"}, [])
    too_old = datetime.now(UTC) - timedelta(hours=2)
    for read in (lambda s: list(s.execute_sql("SELECT k FROM t")), lambda s: list(s.read("t", ["k"], spanner.KeySet(all_=True)))):
        with pytest.raises(exceptions.FailedPrecondition, match="version_retention_period"), database.snapshot(read_timestamp=too_old) as snapshot:
            read(snapshot)


@pytest.fixture
def fast_durable_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSpanner]:
    # one real second is one server hour: the retention horizon passes while the test runs
    server = LocalSpanner(data_dir=tmp_path / "data", clock_start=datetime.now(UTC) - timedelta(days=1), clock_rate=3600.0,
                          log_path=tmp_path / "server.log")
    with server:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
        yield server


def wait_for_server_time(server: LocalSpanner, after: datetime) -> None:
    while parse_timestamp(server.control.status()["now"]) <= after:
        time.sleep(0.1)


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_version_retention_period_is_set_by_ddl_and_history_survives_a_restart(fast_durable_server: LocalSpanner, dialect: str) -> None:
    seven_days = ("ALTER DATABASE keep SET OPTIONS (version_retention_period = '7d')" if dialect == GOOGLE_STANDARD_SQL
                  else "ALTER DATABASE keep SET spanner.version_retention_period = '7d'")
    kept = create_database(fast_durable_server.host, "p", "i", "keep", [*SCHEMAS[dialect], seven_days], dialect)
    default = create_database(fast_durable_server.host, "p", "i", "default", SCHEMAS[dialect], dialect)
    kept_steps, default_steps = history(kept), history(default)
    wait_for_server_time(fast_durable_server, kept_steps[0][0] + timedelta(hours=3))
    with pytest.raises(exceptions.FailedPrecondition, match=r"version_retention_period \(1h\)"), default.snapshot(read_timestamp=default_steps[0][0]) as snapshot:
        list(snapshot.execute_sql("SELECT k, v FROM t"))

    fast_durable_server.restart()
    again = spanner.Client(project="p").instance("i").database("keep")
    again.reload()
    assert again.version_retention_period == "7d" and again.earliest_version_time <= kept_steps[0][0]
    default.reload()
    assert default.version_retention_period == "1h" and default.earliest_version_time > default_steps[0][0]
    for committed, state in kept_steps:
        assert read_both_ways(again, dialect == POSTGRESQL, read_timestamp=committed) == (state, state)
