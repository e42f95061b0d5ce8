"""The reader's change stream queries through the client's generated API (source/streaming_sql.py): what reaches the server,
through a recording proxy in front of the local server, is the request the client's `snapshot.execute_sql` sends, and
the records, errors and early stops are the same."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from google.cloud.spanner_v1 import ExecuteSqlRequest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.errors import SourceError
from spanner_cdc.settings import Settings
from spanner_cdc.source import reader as reader_module
from spanner_cdc.source.client import open_database, stream_metadata
from spanner_cdc.source.reader import PartitionReader
from spanner_cdc.source.streaming_sql import StreamingSql, streaming_sql
from tests.fixtures.grpc_proxy import RecordingProxy
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

EXECUTE = "/google.spanner.v1.Spanner/ExecuteStreamingSql"
SCHEMAS = {
    "GOOGLE_STANDARD_SQL": (["CREATE TABLE T (A INT64 NOT NULL, B STRING(MAX)) PRIMARY KEY (A)", "CREATE CHANGE STREAM S FOR ALL"],
                            "S", "INSERT INTO T (A, B) VALUES ({a}, 'b{a}')"),
    "POSTGRESQL": (["create table t (a bigint primary key, b varchar)", "CREATE CHANGE STREAM s FOR ALL"],
                   "s", "insert into t (a, b) values ({a}, 'b{a}')"),
}  # fmt: skip
# sent by the client's snapshot alone: its request id and the server-timing header of its built-in metrics
CLIENT_ONLY = {"x-goog-spanner-request-id", "x-goog-spanner-enable-afe-server-timing"}


@pytest.fixture
def proxy(local_spanner: LocalSpanner, monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingProxy]:
    with RecordingProxy(local_spanner.host) as recording:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", recording.host)  # open_database sets it; undone after the test
        yield recording


def _written(local_spanner: LocalSpanner, proxy: RecordingProxy, dialect: str, rows: int) -> tuple[Any, str, datetime, datetime]:
    """A database with `rows` single-row transactions, opened through the proxy: (database, stream, start, end)."""
    ddl, stream, insert = SCHEMAS[dialect]
    database_id = unique_database_id("ss")
    direct = create_database(proxy.host, PROJECT, INSTANCE, database_id, ddl, dialect)
    created = stream_metadata(direct, stream, dialect).created_at
    assert created is not None
    for a in range(rows):
        direct.run_in_transaction(lambda tx, a=a: tx.execute_update(insert.format(a=a)))
    end = datetime.now(created.tzinfo)  # a window wholly past: both reads see the same heartbeats
    database = open_database(Settings(project=PROJECT, instance=INSTANCE, database=database_id, emulator_host=proxy.host))
    return database, stream, created, end


def _roots(reader: PartitionReader, start: datetime, end: datetime) -> list[str]:
    return [child.token for record in reader.read(None, start, end) for child in record.child_partitions]  # type: ignore[union-attr]


def _sent(proxy: RecordingProxy) -> list[tuple[Any, dict[str, str]]]:
    """The change stream queries the proxy saw (request, metadata), taken off its record."""
    sent = [(ExecuteSqlRequest.pb().FromString(c.request), c.metadata) for c in proxy.calls if c.method == EXECUTE]
    proxy.calls.clear()
    return sent


@pytest.mark.parametrize("dialect", list(SCHEMAS))
def test_the_reader_sends_the_clients_own_request_and_reads_the_same_records(
    local_spanner: LocalSpanner, proxy: RecordingProxy, dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    database, stream, start, end = _written(local_spanner, proxy, dialect, rows=6)
    assert isinstance(streaming_sql(database), StreamingSql) and streaming_sql(database) is streaming_sql(database)  # made once
    options = {"dialect": dialect, "heartbeat_ms": 1000, "request_tag": "cdc-orders", "priority": "low"}
    direct = PartitionReader(database, stream, **options)  # type: ignore[arg-type]
    assert direct._streaming_sql is not None
    tokens = _roots(direct, start, end)
    proxy.calls.clear()
    direct_records = [r for token in tokens for r in direct.read(token, start, end)]
    direct_sent = _sent(proxy)

    monkeypatch.setattr(reader_module, "streaming_sql", lambda database: None)  # the client's snapshot.execute_sql
    client = PartitionReader(database, stream, **options)  # type: ignore[arg-type]
    assert client._streaming_sql is None
    client_records = [r for token in tokens for r in client.read(token, start, end)]
    client_sent = _sent(proxy)

    assert sum(len(r.mods) for r in direct_records if r.kind == "data_change") == 6  # type: ignore[attr-defined]
    assert direct_records == client_records
    assert len(direct_sent) == len(client_sent) == len(tokens)
    for (ours, our_headers), (theirs, their_headers) in zip(direct_sent, client_sent, strict=True):
        assert ours == theirs  # field for field: session, SQL, params and types, single-use strong, request options
        assert ours.request_options.request_tag == "cdc-orders" and ours.request_options.priority == 1  # PRIORITY_LOW
        assert ours.transaction.single_use.read_only.strong
        assert our_headers == {k: v for k, v in their_headers.items() if k not in CLIENT_ONLY}
        assert {"google-cloud-resource-prefix", "x-goog-request-params", "x-goog-api-client"} <= set(our_headers)


def test_an_error_is_the_clients_and_an_early_stop_ends_the_servers_read(
    local_spanner: LocalSpanner, proxy: RecordingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    database, stream, start, end = _written(local_spanner, proxy, "GOOGLE_STANDARD_SQL", rows=3)
    errors = []
    for found in (streaming_sql, lambda database: None):  # ours, then the client's snapshot.execute_sql
        monkeypatch.setattr(reader_module, "streaming_sql", found)
        with pytest.raises(SourceError, match="READ_Nope") as raised:  # the server's INVALID_ARGUMENT, as the reader says it
            list(PartitionReader(database, "Nope", dialect="GOOGLE_STANDARD_SQL").read(None, start, end))
        errors.append((type(raised.value), str(raised.value)))
    (ours, our_text), (theirs, their_text) = errors
    assert ours is theirs and "(INVALID_ARGUMENT)" in our_text
    assert re.fullmatch(re.escape(our_text) + r", request_id = [\d.]+", their_text)  # the client adds its request id
    monkeypatch.setattr(reader_module, "streaming_sql", streaming_sql)

    reader = PartitionReader(database, stream, dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000)
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
