"""BatchWrite through google-cloud-spanner: each mutation group its own transaction, refused groups change nothing,
and a group commit (the client's mutation groups, the workload generator's raw ones) is as durable as single commits across a crash."""

from __future__ import annotations

import itertools
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from tests.integration.local_spanner.reading import data_records, read_stream, record_keys, truth_key

pytestmark = pytest.mark.integration

DDL = ["CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"]


def batch_write(database: Any, groups: list[list[tuple[str, int, str]]], tag: str = "") -> list[Any]:
    """One BatchWrite: per group, (operation, key, value) mutations of table t; the responses in arrival order."""
    with database.mutation_groups() as mutation_groups:
        for mutations in groups:
            group = mutation_groups.group()
            for operation, key, value in mutations:
                getattr(group, operation)("t", ["k", "v"], [[key, value]])
        return list(mutation_groups.batch_write(request_options={"transaction_tag": tag} if tag else None))


def rows(database: Any) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return [list(row) for row in snapshot.execute_sql("SELECT k, v FROM t ORDER BY k")]


def test_each_group_commits_alone_and_a_refused_group_changes_nothing(make_spanner_database: Any) -> None:
    database = make_spanner_database(DDL)
    with database.batch() as batch:
        batch.insert("t", ["k", "v"], [[1, "one"]])
    start = batch.committed

    responses = batch_write(database, [
        [("insert", 2, "two"), ("insert", 3, "three")],
        [("update", 1, "uno"), ("insert", 1, "again")],  # refused: row 1 exists, so the update is not applied either
        [("update", 1, "ONE")],
        [("update", 9, "nine")],  # refused: no row 9
    ], tag="app=batch")

    by_index = {i: r for r in responses for i in r.indexes}
    assert sorted(by_index) == [0, 1, 2, 3]
    assert [by_index[i].status.code for i in range(4)] == [0, 6, 0, 5]  # OK, ALREADY_EXISTS, OK, NOT_FOUND
    assert "already exists" in by_index[1].status.message and "not found" in by_index[3].status.message
    committed = [by_index[0].commit_timestamp, by_index[2].commit_timestamp]
    assert start < committed[0] < committed[1]
    assert rows(database) == [[1, "ONE"], [2, "two"], [3, "three"]]

    records = data_records(read_stream(database, "s", start + timedelta(microseconds=1), committed[1]))
    transactions: dict[str, list[Any]] = {}
    for r in records:  # a transaction's mods can be split over partitions: one record each
        seen = transactions.setdefault(r["server_transaction_id"], [r["commit_timestamp"], r["transaction_tag"], 0])
        seen[2] += len(r["mods"])
    assert sorted(transactions.values()) == [[committed[0], "app=batch", 2], [committed[1], "app=batch", 1]]


def test_a_group_commit_survives_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = LocalSpanner(data_dir=tmp_path / "data", clock_start=datetime.now(UTC) - timedelta(hours=1),
                          extra_args=["--fsync"], log_path=tmp_path / "server.log")
    with server:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
        database = create_database(server.host, "p", "i", "d", DDL)
        with database.batch() as batch:
            batch.insert("t", ["k", "v"], [[0, "zero"]])
        responses = batch_write(database, [[("insert", k, f"v{k}")] for k in range(1, 41)])
        assert all(r.status.code == 0 for r in responses)
        last = max(r.commit_timestamp for r in responses)
        before = read_stream(database, "s", batch.committed, last)
        # the workload generator's own BatchWrite requests (raw mutation groups) on a second database
        generated = create_database(server.host, "p", "i", "w", ())
        workload.setup_database(generated, "GOOGLE_STANDARD_SQL", "ws")
        stats = workload.run_workload(generated, transactions=400, seed=9, ground_truth=tmp_path / "truth.jsonl", batch=50)
        assert stats.first_commit is not None and stats.last_commit is not None

        server.restart(crash=True)  # SIGKILL: only what the journals flushed before answering is left
        again = spanner.Client(project="p").instance("i").database("d")
        assert rows(again) == [[k, "zero" if k == 0 else f"v{k}"] for k in range(41)]
        after = read_stream(again, "s", batch.committed, last)
        assert data_records(after) == data_records(before) and len(data_records(after)) == 41
        generated_again = spanner.Client(project="p").instance("i").database("w")
        records = data_records(read_stream(generated_again, "ws", stats.first_commit, stats.last_commit))
    truth = workload.load_ground_truth(tmp_path / "truth.jsonl")
    assert sorted(k for r in records for k in record_keys(r)) == sorted(truth_key(row) for row in truth)
    # one transaction and commit timestamp per group; each row's changes commit in the order the workload planned them
    assert len({r["server_transaction_id"] for r in records}) == 400
    assert len({row.commit_timestamp for row in truth}) == len({row.transaction for row in truth}) == 400
    by_row: dict[tuple[str, str], list[tuple[int, datetime]]] = {}
    for row in truth:
        by_row.setdefault((row.table, json.dumps(row.keys, sort_keys=True)), []).append((row.transaction, row.commit_timestamp))
    assert all(a[1] < b[1] for changes in by_row.values() for a, b in itertools.pairwise(sorted(changes)))
    assert max(len(changes) for changes in by_row.values()) > 2


def test_commits_of_concurrent_callers_acknowledged_before_a_crash_survive_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # several callers at once share group commits (the catalog's commit queue): each answer must still come after
    # the flush that holds its commit, so whatever was answered before a SIGKILL is there after the restart
    from google.cloud.spanner_v1.types import CommitRequest, Mutation, TransactionOptions

    server = LocalSpanner(data_dir=tmp_path / "data", extra_args=["--fsync"], log_path=tmp_path / "server.log")
    with server:
        monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
        database = create_database(server.host, "p", "i", "d", DDL)
        api, metadata = database.spanner_api, [("google-cloud-resource-prefix", database.name)]
        answered: list[tuple[int, datetime]] = []
        enough, stop = threading.Event(), threading.Event()

        def commit_keys(first: int) -> None:
            session = api.create_session(database=database.name, metadata=metadata).name
            for k in itertools.count(first, 4):
                if stop.is_set():
                    return
                write = Mutation.Write(table="t", columns=["k", "v"], values=[[str(k), f"v{k}"]])
                request = CommitRequest(session=session, single_use_transaction=TransactionOptions(read_write={}),
                                        mutations=[Mutation(insert=write)])
                try:
                    response = api.commit(request=request, metadata=metadata, retry=None, timeout=30)
                except Exception:  # the server was killed under this commit: not answered, so not promised
                    return
                answered.append((k, response.commit_timestamp))
                if len(answered) >= 200:
                    enough.set()

        with ThreadPoolExecutor(max_workers=4) as callers:
            running = [callers.submit(commit_keys, first) for first in range(4)]
            assert enough.wait(120)
            server.kill()  # SIGKILL with commits in flight
            stop.set()
            for caller in running:
                caller.result()
        server.start()
        again = spanner.Client(project="p").instance("i").database("d")
        present = dict(rows(again))
        stamps = sorted(ts for _, ts in answered)
        recorded = {r["commit_timestamp"] for r in data_records(read_stream(again, "s", stamps[0] - timedelta(microseconds=1), stamps[-1]))}
    assert len(answered) >= 200 and all(present.get(k) == f"v{k}" for k, _ in answered)
    assert len(set(stamps)) == len(stamps) and set(stamps) <= recorded  # one commit timestamp each, its change record kept
