"""What Google's emulator does with the read options a stream may set: Data Boost on a partitioned query, a request
priority and directed reads on a query and a change stream query (docs/governance.md says what it answers)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.read_options import ReadOptions, parse_directed_read
from spanner_cdc.source.reader import PartitionReader

pytestmark = [pytest.mark.integration]
OPTIONS = ReadOptions(True, "low", parse_directed_read("directed_read", {"include": ["us-east1:READ_ONLY"]}))


def test_the_emulator_accepts_data_boost_priority_and_directed_reads(make_emulator_database: Any) -> None:
    database = make_emulator_database([
        "CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE CHANGE STREAM s FOR ALL",
    ])
    with database.batch() as batch:
        batch.insert("T", ["Id", "V"], [[i, f"v{i}"] for i in range(20)])
    snapshot = database.batch_snapshot()
    try:
        parts = list(snapshot.generate_query_batches("SELECT Id, V FROM T", max_partitions=3, **OPTIONS.partition_kwargs()))
        rows = [r for p in parts for r in snapshot.process_query_batch(OPTIONS.batch_query(p["query"]["sql"], p["partition"]))]
    finally:
        snapshot.close()
    assert sorted(rows) == [[i, f"v{i}"] for i in range(20)]
    with database.snapshot() as single:
        assert list(single.execute_sql("SELECT COUNT(*) FROM T", **OPTIONS.query_kwargs())) == [[20]]
    now = datetime.now(UTC)
    reader = PartitionReader(database, "s", dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000, read_options=OPTIONS)
    assert list(reader.read(None, now, now))  # the root partitions
