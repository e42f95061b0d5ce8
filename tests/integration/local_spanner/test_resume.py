"""The client resumes an interrupted change stream read with its resume token: nothing lost, nothing repeated."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from tests.integration.local_spanner.reading import query_partition

pytestmark = pytest.mark.integration


@pytest.fixture
def disarm(local_spanner: LocalSpanner) -> Iterator[None]:
    """Never leave failures armed for the next test on the shared server."""
    yield
    local_spanner.control.fail_next_reads(reads=0)


def partitions(database: Any, stream: str, start: datetime, end: datetime) -> dict[str, list[dict[str, Any]]]:
    (roots,) = query_partition(database, stream, start, end, None, postgres=False)
    return {c["token"]: query_partition(database, stream, start, end, c["token"], postgres=False)
            for c in roots["child_partitions_record"]["child_partitions"]}


def new_values(records: list[dict[str, Any]], column: str) -> list[Any]:
    return [m["new_values"][column] for r in records if "data_change_record" in r for m in r["data_change_record"]["mods"]]


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_unavailable_mid_stream_is_resumed_without_loss_or_repeat(
    make_spanner_database: Any, local_spanner: LocalSpanner, disarm: None, postgres: bool
) -> None:
    ddl = (["create table t (k bigint primary key, v text)", "CREATE CHANGE STREAM s FOR ALL"] if postgres
           else ["CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"])
    database = make_spanner_database(ddl, dialect="POSTGRESQL" if postgres else "GOOGLE_STANDARD_SQL")
    start = datetime.now(UTC)
    for n in range(40):
        with database.batch() as batch:
            batch.insert("t", ["k", "v"], [[n, f"value {n}"], [1000 + n, f"other {n}"]])
    end = batch.committed
    (roots,) = query_partition(database, "s", start, end, None, postgres)
    tokens = [c["token"] for c in roots["child_partitions_record"]["child_partitions"]]
    expected = {token: query_partition(database, "s", start, end, token, postgres) for token in tokens}
    token = max(expected, key=lambda t: len(expected[t]))
    assert len(expected[token]) > 3 * 5
    before = local_spanner.control.status()["failures_injected"]
    local_spanner.control.fail_next_reads(reads=3, after_rows=5)
    resumed = query_partition(database, "s", start, end, token, postgres)
    assert local_spanner.control.status()["failures_injected"] - before == 3
    assert resumed == expected[token]


def test_a_record_larger_than_the_client_message_limit_arrives_whole(make_spanner_database: Any, local_spanner: LocalSpanner, disarm: None) -> None:
    database = make_spanner_database(["CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"])
    start = datetime.now(UTC)
    big = "🙂 spanner " * 600_000  # ~8 MiB: twice the client's 4 MiB receive limit
    for rows in ([[n, "small"] for n in range(10, 40)], [[1, big], [2, "small"]], [[3, "after"]]):
        with database.batch() as batch:
            batch.insert("t", ["k", "v"], rows)
    end = batch.committed
    (token, records), = [(t, rs) for t, rs in partitions(database, "s", start, end).items() if big in new_values(rs, "v")]
    # a failure just before the big record: the resumed stream sends it (chunked) and what follows
    local_spanner.control.fail_next_reads(reads=1, after_rows=1)
    assert query_partition(database, "s", start, end, token, postgres=False) == records
