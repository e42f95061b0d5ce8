"""Change streams read with the bare client, both dialects, through forced splits and merges, against ground truth."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import LocalSpanner
from tests.integration.local_spanner.reading import GOOGLESQL_QUERY, data_records, query_partition, read_stream

pytestmark = pytest.mark.integration


def workload(database: Any, server: LocalSpanner, stream: str, table: str, key: str) -> tuple[datetime, datetime, list[tuple[Any, ...]]]:
    """Three rounds of inserts, updates and deletes with a forced split and merge in between; the expected mods."""
    expected: list[tuple[Any, ...]] = []
    start = datetime.now(UTC)
    balances: dict[int, int] = {}
    commit_ts = start
    for round_ in range(3):
        ids = range(round_ * 12, round_ * 12 + 12)
        with database.batch(request_options={"transaction_tag": f"insert-{round_}"}) as batch:
            batch.insert(table, [key, "owner", "balance"], [[i, f"o{i}", i * 10] for i in ids])
        expected += [(batch.committed, "INSERT", {key: str(i)}, {"owner": f"o{i}", "balance": str(i * 10)}, {}, f"insert-{round_}") for i in ids]
        balances.update({i: i * 10 for i in ids})
        if round_ == 0:
            server.control.split(database.name, stream)
        if round_ == 1:
            server.control.merge(database.name, stream)
        changed, gone = list(ids)[:4], list(ids)[4:6]

        used: list[Any] = []

        def move_money(transaction: Any, changed: list[int] = changed, gone: list[int] = gone, used: list[Any] = used) -> None:
            transaction.update(table, [key, "balance"], [[i, balances[i] + 1] for i in changed])
            transaction.delete(table, spanner.KeySet(keys=[[i] for i in gone]))
            used.append(transaction)

        database.run_in_transaction(move_money, transaction_tag=f"move-{round_}")
        commit_ts = used[-1].committed
        expected += [(commit_ts, "UPDATE", {key: str(i)}, {"balance": str(balances[i] + 1)}, {"balance": str(balances[i])}, f"move-{round_}") for i in changed]
        expected += [(commit_ts, "DELETE", {key: str(i)}, {}, {"owner": f"o{i}", "balance": str(balances[i])}, f"move-{round_}") for i in gone]
    return start, commit_ts, expected


def canonical(mods: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    def ts(value: Any) -> datetime:
        return value if isinstance(value, datetime) else datetime.fromisoformat(str(value).replace("Z", "+00:00"))

    return sorted((ts(t), kind, json.dumps(k, sort_keys=True), json.dumps(n, sort_keys=True), json.dumps(o, sort_keys=True), tag)
                  for t, kind, k, n, o, tag in mods)


def check_transactions(records: list[dict[str, Any]], token_of: dict[int, str]) -> None:
    """Per transaction: record counts, partition counts and last-record flags agree across partitions."""
    by_transaction: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_transaction[record["server_transaction_id"]].append(record)
    for transaction in by_transaction.values():
        partitions = Counter(token_of[id(r)] for r in transaction)
        assert {r["number_of_records_in_transaction"] for r in transaction} == {len(transaction)}
        assert {r["number_of_partitions_in_transaction"] for r in transaction} == {len(partitions)}
        lasts = Counter(token_of[id(r)] for r in transaction if r["is_last_record_in_transaction_in_partition"])
        assert lasts == Counter(dict.fromkeys(partitions, 1))
        assert len({r["record_sequence"] for r in transaction}) == len(transaction)


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_every_partition_read_through_split_and_merge_matches_the_writes(
    make_spanner_database: Any, local_spanner: LocalSpanner, postgres: bool
) -> None:
    table, key, stream = "accounts", "id", "everything"
    if postgres:
        ddl = ["create table accounts (id bigint primary key, owner text, balance bigint)", "CREATE CHANGE STREAM everything FOR ALL"]
    else:
        ddl = ["CREATE TABLE accounts (id INT64 NOT NULL, owner STRING(MAX), balance INT64) PRIMARY KEY (id)", "CREATE CHANGE STREAM everything FOR ALL"]
    database = make_spanner_database(ddl, dialect="POSTGRESQL" if postgres else "GOOGLE_STANDARD_SQL")
    start, end, expected = workload(database, local_spanner, stream, table, key)
    by_token = read_stream(database, stream, start, end, postgres=postgres)
    records = data_records(by_token)
    actual = [(r["commit_timestamp"], r["mod_type"], m["keys"], m["new_values"], m["old_values"], r["transaction_tag"])
              for r in records for m in r["mods"]]
    assert canonical(actual) == canonical(expected)
    token_of = {id(r["data_change_record"]): token for token, rs in by_token.items() for r in rs if "data_change_record" in r}
    check_transactions(records, token_of)
    # lineage: 2 roots, a split into 2 children, then a merge of 2 partitions into one child with 2 parents
    announced = [c for rs in by_token.values() for r in rs if "child_partitions_record" in r for c in r["child_partitions_record"]["child_partitions"]]
    assert len(by_token) >= 5
    assert any(len(c["parent_partition_tokens"]) == 2 for c in announced)
    assert all(r["value_capture_type"] == "OLD_AND_NEW_VALUES" for r in records)


QUERY_TYPES = {"start": spanner.param_types.TIMESTAMP, "end": spanner.param_types.TIMESTAMP, "token": spanner.param_types.STRING,
               "heartbeat": spanner.param_types.INT64}  # fmt: skip


def test_query_errors_are_spanner_statuses(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR ALL"])
    now = datetime.now(UTC)
    with pytest.raises(exceptions.OutOfRange, match="heartbeat_milliseconds=500"):
        query_partition(database, "S", now, now, None, postgres=False, heartbeat_ms=500)
    with pytest.raises(exceptions.InvalidArgument, match="end_timestamp .* is before start_timestamp"):
        query_partition(database, "S", now, now - timedelta(seconds=1), None, postgres=False)
    with pytest.raises(exceptions.InvalidArgument, match="Specified partition_token is invalid.*Received partition_token: nope"):
        query_partition(database, "S", now, now, "nope", postgres=False)
    with pytest.raises(exceptions.InvalidArgument, match="Table-valued function not found: READ_Missing"):
        query_partition(database, "Missing", now, now, None, postgres=False)
    with pytest.raises(exceptions.OutOfRange, match="before change stream S was created"):
        query_partition(database, "S", now - timedelta(hours=1), now, None, postgres=False)
    not_strong = "Change stream queries must be strong reads executed via single use transactions"
    for stale in ({"exact_staleness": timedelta(seconds=1)}, {"read_timestamp": now}, {"multi_use": True}):
        with pytest.raises(exceptions.InvalidArgument, match=not_strong), database.snapshot(**stale) as snapshot:
            list(snapshot.execute_sql(GOOGLESQL_QUERY.format(stream="S"), params={"start": now, "end": now, "token": None, "heartbeat": 1000},
                                      param_types=QUERY_TYPES))


def test_a_query_with_an_end_in_the_future_waits_for_it_and_heartbeats(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR ALL"])
    start = datetime.now(UTC)
    (roots,) = query_partition(database, "S", start, start, None, postgres=False)
    token = roots["child_partitions_record"]["child_partitions"][0]["token"]
    end = datetime.now(UTC) + timedelta(seconds=2.5)
    records = query_partition(database, "S", start, end, token, postgres=False, heartbeat_ms=1000)
    assert datetime.now(UTC) >= end
    heartbeats = [r["heartbeat_record"]["timestamp"] for r in records]
    assert len(heartbeats) >= 2 and heartbeats == sorted(heartbeats) and heartbeats[-1] <= end
