"""Partitioned stale reads as the snapshot uses them: one BatchSnapshot at a past timestamp, its partitions run elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import spanner
from google.cloud.spanner_v1.database import BatchSnapshot

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL
from tests.integration.local_spanner.test_versions import SCHEMAS, history

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_partitions_of_a_stale_batch_read_run_by_another_client_add_up_to_the_past(make_spanner_database: Any, dialect: str) -> None:
    database = make_spanner_database(SCHEMAS[dialect], dialect=dialect)
    steps = history(database)
    at, expected = steps[1]  # later commits changed and deleted some of these rows
    batch = database.batch_snapshot(read_timestamp=at)
    parts = list(batch.generate_query_batches("SELECT k, v FROM t", max_partitions=3))
    shared = batch.to_dict()
    assert shared["read_timestamp"] == at
    # what an executor does: a client of its own, the driver's session and transaction, one partition each
    other = spanner.Client(project=database._instance._client.project).instance(database._instance.instance_id).database(database.database_id)
    rows: list[list[Any]] = []
    for part in parts:
        rows += [list(r) for r in BatchSnapshot.from_dict(other, shared).process_query_batch(part)]
    read_parts = list(batch.generate_read_batches("t", ["k", "v"], spanner.KeySet(all_=True), max_partitions=2))
    by_read = [list(r) for part in read_parts for r in BatchSnapshot.from_dict(other, shared).process_read_batch(part)]
    batch.close()
    assert len(parts) == 3 and len(rows) == len(expected)
    assert dict(map(tuple, rows)) == dict(map(tuple, by_read)) == expected


def test_index_columns_name_each_tables_primary_key_in_order(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE two (b STRING(MAX) NOT NULL, a INT64 NOT NULL, v BOOL) PRIMARY KEY (a, b DESC)"])
    with database.snapshot() as snap:
        rows = [list(r) for r in snap.execute_sql(
            "SELECT COLUMN_NAME, ORDINAL_POSITION, COLUMN_ORDERING FROM INFORMATION_SCHEMA.INDEX_COLUMNS "
            "WHERE TABLE_NAME = 'two' AND INDEX_TYPE = 'PRIMARY_KEY' ORDER BY ORDINAL_POSITION"
        )]
    assert rows == [["a", 1, "ASC"], ["b", 2, "DESC"]]
