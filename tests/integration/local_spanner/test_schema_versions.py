"""Reads at a timestamp use the schema in force then, with the Python client, both dialects: a stale read from before a
DROP COLUMN still reads the column, INFORMATION_SCHEMA at a timestamp lists the tables and columns of its time, a table
created later is not found, a dropped table's rows are still readable before the drop, and PartitionQuery at a
timestamp plans and runs with that schema (as Spanner does within the version retention period)."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, LocalSpanner

pytestmark = pytest.mark.integration


def schema(postgres: bool) -> list[str]:
    if postgres:
        return ["CREATE TABLE t (k bigint PRIMARY KEY, a text, b text)", "CREATE TABLE gone (k bigint PRIMARY KEY)"]
    return ["CREATE TABLE t (k INT64 NOT NULL, a STRING(MAX), b STRING(MAX)) PRIMARY KEY (k)", "CREATE TABLE gone (k INT64 NOT NULL) PRIMARY KEY (k)"]


def at(database: Any, timestamp: Any, sql: str) -> list[tuple[Any, ...]]:
    with database.snapshot(read_timestamp=timestamp) as snapshot:
        return sorted(tuple(row) for row in snapshot.execute_sql(sql))


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_reads_at_a_timestamp_use_the_schema_then(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    with database.batch() as batch:
        batch.insert("t", ["k", "a", "b"], [[1, "a1", "b1"], [2, "a2", "b2"]])
        batch.insert("gone", ["k"], [[7]])
    t0 = batch.committed
    later = "CREATE TABLE later (k bigint PRIMARY KEY)" if postgres else "CREATE TABLE later (k INT64 NOT NULL) PRIMARY KEY (k)"
    database.update_ddl(["ALTER TABLE t DROP COLUMN b", later, "DROP TABLE gone"]).result(60)

    with database.snapshot(read_timestamp=t0) as snapshot:
        assert sorted(tuple(r) for r in snapshot.read("t", ["k", "a", "b"], spanner.KeySet(all_=True))) == [(1, "a1", "b1"), (2, "a2", "b2")]
    assert at(database, t0, "SELECT k, b FROM t") == [(1, "b1"), (2, "b2")]
    assert at(database, t0, "SELECT k FROM gone") == [(7,)]
    with pytest.raises(exceptions.GoogleAPICallError, match="later"), database.snapshot(read_timestamp=t0) as snapshot:
        list(snapshot.execute_sql("SELECT k FROM later"))
    with pytest.raises(exceptions.GoogleAPICallError, match="b"), database.snapshot() as snapshot:
        list(snapshot.execute_sql("SELECT b FROM t"))  # today's schema has no b

    where = "table_schema = 'public'" if postgres else "table_schema = ''"
    tables = f"SELECT table_name FROM information_schema.tables WHERE {where}"
    columns = f"SELECT column_name FROM information_schema.columns WHERE table_name = 't' AND {where}"
    assert at(database, t0, tables) == [("gone",), ("t",)]
    assert at(database, t0, columns) == [("a",), ("b",), ("k",)]
    with database.snapshot(multi_use=True) as snapshot:
        assert sorted(tuple(r) for r in snapshot.execute_sql(tables)) == [("later",), ("t",)]
        assert sorted(tuple(r) for r in snapshot.execute_sql(columns)) == [("a",), ("k",)]

    batch_snapshot = database.batch_snapshot(read_timestamp=t0)
    try:
        rows = [tuple(r) for part in batch_snapshot.generate_query_batches("SELECT k, b FROM t") for r in batch_snapshot.process_query_batch(part)]
    finally:
        batch_snapshot.close()
    assert sorted(rows) == [(1, "b1"), (2, "b2")]
