"""MUTABLE_KEY_RANGE change streams read with the bare client in both dialects: PROTO / BYTES columns, moves, rules."""

from __future__ import annotations

import base64
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.types import ChangeStreamRecord, TypeCode

from spanner_cdc.devstack.spanner_server import LocalSpanner

pytestmark = pytest.mark.integration

GOOGLESQL_QUERY = ("SELECT ChangeRecord FROM READ_{stream}(start_timestamp => @start, end_timestamp => @end, "
                   "partition_token => @token, heartbeat_milliseconds => @heartbeat)")
POSTGRESQL_QUERY = "SELECT * FROM spanner.read_proto_bytes_{stream}($1, $2, $3, $4, null)"
_Record = ChangeStreamRecord.pb()


def query(database: Any, stream: str, start: datetime, end: datetime | None, token: str | None, postgres: bool) -> tuple[list[Any], Any]:
    """One query: the decoded ChangeStreamRecord messages and the result's column metadata."""
    if postgres:
        sql, names = POSTGRESQL_QUERY.format(stream=stream), ("p1", "p2", "p3", "p4")
    else:
        sql, names = GOOGLESQL_QUERY.format(stream=stream), ("start", "end", "token", "heartbeat")
    types = (param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64)
    params = dict(zip(names, (start, end, token, 1000), strict=True))
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(sql, params=params, param_types=dict(zip(names, types, strict=True)), timeout=None)
        rows = [row[0] for row in results]
        field = results.fields[0]
    assert all(isinstance(raw, bytes) for raw in rows)
    if postgres:  # the client hands BYTES over as their base64 text, PROTO decoded
        rows = [base64.b64decode(raw) for raw in rows]
    return [_Record.FromString(raw) for raw in rows], field


def read_all(database: Any, stream: str, start: datetime, end: datetime, postgres: bool) -> dict[str, list[Any]]:
    (root,), _ = query(database, stream, start, end, None, postgres)
    queue = [(t, start) for t in root.partition_start_record.partition_tokens]
    out: dict[str, list[Any]] = {}
    while queue:
        token, begin = queue.pop(0)
        if token in out:
            continue
        out[token], _ = query(database, stream, begin, end, token, postgres)
        for record in out[token]:
            if record.WhichOneof("record") == "partition_start_record":
                at = record.partition_start_record.start_timestamp.ToDatetime(tzinfo=UTC)
                queue += [(t, at) for t in record.partition_start_record.partition_tokens]
    return out


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_moves_between_long_lived_partitions_lose_nothing(make_spanner_database: Any, local_spanner: LocalSpanner, postgres: bool) -> None:
    if postgres:
        ddl = ["create table accounts (id bigint primary key, owner text)",
               "CREATE CHANGE STREAM moving FOR ALL WITH (partition_mode = 'MUTABLE_KEY_RANGE')"]
    else:
        ddl = ["CREATE TABLE accounts (id INT64, owner STRING(MAX)) PRIMARY KEY (id)",
               "CREATE CHANGE STREAM moving FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')"]
    database = make_spanner_database(ddl, "POSTGRESQL" if postgres else "GOOGLE_STANDARD_SQL")
    start = datetime.now(UTC)
    committed = []
    for round_ in range(4):
        with database.batch() as batch:
            batch.insert("accounts", ["id", "owner"], [[i, f"o{i}"] for i in range(round_ * 10, round_ * 10 + 10)])
        committed.append(batch.committed)
        action = ("split", "move", "merge", None)[round_]
        if action == "split":
            local_spanner.control.split(database.name, "moving")
        elif action == "move":
            local_spanner.control.move(database.name, "moving")
        elif action == "merge":
            local_spanner.control.merge(database.name, "moving")
    end = datetime.now(UTC) + timedelta(seconds=1)

    (root,), field = query(database, "moving", start, end, None, postgres)
    if postgres:
        assert (field.name, field.type_.code) == ("read_proto_bytes_moving", TypeCode.BYTES)
    else:
        assert (field.name, field.type_.code, field.type_.proto_type_fqn) == ("ChangeRecord", TypeCode.PROTO, "google.spanner.v1.ChangeStreamRecord")
    assert root.WhichOneof("record") == "partition_start_record"

    by_token = read_all(database, "moving", start, end, postgres)
    data = [r.data_change_record for records in by_token.values() for r in records if r.WhichOneof("record") == "data_change_record"]
    keys = sorted(int(m.keys[0].value.string_value) for r in data for m in r.mods)
    assert keys == list(range(40))
    assert sorted({r.commit_timestamp.ToDatetime(tzinfo=UTC) for r in data}) == committed
    first = data[0]
    assert [c.name for c in first.column_metadata] == ["id", "owner"] and first.column_metadata[0].is_primary_key
    assert first.column_metadata[0].type_.code == TypeCode.INT64
    assert first.mod_type == _Record.DataChangeRecord.ModType.INSERT
    outs, ins = Counter(), Counter()
    for token, records in by_token.items():
        for record in records:
            if record.WhichOneof("record") == "partition_event_record":
                event = record.partition_event_record
                at = event.commit_timestamp.ToDatetime(tzinfo=UTC)
                outs.update((token, m.destination_partition_token, at) for m in event.move_out_events)
                ins.update((m.source_partition_token, token, at) for m in event.move_in_events)
    assert outs == ins and len(outs) >= 3
    ends = [r for records in by_token.values() for r in records if r.WhichOneof("record") == "partition_end_record"]
    assert len(ends) == 1


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_rules_of_the_mode(make_spanner_database: Any, postgres: bool) -> None:
    if postgres:
        ddl = ["create table t (id bigint primary key)", "CREATE CHANGE STREAM s FOR ALL WITH (partition_mode = 'MUTABLE_KEY_RANGE')"]
        alter = "ALTER CHANGE STREAM s SET (partition_mode = 'IMMUTABLE_KEY_RANGE')"
    else:
        ddl = ["CREATE TABLE t (id INT64) PRIMARY KEY (id)", "CREATE CHANGE STREAM s FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')"]
        alter = "ALTER CHANGE STREAM s SET OPTIONS (partition_mode = 'IMMUTABLE_KEY_RANGE')"
    database = make_spanner_database(ddl, "POSTGRESQL" if postgres else "GOOGLE_STANDARD_SQL")
    now = datetime.now(UTC)
    with pytest.raises(exceptions.InvalidArgument, match="end_timestamp is required"):
        query(database, "s", now, None, None, postgres)
    with pytest.raises(exceptions.InvalidArgument, match="more than 30 minutes"):
        query(database, "s", now, now + timedelta(minutes=31), None, postgres)
    with pytest.raises(exceptions.FailedPrecondition, match="partition_mode cannot be altered"):
        database.update_ddl([alter]).result(60)
    if postgres:
        with database.snapshot() as snapshot, pytest.raises(exceptions.InvalidArgument, match="read_proto_bytes_s"):
            list(snapshot.execute_sql("SELECT * FROM spanner.read_json_s($1, $2, null, 1000, null)",
                                      params={"p1": now, "p2": now}, param_types={"p1": param_types.TIMESTAMP, "p2": param_types.TIMESTAMP}))
    with database.snapshot() as snapshot:
        options = list(snapshot.execute_sql(
            "SELECT option_value FROM information_schema.change_stream_options WHERE change_stream_name = 's' AND option_name = 'partition_mode'"
        ))
    assert options == [["MUTABLE_KEY_RANGE"]]
