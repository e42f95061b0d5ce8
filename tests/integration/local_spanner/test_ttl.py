"""Row deletion policies (TTL) with the Python client, both dialects: expired rows deleted by the server's sweeper in
system transactions (is_system_transaction = true in change records), cascading to interleaved tables, left out of
streams with exclude_ttl_deletes (Spanner's "About time to live (TTL)" and change stream options)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, LocalSpanner
from tests.integration.local_spanner.reading import data_records, read_stream

pytestmark = pytest.mark.integration


def schema(postgres: bool) -> list[str]:
    if postgres:
        return [
            "CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz, note text) TTL INTERVAL '1 days' ON at",
            "CREATE TABLE details (id bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (id, n)) INTERLEAVE IN PARENT events ON DELETE CASCADE",
            "CREATE CHANGE STREAM all_changes FOR ALL",
            "CREATE CHANGE STREAM no_ttl FOR ALL WITH (exclude_ttl_deletes = true)",
        ]
    return [
        "CREATE TABLE events (id INT64 NOT NULL, at TIMESTAMP, note STRING(MAX)) PRIMARY KEY (id), "
        "ROW DELETION POLICY (OLDER_THAN(at, INTERVAL 1 DAY))",
        "CREATE TABLE details (id INT64 NOT NULL, n INT64 NOT NULL) PRIMARY KEY (id, n), INTERLEAVE IN PARENT events ON DELETE CASCADE",
        "CREATE CHANGE STREAM all_changes FOR ALL",
        "CREATE CHANGE STREAM no_ttl FOR ALL OPTIONS (exclude_ttl_deletes = true)",
    ]


def ids(database: Any, table: str = "events") -> list[int]:
    with database.snapshot() as snapshot:
        return sorted(row[0] for row in snapshot.read(table, ["id"], spanner.KeySet(all_=True)))


def deletes(database: Any, stream: str, start: datetime, end: datetime, postgres: bool) -> list[tuple[str, str, bool]]:
    return sorted((r["table_name"], str(m["keys"]["id"]), r["is_system_transaction"])
                  for r in data_records(read_stream(database, stream, start, end, postgres)) if r["mod_type"] == "DELETE" for m in r["mods"])


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_expired_rows_are_deleted_by_system_transactions(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    now = datetime.now(UTC)
    start = now
    with database.batch() as batch:
        batch.insert("events", ["id", "at", "note"], [[1, now - timedelta(days=3), "old"], [2, now, "new"], [3, None, "no time"],
                                                      [4, now - timedelta(days=2), "old, deleted by hand"]])
        batch.insert("details", ["id", "n"], [[1, 1], [1, 2], [2, 1]])
    database.run_in_transaction(lambda t: t.delete("events", spanner.KeySet(keys=[[4]])))
    local_spanner.control.sweep_ttl()  # the server's sweeper may have run first: the outcome is the same
    end = datetime.now(UTC)
    assert ids(database) == [2, 3]
    assert ids(database, "details") == [2]
    assert deletes(database, "all_changes", start, end, postgres) == [
        ("details", "1", True), ("details", "1", True), ("events", "1", True), ("events", "4", False),
    ]
    assert deletes(database, "no_ttl", start, end, postgres) == [("events", "4", False)]
    system = {r["server_transaction_id"] for r in data_records(read_stream(database, "all_changes", start, end, postgres))
              if r["is_system_transaction"]}
    assert len(system) == 1  # the table's expired rows and their cascades: one system transaction


def test_the_servers_sweeper_runs_on_its_own(make_spanner_database: Any, local_spanner: LocalSpanner) -> None:
    database = make_spanner_database(schema(False))
    with database.batch() as batch:
        batch.insert("events", ["id", "at"], [[1, datetime.now(UTC) - timedelta(days=2)]])
    deadline = time.monotonic() + 60  # the sweeper runs every 5 s by default
    while ids(database) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ids(database) == []


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_policies_in_the_schema_and_their_ddl(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres)[:1], dialect=dialect)
    sql = "SELECT row_deletion_policy_expression FROM information_schema.tables WHERE table_name = 'events'"
    with database.snapshot() as snapshot:
        assert [tuple(r) for r in snapshot.execute_sql(sql)] == [("OLDER_THAN(at, INTERVAL 1 DAY)",)]
    if postgres:
        drop, add, bad = ("ALTER TABLE events DROP TTL", "ALTER TABLE events ADD TTL INTERVAL '7 days' ON at",
                          "ALTER TABLE events ALTER TTL INTERVAL '7 days' ON note")
    else:
        drop, add, bad = ("ALTER TABLE events DROP ROW DELETION POLICY", "ALTER TABLE events ADD ROW DELETION POLICY (OLDER_THAN(at, INTERVAL 7 DAY))",
                          "ALTER TABLE events REPLACE ROW DELETION POLICY (OLDER_THAN(note, INTERVAL 7 DAY))")
    database.update_ddl([drop, add]).result(30)
    database.reload()
    assert any(("TTL INTERVAL '7 days' ON at" if postgres else "ROW DELETION POLICY (OLDER_THAN(at, INTERVAL 7 DAY))") in s
               for s in database.ddl_statements)
    with pytest.raises(exceptions.FailedPrecondition, match="must be a TIMESTAMP"):
        database.update_ddl([bad]).result(30)
    with pytest.raises(exceptions.FailedPrecondition, match="row deletion policy uses it"):
        database.update_ddl(["ALTER TABLE events DROP COLUMN at"]).result(30)
