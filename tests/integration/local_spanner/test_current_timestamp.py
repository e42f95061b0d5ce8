"""CURRENT_TIMESTAMP (GoogleSQL) and now() (PostgreSQL) on the local server: the read's timestamp, Spanner's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud.spanner_v1 import TypeCode

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("dialect", "sql"), [
    ("GOOGLE_STANDARD_SQL", "SELECT CURRENT_TIMESTAMP()"),
    ("GOOGLE_STANDARD_SQL", "SELECT CURRENT_TIMESTAMP() AS now, 1 AS one"),
    ("POSTGRESQL", "SELECT now()"),
    ("POSTGRESQL", "SELECT CURRENT_TIMESTAMP"),
])  # fmt: skip
def test_current_timestamp_is_the_strong_reads_timestamp(make_spanner_database: Any, dialect: str, sql: str) -> None:
    database = make_spanner_database([], dialect=dialect)
    before = datetime.now(UTC) - timedelta(seconds=5)  # the server's clock runs at real time in these tests
    with database.snapshot(multi_use=True) as snapshot:
        results = snapshot.execute_sql(sql)
        ((now, *_),) = list(results)
        ((again, *_),) = list(snapshot.execute_sql(sql))  # the same read timestamp: the same value
    assert TypeCode(results.fields[0].type_.code) == TypeCode.TIMESTAMP
    assert now == again and before < now < datetime.now(UTC) + timedelta(seconds=5)


def test_current_timestamp_of_a_stale_read_is_its_read_timestamp(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"])
    with database.batch() as batch:
        batch.insert("T", ["K"], [[1]])
    at = batch.committed
    with database.snapshot(read_timestamp=at) as snapshot:
        ((now,),) = list(snapshot.execute_sql("SELECT CURRENT_TIMESTAMP() FROM T"))
    assert now == at
