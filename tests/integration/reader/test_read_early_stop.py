"""The reader through the client's public `snapshot.execute_sql`: an early stop ends the server's read, an error is the reader's."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.errors import SourceError
from spanner_cdc.settings import Settings
from spanner_cdc.source.client import open_database, stream_metadata
from spanner_cdc.source.reader import PartitionReader
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

DDL = ["CREATE TABLE T (A INT64 NOT NULL, B STRING(MAX)) PRIMARY KEY (A)", "CREATE CHANGE STREAM S FOR ALL"]


def _written(local_spanner: LocalSpanner, rows: int) -> tuple[Any, datetime, datetime]:
    """A database with `rows` single-row transactions: (database, start, end)."""
    database_id = unique_database_id("es")
    direct = create_database(local_spanner.host, PROJECT, INSTANCE, database_id, DDL, "GOOGLE_STANDARD_SQL")
    created = stream_metadata(direct, "S", "GOOGLE_STANDARD_SQL").created_at
    assert created is not None
    for a in range(rows):
        direct.run_in_transaction(lambda tx, a=a: tx.execute_update(f"INSERT INTO T (A, B) VALUES ({a}, 'b{a}')"))
    end = datetime.now(created.tzinfo)
    database = open_database(Settings(project=PROJECT, instance=INSTANCE, database=database_id, emulator_host=local_spanner.host))
    return database, created, end


def _roots(reader: PartitionReader, start: datetime, end: datetime) -> list[str]:
    return [child.token for record in reader.read(None, start, end) for child in record.child_partitions]  # type: ignore[union-attr]


def test_an_error_is_the_readers_and_an_early_stop_ends_the_servers_read(local_spanner: LocalSpanner) -> None:
    database, start, end = _written(local_spanner, rows=3)
    with pytest.raises(SourceError, match="READ_Nope") as raised:  # the server's INVALID_ARGUMENT, as the reader says it
        list(PartitionReader(database, "Nope", dialect="GOOGLE_STANDARD_SQL").read(None, start, end))
    assert "(INVALID_ARGUMENT)" in str(raised.value)

    reader = PartitionReader(database, "S", dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000)
    (token, *_) = _roots(reader, start, end)
    unbounded = reader.read(token, start, None)  # runs until the partition ends: never, here
    assert next(unbounded).timestamp >= start
    control = local_spanner.control
    assert control.status()["active_reads"] == 1
    unbounded.close()  # the reader stops early: the call is cancelled, the server's read ends
    for _ in range(200):
        if control.status()["active_reads"] == 0:
            break
        time.sleep(0.05)
    assert control.status()["active_reads"] == 0
