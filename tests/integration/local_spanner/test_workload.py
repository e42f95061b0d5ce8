"""The workload through google-cloud-spanner against the local server, read back from every partition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from google.cloud.spanner_v1 import JsonObject, TypeCode, param_types

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.times import parse_rfc3339
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id
from tests.integration.local_spanner.reading import record_keys, truth_key

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300), pytest.mark.heavy(17)]  # it mostly waits: started beside the busy modules, not last

STREAM = "workload_stream"
# 10 server minutes per real second: the default policy's time events (every 20 server minutes)
# split and merge partitions while the workload runs for a few seconds.
CLOCK_RATE = 600.0
GSQL_QUERY = (
    "SELECT ChangeRecord FROM READ_{stream}(start_timestamp => @start, end_timestamp => @end, "
    "partition_token => @token, heartbeat_milliseconds => @heartbeat)"
)
PG_QUERY = "SELECT * FROM spanner.read_json_{stream}($1, $2, $3, $4, null)"


@pytest.fixture(scope="module")
def fast_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSpanner]:
    """A server of its own with an accelerated clock and the default partition policy."""
    log_path = tmp_path_factory.mktemp("fast-spanner") / "server.log"
    with LocalSpanner(clock_rate=CLOCK_RATE, log_path=log_path) as server:
        yield server


def _plain(value: Any) -> Any:
    if isinstance(value, JsonObject):
        return list(value._array_value) if value._is_array else {k: _plain(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _named(value: Any, type_: Any) -> Any:
    """A decoded GoogleSQL value with STRUCTs as dicts, by the field names of the result metadata."""
    if value is None:
        return None
    if type_.code == TypeCode.ARRAY:
        return [_named(v, type_.array_element_type) for v in value]
    if type_.code == TypeCode.STRUCT:
        return {f.name: _named(v, f.type_) for f, v in zip(type_.struct_type.fields, value, strict=True)}
    return _plain(value)


def query(database: Any, token: str | None, start: datetime, end: datetime, postgres: bool) -> list[dict[str, Any]]:
    """One change stream query through the client; records as {kind: body}, timestamps as datetimes."""
    if postgres:
        sql = PG_QUERY.format(stream=STREAM)
        params = {"p1": start, "p2": end, "p3": token, "p4": 10_000}
        names = ("p1", "p2", "p3", "p4")
    else:
        sql = GSQL_QUERY.format(stream=STREAM)
        params = {"start": start, "end": end, "token": token, "heartbeat": 10_000}
        names = ("start", "end", "token", "heartbeat")
    kinds = (param_types.TIMESTAMP, param_types.TIMESTAMP, param_types.STRING, param_types.INT64)
    records = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(
            sql, params=params, param_types=dict(zip(names, kinds, strict=True)), timeout=None
        )
        for row in results:
            if postgres:
                ((kind, body),) = _plain(row[0]).items()
                records.append({kind: body})
                continue
            for element in _named(row[0], results.fields[0].type_):
                ((kind, (body,)),) = [(k, v) for k, v in element.items() if v]
                records.append({kind: body})
    for record in records:
        body = next(iter(record.values()))
        for field in ("commit_timestamp", "start_timestamp", "timestamp"):
            if isinstance(body.get(field), str):
                body[field] = parse_rfc3339(body[field])
    return records


def read_every_partition(
    database: Any, start: datetime, end: datetime, postgres: bool
) -> dict[str, list[dict[str, Any]]]:
    """The query workflow: the root query, then each child once all of its parents have been read."""
    (root,) = query(database, None, start, end, postgres)
    pending = deque((c["token"], start) for c in root["child_partitions_record"]["child_partitions"])
    parents_left: dict[str, set[str]] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    while pending:
        token, begin = pending.popleft()
        out[token] = query(database, token, begin, end, postgres)
        for record in out[token]:
            body = record.get("child_partitions_record")
            for child in body["child_partitions"] if body else ():
                waiting = parents_left.setdefault(child["token"], set(child["parent_partition_tokens"]))
                waiting.discard(token)
                if not waiting:
                    pending.append((child["token"], body["start_timestamp"]))
    return out


@pytest.mark.parametrize("dialect", ["GOOGLE_STANDARD_SQL", "POSTGRESQL"])
def test_every_committed_change_is_read_once_through_splits_and_merges(
    fast_server: LocalSpanner, dialect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", fast_server.host)
    database = create_database(fast_server.host, PROJECT, INSTANCE, unique_database_id("w"), (), dialect)
    workload.setup_database(database, dialect, STREAM, "OLD_AND_NEW_VALUES")
    start = parse_rfc3339(fast_server.control.status()["now"])  # after the stream's creation, before any write
    truth_path = tmp_path / "truth.jsonl"
    # paced to last >= 6 real seconds = one server hour, whatever the machine's speed
    stats = workload.run_workload(database, transactions=1200, tx_per_second=200, seed=11, ground_truth=truth_path)
    truth = workload.load_ground_truth(truth_path)
    assert stats.last_commit is not None and stats.first_commit is not None

    out = read_every_partition(database, start, stats.last_commit, postgres=dialect == "POSTGRESQL")

    records = [r["data_change_record"] for rs in out.values() for r in rs if "data_change_record" in r]
    assert sorted(k for r in records for k in record_keys(r)) == sorted(truth_key(row) for row in truth)
    assert stats.rows == len(truth) and {"INSERT", "UPDATE", "DELETE"} <= {row.mod_type for row in truth}
    parents = [
        c["parent_partition_tokens"]
        for rs in out.values()
        for r in rs
        for c in r.get("child_partitions_record", {}).get("child_partitions", [])
    ]
    splits = {tuple(p) for p in parents if len(p) == 1}
    merges = {tuple(p) for p in parents if len(p) >= 2}
    assert splits and merges, f"the default policy changed no lineage in {stats.last_commit - stats.first_commit}"
    by_transaction: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for token, rs in out.items():
        for r in rs:
            if "data_change_record" in r:
                by_transaction[r["data_change_record"]["server_transaction_id"]].append(
                    (token, r["data_change_record"])
                )
    assert len(by_transaction) == stats.transactions
    assert max(len({t for t, _ in parts}) for parts in by_transaction.values()) >= 2
    for parts in by_transaction.values():
        bodies = [body for _, body in parts]
        assert {b["number_of_records_in_transaction"] for b in bodies} == {len(bodies)}
        assert {b["number_of_partitions_in_transaction"] for b in bodies} == {len({t for t, _ in parts})}
        assert len({b["record_sequence"] for b in bodies}) == len(bodies)
        assert Counter(b["is_last_record_in_transaction_in_partition"] for b in bodies)[True] == len(
            {t for t, _ in parts}
        )


def test_workload_command_sets_up_and_writes_its_ground_truth(local_spanner: LocalSpanner, tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    database_id = unique_database_id("c")
    env = {**os.environ, "SPANNER_EMULATOR_HOST": local_spanner.host}
    command = [
        sys.executable,
        "-m",
        "spanner_cdc",
        "local-spanner",
        "workload",
        "--host",
        local_spanner.host,
        "--project",
        PROJECT,
        "--instance",
        INSTANCE,
        "--database",
        database_id,
        "--dialect",
        "POSTGRESQL",
        "--stream",
        "cli_stream",
        "--transactions",
        "40",
        "--rate",
        "200",
        "--seed",
        "3",
        "--ground-truth",
        str(truth_path),
        "--setup",
    ]

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    truth = workload.load_ground_truth(truth_path)
    assert summary["transactions"] == 40 and summary["rows"] == len(truth) > 40
    assert len({row.transaction for row in truth}) == 40
    assert [row.commit_timestamp for row in truth] == sorted(row.commit_timestamp for row in truth)

    again = subprocess.run([*command[:-1]], env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr  # a second run on the same database resolves existing rows


def test_batched_workload_commits_each_transaction_alone_and_its_truth_is_read_back(
    local_spanner: LocalSpanner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", local_spanner.host)
    database = create_database(local_spanner.host, PROJECT, INSTANCE, unique_database_id("b"), (), "GOOGLE_STANDARD_SQL")
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", STREAM, "OLD_AND_NEW_VALUES")
    start = parse_rfc3339(local_spanner.control.status()["now"])
    truth_path = tmp_path / "truth.jsonl"

    stats = workload.run_workload(database, transactions=300, seed=5, ground_truth=truth_path, batch=20)

    truth = workload.load_ground_truth(truth_path)
    assert stats.transactions == 300 and stats.rows == len(truth) and stats.last_commit is not None
    out = read_every_partition(database, start, stats.last_commit, postgres=False)
    records = [r["data_change_record"] for rs in out.values() for r in rs if "data_change_record" in r]
    assert sorted(k for r in records for k in record_keys(r)) == sorted(truth_key(row) for row in truth)
    assert len({r["server_transaction_id"] for r in records}) == 300  # one transaction per mutation group
    by_transaction = {row.transaction: (row.commit_timestamp, row.transaction_tag) for row in truth}
    assert len({ts for ts, _ in by_transaction.values()}) == 300
    tags = Counter(tag for _, tag in by_transaction.values())
    # tagged per request of at most 20 transactions (every seventh request untagged)
    assert "" in tags and len(tags) >= 300 // 20 and max(n for tag, n in tags.items() if tag) <= 20
    assert {"INSERT", "UPDATE", "DELETE"} <= {row.mod_type for row in truth}

