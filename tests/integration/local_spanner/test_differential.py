"""The local server held to Google's emulator: the same DDL and workload on both, read back with the official client.

Every difference found is either fixed in the local server or listed in ACCEPTED below with what the documentation
says, and the test asserts the listed behaviour (so a change on either side shows up here).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import spanner
from google.cloud.spanner_v1.data_types import JsonObject

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.errors import RetentionError
from spanner_cdc.extract.planning import root_partitions
from spanner_cdc.source.client import detect_dialect, stream_metadata
from spanner_cdc.source.snapshot_tables import watched_tables
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.local_spanner.reading import GOOGLESQL_QUERY, POSTGRESQL_QUERY, query_partition, read_stream

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GSQL, PG = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
STREAMS = ("SAll", "STab", "SCol", "SEvents")

# Differences between the local server and Google's emulator 1.5.28 that stay, each with the documentation's word
# on it. The tests below assert each one as listed.
ACCEPTED = {
    "error messages": "Status codes agree; the words differ where the local server names more (the stream, the token, "
    "its creation time). The documentation specifies the codes (OUT_OF_RANGE for a start outside the retention or before "
    "the stream's creation), not the text.",
    "partitions": "Tokens, the number of root partitions and when partitions split or merge are the server's own: the "
    "documentation leaves them to Spanner ('the number of partitions ... may change'). Records are compared per "
    "transaction and mod, not per partition; number_of_records_in_transaction, number_of_partitions_in_transaction, "
    "record_sequence and is_last_record_in_transaction_in_partition depend on the partitioning and are checked for "
    "consistency within each server instead.",
    "timestamps and ids": "commit_timestamp, server_transaction_id and read timestamps are each server's clock and ids: "
    "compared by the order of the workload's transactions.",
    "transaction tags": "The emulator writes transaction_tag '' in every data change record; the documentation: 'the "
    "transaction tag associated with this transaction', which the local server writes (as Spanner does). Compared with "
    "the tag taken out, and asserted as listed.",
    "heartbeat minimum": "The emulator accepts heartbeat_milliseconds from 100; the documentation says 'between 1,000 (one "
    "second) and 300,000 (five minutes)', which the local server holds to. Both answer OUT_OF_RANGE outside their range.",
    "change streams per column": "The emulator refuses a fourth change stream watching the same column (Spanner's "
    "documented quota: 3 change streams per column); the local server does not count them. The DDL here keeps to 3.",
    "replace of an existing row": "The emulator writes a Replace mutation of an existing row as an INSERT mod without "
    "old values; the local server as an UPDATE of every column, with the old values where the value capture type "
    "keeps them. The documentation (DataChangeRecord.ModType): 'Mod type describes the type of change Spanner applied "
    "to the data ... if there is an existing row, Spanner will perform an update and return ModType UPDATE' (said of "
    "INSERT_OR_UPDATE; Replace of an existing row changes that row the same way).",
    "column types of a delete without old values": "Under NEW_VALUES and NEW_ROW a DELETE mod carries no values; the "
    "emulator's column_types still lists every tracked column, the local server's the key columns only. The "
    "documentation describes column_types by its examples of INSERT and UPDATE only.",
    "information schema columns": "The local server's INFORMATION_SCHEMA views carry the columns readers ask for "
    "(VIEW_COLUMNS below), not every documented column; those it carries are compared value by value.",
}

VIEW_COLUMNS = {
    "CHANGE_STREAMS": ["CHANGE_STREAM_CATALOG", "CHANGE_STREAM_SCHEMA", "CHANGE_STREAM_NAME", "ALL"],
    "CHANGE_STREAM_TABLES": ["CHANGE_STREAM_CATALOG", "CHANGE_STREAM_SCHEMA", "CHANGE_STREAM_NAME", "TABLE_CATALOG", "TABLE_SCHEMA",
                             "TABLE_NAME", "ALL_COLUMNS"],
    "CHANGE_STREAM_COLUMNS": ["CHANGE_STREAM_CATALOG", "CHANGE_STREAM_SCHEMA", "CHANGE_STREAM_NAME", "TABLE_CATALOG", "TABLE_SCHEMA",
                              "TABLE_NAME", "COLUMN_NAME"],
    "CHANGE_STREAM_OPTIONS": ["CHANGE_STREAM_CATALOG", "CHANGE_STREAM_SCHEMA", "CHANGE_STREAM_NAME", "OPTION_NAME", "OPTION_TYPE",
                              "OPTION_VALUE"],
    "DATABASE_OPTIONS": ["CATALOG_NAME", "SCHEMA_NAME", "OPTION_NAME", "OPTION_TYPE", "OPTION_VALUE"],
    "TABLES": ["TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "TABLE_TYPE", "PARENT_TABLE_NAME", "ON_DELETE_ACTION"],
    "COLUMNS": ["TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME", "ORDINAL_POSITION", "IS_NULLABLE", "SPANNER_TYPE"],
    "INDEX_COLUMNS": ["TABLE_CATALOG", "TABLE_SCHEMA", "TABLE_NAME", "INDEX_NAME", "INDEX_TYPE", "COLUMN_NAME", "ORDINAL_POSITION",
                      "COLUMN_ORDERING"],
}  # fmt: skip
USER_SCHEMAS = {GSQL: "", PG: "public"}

DDL = {
    GSQL: [
        "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64, Score FLOAT64, Active BOOL, "
        "Opened TIMESTAMP, Photo BYTES(MAX), Tags ARRAY<STRING(MAX)>, Doc JSON, Amount NUMERIC, Born DATE) PRIMARY KEY (Id)",
        "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX)) PRIMARY KEY (Id)",
        # at most 3 streams watch a column (the emulator enforces Spanner's documented limit): the four value capture
        # types over four streams
        "CREATE CHANGE STREAM SAll FOR ALL",
        "CREATE CHANGE STREAM STab FOR Accounts OPTIONS (retention_period = '36h', value_capture_type = 'NEW_ROW')",
        "CREATE CHANGE STREAM SCol FOR Accounts(Owner, Balance), Events OPTIONS (value_capture_type = 'NEW_VALUES')",
        "CREATE CHANGE STREAM SEvents FOR Events OPTIONS (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
    ],
    PG: [
        "CREATE TABLE accounts (id bigint NOT NULL PRIMARY KEY, owner varchar, balance bigint, score float8, active bool, "
        "opened timestamptz, photo bytea, tags varchar[], doc jsonb, amount numeric, born date)",
        "CREATE TABLE events (id bigint NOT NULL PRIMARY KEY, kind varchar)",
        "CREATE CHANGE STREAM sall FOR ALL",
        "CREATE CHANGE STREAM stab FOR accounts WITH (retention_period = '36h', value_capture_type = 'NEW_ROW')",
        "CREATE CHANGE STREAM scol FOR accounts(owner, balance), events WITH (value_capture_type = 'NEW_VALUES')",
        "CREATE CHANGE STREAM sevents FOR events WITH (value_capture_type = 'NEW_ROW_AND_OLD_VALUES')",
    ],
}  # fmt: skip


def name(dialect: str, text: str) -> str:
    """A GoogleSQL-cased name as the PostgreSQL DDL above spells it (unquoted: lower case)."""
    return text.lower() if dialect == PG else text


def streams(dialect: str) -> list[str]:
    return [name(dialect, s) for s in STREAMS]


@dataclass
class Side:
    """One server's database after the workload: its commit timestamps in workload order, and the time before it."""

    label: str
    database: Any
    start: datetime
    commits: list[datetime]


TAGS = ["insert", "update", "update-one", "upsert", "replace", "delete"]  # the workload's transactions, in order


def workload(database: Any, dialect: str) -> list[datetime]:
    """The same transactions, tagged, on either server: inserts, updates of some columns, replaces, deletes."""
    n = lambda text: name(dialect, text)  # noqa: E731
    accounts, events = n("Accounts"), n("Events")
    columns = [n(c) for c in ("Id", "Owner", "Balance", "Score", "Active", "Opened", "Photo", "Tags", "Doc", "Amount", "Born")]
    opened = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)  # whole seconds: the emulator truncates TIMESTAMP values in mods
    rows = [
        [i, f"o{i}", i * 10, i / 4, i % 2 == 0, opened + timedelta(seconds=i), base64.b64encode(f"p{i}".encode()), [f"t{i}", "x"],
         JsonObject({"k": i, "s": f"d{i}"}), Decimal(f"{i}.5"), datetime(2026, 1, 1 + i).date()]
        for i in range(1, 7)
    ]  # fmt: skip
    commits = []

    def commit(tag: str, work: Callable[[Any], None]) -> None:
        with database.batch(request_options={"transaction_tag": tag}) as batch:
            work(batch)
        commits.append(batch.committed)

    commit("insert", lambda b: (b.insert(accounts, columns, rows), b.insert(events, [n("Id"), n("Kind")], [[1, "open"], [2, "open"]])))
    commit("update", lambda b: b.update(accounts, [n("Id"), n("Balance"), n("Owner")], [[1, 11, "o1b"], [2, 22, None]]))
    commit("update-one", lambda b: b.update(accounts, [n("Id"), n("Score")], [[3, 0.125]]))
    commit("upsert", lambda b: b.insert_or_update(accounts, [n("Id"), n("Owner")], [[4, "o4b"], [7, "o7"]]))
    commit("replace", lambda b: b.replace(accounts, [n("Id"), n("Balance")], [[5, 55]]))
    commit("delete", lambda b: (b.delete(accounts, spanner.KeySet(keys=[[6], [7]])), b.delete(events, spanner.KeySet(keys=[[2]]))))
    return commits


@pytest.fixture(scope="module", params=[GSQL, PG])
def sides(request: pytest.FixtureRequest, local_spanner: LocalSpanner, spanner_emulator: Any) -> Iterator[tuple[str, Side, Side]]:
    dialect = request.param
    made = []
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SPANNER_EMULATOR_HOST", raising=False)  # each database's client names its server
        for label, host in (("local", local_spanner.host), ("emulator", spanner_emulator.host)):
            database = create_database(host, PROJECT, INSTANCE, unique_database_id("df"), DDL[dialect], dialect)
            start = _now(database, dialect)
            made.append(Side(label, database, start, workload(database, dialect)))
        yield dialect, made[0], made[1]


def _now(database: Any, dialect: str) -> datetime:
    with database.snapshot() as snapshot:
        ((now,),) = list(snapshot.execute_sql("SELECT now()" if dialect == PG else "SELECT CURRENT_TIMESTAMP()"))
    return now


def query(database: Any, sql: str, **snapshot: Any) -> tuple[list[str], list[list[Any]]]:
    with database.snapshot(**snapshot) as snap:
        results = snap.execute_sql(sql)
        rows = [list(r) for r in results]
        return [f.name for f in results.fields], rows


def plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (datetime, float, int, bool, str)) or value is None:
        return value
    if isinstance(value, list):
        return [plain(v) for v in value]
    return json.loads(value.serialize()) if hasattr(value, "serialize") else str(value)


# ---------------------------------------------------------------------------------------------------- stale reads


def test_stale_reads_at_each_commit_see_the_same_rows(sides: tuple[str, Side, Side]) -> None:
    dialect, local, emulator = sides
    sql = f"SELECT * FROM {name(dialect, 'Accounts')} ORDER BY {name(dialect, 'Id')}"
    for step in range(len(local.commits)):
        seen = [query(side.database, sql, read_timestamp=side.commits[step]) for side in (local, emulator)]
        assert seen[0][0] == seen[1][0]
        assert [[plain(v) for v in row] for row in seen[0][1]] == [[plain(v) for v in row] for row in seen[1][1]], step
    before = [query(side.database, sql, read_timestamp=side.commits[0] - timedelta(microseconds=1))[1] for side in (local, emulator)]
    assert before == [[], []]


# ------------------------------------------------------------------------------------------------- change records


def transaction_records(side: Side, stream: str, postgres: bool) -> list[dict[str, Any]]:
    """Every data change record of the stream over the workload, its commit timestamp replaced by the ordinal of
    its transaction in the workload; the per-partition fields checked for consistency, then dropped."""
    end = side.commits[-1]
    by_token = read_stream(side.database, stream, side.start, end, postgres)
    ordinal = {ts: i for i, ts in enumerate(side.commits)}
    out = []
    by_transaction: dict[str, list[dict[str, Any]]] = {}
    for records in by_token.values():
        for record in records:
            if "data_change_record" in record:
                by_transaction.setdefault(record["data_change_record"]["server_transaction_id"], []).append(record["data_change_record"])
    for records in by_transaction.values():
        assert {r["number_of_records_in_transaction"] for r in records} == {len(records)}
        assert len({r["commit_timestamp"] for r in records}) == 1
        for record in records:
            commit = record["commit_timestamp"]
            commit = commit if isinstance(commit, datetime) else datetime.fromisoformat(str(commit).replace("Z", "+00:00"))
            for mod in record["mods"]:
                out.append({
                    "transaction": ordinal[commit], "table_name": record["table_name"], "mod_type": record["mod_type"],
                    "value_capture_type": record["value_capture_type"], "transaction_tag": record["transaction_tag"],
                    "is_system_transaction": record["is_system_transaction"],
                    "column_types": sorted(_column_types(record["column_types"])),
                    "keys": _json(mod["keys"]), "new_values": _json(mod["new_values"]), "old_values": _json(mod["old_values"]),
                })  # fmt: skip
    return sorted(out, key=lambda m: (m["transaction"], m["table_name"], json.dumps(m["keys"], sort_keys=True)))


def _json(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return json.loads(value)
    return json.loads(json.dumps(value, default=str))


def _column_types(types: list[dict[str, Any]]) -> Iterator[tuple[Any, ...]]:
    for column in types:
        yield column["name"], json.dumps(_json(column["type"]), sort_keys=True), column["is_primary_key"], column["ordinal_position"]


@pytest.mark.parametrize("stream", STREAMS)
def test_change_records_agree_mod_by_mod(sides: tuple[str, Side, Side], stream: str) -> None:
    dialect, local, emulator = sides
    stream = name(dialect, stream)
    found = [transaction_records(side, stream, dialect == PG) for side in (local, emulator)]
    assert found[0] and {m["transaction"] for m in found[0]} <= set(range(len(local.commits)))
    # listed: the emulator writes no transaction tag; the local server the workload's
    assert {m.pop("transaction_tag") for m in found[1]} == {""}
    assert all(m.pop("transaction_tag") == TAGS[m["transaction"]] for m in found[0])
    # listed: a Replace of an existing row is an INSERT without old values on the emulator, an UPDATE here
    replaced = [[m for m in f if m["transaction"] == TAGS.index("replace")] for f in found]
    assert {m["mod_type"] for m in replaced[1]} <= {"INSERT"} and all(not m["old_values"] for m in replaced[1])
    assert {m["mod_type"] for m in replaced[0]} <= {"UPDATE"} and len(replaced[0]) == len(replaced[1])
    for mod in replaced[0]:
        if mod["value_capture_type"] in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"):
            assert mod["old_values"], mod  # the row before the Replace, which the emulator leaves out
            mod["old_values"] = {}
    for mod in (*replaced[0], *replaced[1]):
        mod["mod_type"] = "replaced"
    # listed: a DELETE under NEW_VALUES / NEW_ROW lists every tracked column in column_types on the emulator, the key
    # columns here
    for local_mod, emulator_mod in zip(found[0], found[1], strict=False):
        if local_mod["mod_type"] == "DELETE" and local_mod["value_capture_type"] in ("NEW_VALUES", "NEW_ROW"):
            assert all(key for _, _, key, _ in local_mod["column_types"]), local_mod
            assert set(local_mod["column_types"]) < set(emulator_mod["column_types"]), (local_mod, emulator_mod)
            emulator_mod["column_types"] = local_mod["column_types"]
    for a, b in zip(found[0], found[1], strict=False):
        assert a == b, json.dumps([[m for m in f if m["transaction"] == a["transaction"]] for f in found], default=str, sort_keys=True)
    assert len(found[0]) == len(found[1])


def test_the_root_query_answers_child_partitions_at_its_start(sides: tuple[str, Side, Side]) -> None:
    dialect, local, emulator = sides
    for side in (local, emulator):
        at = side.commits[-1]
        records = query_partition(side.database, name(dialect, "SAll"), at, at, None, dialect == PG)
        assert records and all(set(r) == {"child_partitions_record"} for r in records), side.label
        for record in records:
            body = record["child_partitions_record"]
            started = body["start_timestamp"]
            started = started if isinstance(started, datetime) else datetime.fromisoformat(str(started).replace("Z", "+00:00"))
            assert started == at and body["child_partitions"], side.label
            assert all(not c["parent_partition_tokens"] for c in body["child_partitions"]), side.label


# --------------------------------------------------------------------------------------------- information schema


def view(side: Side, dialect: str, view_name: str) -> list[list[Any]]:
    columns = [name(dialect, c) for c in VIEW_COLUMNS[view_name]]
    quoted = [f'"{c}"' if dialect == PG and c == "all" else (f"`{c}`" if c == "ALL" else c) for c in columns]
    _, rows = query(side.database, f"SELECT {', '.join(quoted)} FROM {name(dialect, 'INFORMATION_SCHEMA.' + view_name)}")
    return sorted((r for r in rows), key=repr)


@pytest.mark.parametrize("view_name", ["CHANGE_STREAMS", "CHANGE_STREAM_TABLES", "CHANGE_STREAM_COLUMNS", "CHANGE_STREAM_OPTIONS", "DATABASE_OPTIONS"])
def test_change_stream_views_agree_row_by_row(sides: tuple[str, Side, Side], view_name: str) -> None:
    dialect, local, emulator = sides
    assert view(local, dialect, view_name) == view(emulator, dialect, view_name)


@pytest.mark.parametrize("view_name", ["TABLES", "COLUMNS", "INDEX_COLUMNS"])
def test_table_views_agree_on_the_users_tables(sides: tuple[str, Side, Side], view_name: str) -> None:
    dialect, local, emulator = sides
    found = [[r for r in view(side, dialect, view_name) if r[1] == USER_SCHEMAS[dialect]] for side in (local, emulator)]
    assert found[0] and found[0] == found[1], json.dumps(found, default=str)


def test_the_pipelines_metadata_reads_agree(sides: tuple[str, Side, Side]) -> None:
    """What spanner-cdc itself reads: the dialect (the emulator leaves GetDatabase's unspecified), each stream's
    metadata, and the tables and columns a snapshot of each stream reads."""
    dialect, local, emulator = sides
    for side in (local, emulator):
        assert detect_dialect(side.database, "auto") == dialect, side.label
    for stream in streams(dialect):
        metas = [stream_metadata(side.database, stream, dialect) for side in (local, emulator)]
        assert (metas[0].retention, metas[0].value_capture_type) == (metas[1].retention, metas[1].value_capture_type)
        tables = [[(t.name, t.keys, t.columns, t.ordinals) for t in watched_tables(side.database, stream, dialect)] for side in (local, emulator)]
        assert tables[0] and tables[0] == tables[1], stream


# ------------------------------------------------------------------------------------------------------- errors


def _params(dialect: str, start: datetime, end: datetime | None, token: str | None, heartbeat: int = 1000) -> tuple[dict[str, Any], dict[str, Any]]:
    t = spanner.param_types
    if dialect == PG:
        return ({"p1": start, "p2": end, "p3": token, "p4": heartbeat},
                {"p1": t.TIMESTAMP, "p2": t.TIMESTAMP, "p3": t.STRING, "p4": t.INT64})  # fmt: skip
    return ({"start": start, "end": end, "token": token, "heartbeat": heartbeat},
            {"start": t.TIMESTAMP, "end": t.TIMESTAMP, "token": t.STRING, "heartbeat": t.INT64})  # fmt: skip


def refused(side: Side, dialect: str, stream: str, start: datetime, end: datetime | None, token: str | None = None,
            heartbeat: int = 1000, **snapshot: Any) -> gexc.GoogleAPICallError:  # fmt: skip
    sql = (POSTGRESQL_QUERY if dialect == PG else GOOGLESQL_QUERY).format(stream=stream)
    params, types = _params(dialect, start, end, token, heartbeat)
    with pytest.raises(gexc.GoogleAPICallError) as info, side.database.snapshot(**snapshot) as snap:
        list(snap.execute_sql(sql, params=params, param_types=types))
    return info.value


def test_bad_requests_get_the_same_status_codes(sides: tuple[str, Side, Side]) -> None:
    dialect, local, emulator = sides
    stream = name(dialect, "SAll")
    cases: dict[str, Callable[[Side], gexc.GoogleAPICallError]] = {
        "before the stream's creation": lambda s: refused(s, dialect, stream, s.start - timedelta(days=2), s.start),
        "a bad token": lambda s: refused(s, dialect, stream, s.commits[-1], s.commits[-1], "not-a-token"),
        "an unknown stream": lambda s: refused(s, dialect, name(dialect, "NoSuch"), s.commits[-1], s.commits[-1]),
        # at a time the stream existed (a read 1 s ago may precede the schema change that made it: NOT_FOUND then)
        "a stale read": lambda s: refused(s, dialect, stream, s.commits[-1], s.commits[-1], read_timestamp=s.commits[-1]),
        "a multi-use read": lambda s: refused(s, dialect, stream, s.commits[-1], s.commits[-1], multi_use=True),
        "an end before the start": lambda s: refused(s, dialect, stream, s.commits[-1], s.commits[-1] - timedelta(seconds=1)),
        "a heartbeat out of range": lambda s: refused(s, dialect, stream, s.commits[-1], s.commits[-1], heartbeat=10),
    }
    codes = {case: [type(make(side)).__name__ for side in (local, emulator)] for case, make in cases.items()}
    assert all(a == b for a, b in codes.values()), json.dumps(codes)
    assert codes["before the stream's creation"] == codes["a heartbeat out of range"] == ["OutOfRange", "OutOfRange"]
    assert codes["a stale read"] == codes["a multi-use read"] == codes["a bad token"] == ["InvalidArgument", "InvalidArgument"]
    assert codes["an unknown stream"] == (["NotFound", "NotFound"] if dialect == PG else ["InvalidArgument", "InvalidArgument"])
    # listed: a heartbeat of 500 ms, under the documented 1,000, is refused here and answered by the emulator
    assert type(refused(local, dialect, stream, local.commits[-1], local.commits[-1], heartbeat=500)).__name__ == "OutOfRange"
    at = emulator.commits[-1]
    params, types = _params(dialect, at, at, None, 500)
    with emulator.database.snapshot() as snap:
        sql = (POSTGRESQL_QUERY if dialect == PG else GOOGLESQL_QUERY).format(stream=stream)
        assert list(snap.execute_sql(sql, params=params, param_types=types))


def test_a_fourth_stream_on_a_column_is_refused_by_the_emulator_only(sides: tuple[str, Side, Side]) -> None:
    dialect, local, emulator = sides
    ddl = f"CREATE CHANGE STREAM {name(dialect, 'SFourth')} FOR {name(dialect, 'Accounts')}"
    with pytest.raises(gexc.FailedPrecondition, match="more than 3 Change Streams"):
        emulator.database.update_ddl([ddl]).result(60)
    local.database.update_ddl([ddl]).result(60)  # listed: the local server does not count them
    local.database.update_ddl([f"DROP CHANGE STREAM {name(dialect, 'SFourth')}"]).result(60)


def test_a_window_before_the_streams_creation_is_reported_as_that_on_both(sides: tuple[str, Side, Side]) -> None:
    """The emulator's OUT_OF_RANGE does not say why; its earliest readable time, well inside the retention, does."""
    dialect, local, emulator = sides
    stream = name(dialect, "SAll")
    for side in (local, emulator):
        meta = stream_metadata(side.database, stream, dialect)
        at = side.start - timedelta(days=2)  # inside the retention (7 days), before the stream existed
        with pytest.raises(RetentionError) as info:
            root_partitions(side.database, stream, dialect=dialect, heartbeat_ms=1000, at=at, retention=meta.retention, namespace="live")
        message = str(info.value)
        assert f"precedes change stream {stream}'s creation (Spanner: the stream was created at " in message, (side.label, message)
        assert "retention" not in message, (side.label, message)
