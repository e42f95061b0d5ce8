"""The reader on a MUTABLE_KEY_RANGE stream (real client, local server, both dialects): same mods as an
IMMUTABLE_KEY_RANGE stream over the same writes, the new record kinds, and `spanner-cdc read` printing them."""

from __future__ import annotations

import base64
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.model.record_json import record_to_json
from spanner_cdc.model.records import (
    DataChangeRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
)
from spanner_cdc.source.all_partitions import AllPartitions
from spanner_cdc.source.reader import PartitionReader
from tests.integration.reader.lineage_checks import read_all

pytestmark = pytest.mark.integration

GOOGLESQL = [
    "CREATE TABLE items (id INT64, name STRING(MAX), price FLOAT64, ok BOOL, blob BYTES(MAX), at TIMESTAMP, doc JSON, "
    "tags ARRAY<STRING(MAX)>, amount NUMERIC, day DATE) PRIMARY KEY (id)",
    "CREATE CHANGE STREAM fixed FOR items",
    "CREATE CHANGE STREAM moving FOR items OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')",
]
POSTGRESQL = [
    "create table items (id bigint primary key, name text, price float8, ok bool, blob bytea, at timestamptz, doc jsonb, "
    "tags text[], amount numeric, day date)",
    "CREATE CHANGE STREAM fixed FOR items",
    "CREATE CHANGE STREAM moving FOR items WITH (partition_mode = 'MUTABLE_KEY_RANGE')",
]
COLUMNS = ["id", "name", "price", "ok", "blob", "at", "doc", "tags", "amount", "day"]


def write(database: Any, server: LocalSpanner, postgres: bool) -> None:
    from decimal import Decimal

    from google.cloud.spanner_v1.data_types import JsonObject

    def row(i: int) -> list[Any]:
        return [i, f"n{i}", i + 0.5, i % 2 == 0, base64.b64encode(bytes([i])), datetime(2024, 1, 1, tzinfo=UTC),
                JsonObject({"i": i}), [f"t{i}", None], Decimal(f"{i}.25"), datetime(2024, 1, i + 1).date()]  # fmt: skip

    actions = ("split", "move", "merge", None)
    for round_, action in enumerate(actions):
        with database.batch() as batch:
            batch.insert("items", COLUMNS, [row(i) for i in range(round_ * 6, round_ * 6 + 6)])
        with database.batch() as batch:
            batch.update("items", ["id", "name"], [[i, f"m{i}"] for i in range(round_ * 6, round_ * 6 + 3)])
        for stream in ("fixed", "moving"):
            if action is not None and (action != "move" or stream == "moving"):
                getattr(server.control, action)(database.name, stream)


def mods(records: list[tuple[str | None, Any]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for _, record in records:
        if isinstance(record, DataChangeRecord):
            types = {c.name: c.type for c in record.column_types}
            for mod in record.mods:
                out[json.dumps([record.commit_timestamp.isoformat(), record.server_transaction_id, record.table_name,
                                record.mod_type, mod.keys, mod.new_values, mod.old_values,
                                {n: types[n] for n in [*mod.keys, *mod.new_values, *mod.old_values]}], sort_keys=True)] += 1  # fmt: skip
    return out


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_mutable_stream_reads_the_same_mods_as_an_immutable_one(
    make_spanner_database: Any, local_spanner: LocalSpanner, postgres: bool
) -> None:
    database = make_spanner_database(POSTGRESQL if postgres else GOOGLESQL, "POSTGRESQL" if postgres else "GOOGLE_STANDARD_SQL")
    start = datetime.now(UTC)
    write(database, local_spanner, postgres)
    end = datetime.now(UTC) + timedelta(seconds=1)

    readers = {name: PartitionReader(database, name, dialect="auto", heartbeat_ms=1000) for name in ("fixed", "moving")}
    assert (readers["fixed"].partition_mode, readers["moving"].partition_mode) == ("IMMUTABLE_KEY_RANGE", "MUTABLE_KEY_RANGE")
    fixed = list(AllPartitions(readers["fixed"], start, end))
    moving = list(AllPartitions(readers["moving"], start, end))

    assert sum(mods(fixed).values()) == 4 * 9
    assert mods(moving) == mods(fixed)
    kinds = Counter(type(record).__name__ for _, record in moving)
    assert kinds["PartitionEndRecord"] == 1 and kinds["PartitionStartRecord"] >= 2 and kinds["PartitionEventRecord"] >= 6
    events = [(token, r) for token, r in moving if isinstance(r, PartitionEventRecord)]
    assert all(r.partition_token == token for token, r in events)
    outs = Counter((token, d, r.commit_timestamp) for token, r in events for d in r.move_out_to)
    ins = Counter((s, token, r.commit_timestamp) for token, r in events for s in r.move_in_from)
    assert outs == ins
    ended = [(token, r) for token, r in moving if isinstance(r, PartitionEndRecord)]
    assert [r.partition_token for _, r in ended] == [token for token, _ in ended]
    assert any(isinstance(r, PartitionStartRecord) and token is not None for token, r in moving)


def test_queries_keep_to_the_30_minutes_of_the_mode(make_spanner_database: Any) -> None:
    database = make_spanner_database(GOOGLESQL)
    start = datetime.now(UTC)
    with database.batch() as batch:
        batch.insert("items", ["id"], [[1]])
    reader = PartitionReader(database, "moving", dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=300_000)
    (root,) = list(reader.read(None, start, start + timedelta(hours=2)))
    assert isinstance(root, PartitionStartRecord)
    end = datetime.now(UTC) + timedelta(seconds=1)
    queries: list[tuple[datetime, datetime | None]] = []
    original = reader._query

    def spy(token: str | None, s: datetime, e: datetime | None) -> Any:
        queries.append((s, e))
        return original(token, s, e)

    reader._query = spy  # type: ignore[method-assign]
    records = [r for token in root.partition_tokens for r in reader.read(token, start, end)]
    assert sum(len(r.mods) for r in records if isinstance(r, DataChangeRecord)) == 1
    assert all(e is not None and e - s <= timedelta(minutes=30) for s, e in queries)
    assert len(queries) == len(root.partition_tokens)  # a short range: one query per partition


def test_read_cli_prints_the_new_record_kinds(make_spanner_database: Any, local_spanner: LocalSpanner, spanner_env: str) -> None:
    database = make_spanner_database(GOOGLESQL)
    start = datetime.now(UTC)
    with database.batch() as batch:
        batch.insert("items", ["id"], [[i] for i in range(5)])
    local_spanner.control.split(database.name, "moving")
    local_spanner.control.merge(database.name, "moving")
    end = datetime.now(UTC) + timedelta(seconds=1)
    database_id = database.name.rsplit("/", 1)[1]
    lines, _ = read_all(spanner_env, database_id, "moving", start.isoformat(), end.isoformat())
    kinds = Counter(line["kind"] for line in lines)
    assert kinds["data_change"] >= 1 and kinds["partition_start"] >= 2 and kinds["partition_event"] >= 2 and kinds["partition_end"] == 1
    end_line = next(line for line in lines if line["kind"] == "partition_end")
    assert end_line["partition_token"] and end_line["end_timestamp"].endswith("Z")


def test_interrupted_reads_resume_without_loss_or_repeats(make_spanner_database: Any, local_spanner: LocalSpanner) -> None:
    database = make_spanner_database(GOOGLESQL)
    start = datetime.now(UTC)
    for round_ in range(3):
        with database.batch() as batch:
            batch.insert("items", ["id"], [[i] for i in range(round_ * 5, round_ * 5 + 5)])
        local_spanner.control.move(database.name, "moving") if round_ else local_spanner.control.split(database.name, "moving")
    end = datetime.now(UTC) + timedelta(seconds=1)
    clean = list(AllPartitions(PartitionReader(database, "moving", dialect="auto", heartbeat_ms=1000), start, end, concurrency=1))

    injected = local_spanner.control.status()["failures_injected"]
    local_spanner.control.fail_next_reads(reads=3, after_rows=2)
    # the client resumes UNAVAILABLE itself, with the last resume token: the server restarts the read there
    reader = PartitionReader(database, "moving", dialect="auto", heartbeat_ms=1000)
    interrupted = list(AllPartitions(reader, start, end, concurrency=1))
    assert local_spanner.control.status()["failures_injected"] >= injected + 1
    kinds = [type(r).__name__ for _, r in clean]
    assert sum(len(r.mods) for _, r in clean if isinstance(r, DataChangeRecord)) == 15 and kinds.count("PartitionEventRecord") >= 4

    def without_heartbeats(records: list[tuple[str | None, Any]]) -> Counter[str]:
        return Counter(json.dumps(record_to_json(r, t), sort_keys=True) for t, r in records if not isinstance(r, HeartbeatRecord))

    assert without_heartbeats(interrupted) == without_heartbeats(clean)
