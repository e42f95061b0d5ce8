"""The reader's own decoding (rows left undecoded by the client) gives the same records as the client's decoding, over
the workload's column types, NULLs, updates and deletes, and a value large enough that the server chunks it."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.devstack.workload import run_workload
from spanner_cdc.devstack.workload_schema import ddl_statements
from spanner_cdc.local_spanner.streaming import MESSAGE_BYTES
from spanner_cdc.model.records import ChildPartitionsRecord, DataChangeRecord
from spanner_cdc.source.client import stream_metadata
from spanner_cdc.source.decode.mapper import row_mapper
from spanner_cdc.source.queries import build_query
from spanner_cdc.source.reader import PartitionReader
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

STREAM = "decoding_stream"
BIG = "é" * (MESSAGE_BYTES // 2 + 1000)  # over the server's message size in UTF-8: sent in chunks


def _client_decoded(database: Any, dialect: str, token: str, start: datetime, end: datetime) -> list[Any]:
    """The partition's records from rows the client decoded itself (lazy_decode off)."""
    query = build_query(STREAM, dialect, token, start, end, 1000)
    records: list[Any] = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(query.sql, params=query.params, param_types=query.param_types, timeout=None)
        mapper = None
        for row in results:
            mapper = mapper or row_mapper(dialect, results.fields)
            records.extend(mapper(row))
    return records


def _write(database: Any, tmp_path: Path) -> datetime:
    """The seeded workload (every column type, NULLs, updates, deletes), then a large value inserted, updated
    (old and new values both large) and deleted, and a row of NULLs. Returns the last commit time."""
    run_workload(database, transactions=30, seed=3, ground_truth=tmp_path / "truth.jsonl", batch=5)
    singers = ("singer_id", "first_name", "last_name", "rating", "active", "info", "updated_at")
    with database.batch() as batch:
        batch.insert("singers", singers, [(900_001, BIG, "x", 1.5, True, None, None), (900_002, *([None] * 6))])
    with database.batch() as batch:
        batch.update("singers", ("singer_id", "first_name"), [(900_001, BIG[:-1] + "z")])
    with database.batch() as batch:
        batch.delete("singers", _keyset([(900_001,)]))
    committed: datetime = batch.committed
    return committed


def _keyset(keys: list[tuple[Any, ...]]) -> Any:
    from google.cloud.spanner_v1 import KeySet

    return KeySet(keys=keys)


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
def test_reader_records_equal_the_client_decoded_ones(local_spanner: LocalSpanner, tmp_path: Path, dialect: str) -> None:
    database = create_database(
        local_spanner.host, PROJECT, INSTANCE, unique_database_id("dec"), ddl_statements(dialect, STREAM), dialect
    )
    start = stream_metadata(database, STREAM, dialect).created_at
    assert start is not None
    end = _write(database, tmp_path) + timedelta(microseconds=1)
    reader = PartitionReader(database, STREAM, dialect=dialect, heartbeat_ms=1000)
    pending = [c.token for r in reader.read(None, start, end) for c in r.child_partitions]  # type: ignore[union-attr]
    seen: set[str] = set()
    data: list[DataChangeRecord] = []
    while pending:  # every partition of the window, through whatever splits the server made meanwhile
        token = pending.pop()
        if token in seen:
            continue
        seen.add(token)
        records = list(reader.read(token, start, end))
        assert records == _client_decoded(database, dialect, token, start, end), token
        data += [r for r in records if type(r) is DataChangeRecord]
        pending += [c.token for r in records if type(r) is ChildPartitionsRecord for c in r.child_partitions]
    assert {r.mod_type for r in data} == {"INSERT", "UPDATE", "DELETE"}
    values = [v for r in data for m in r.mods for part in (m.new_values, m.old_values) for v in part.values()]
    assert None in values  # NULLs
    big = [v for v in values if type(v) is str and len(v) == len(BIG)]
    assert len(big) == 4  # insert (new), update (new and old), delete (old)
    assert {type(v) for v in values} >= {str, float, bool, list}  # JSON columns travel as JSON text
