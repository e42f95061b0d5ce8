"""The SQL subset in both dialects: predicates, ORDER BY, LIMIT/OFFSET, COUNT(*), secondary indexes, partitions, errors."""

from __future__ import annotations

from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL

pytestmark = pytest.mark.integration

SCHEMAS = {
    GOOGLE_STANDARD_SQL: ["CREATE TABLE singers (id INT64 NOT NULL, name STRING(MAX), score FLOAT64, nick STRING(MAX)) PRIMARY KEY (id)",
                          "CREATE INDEX by_name ON singers (name) STORING (score)"],
    POSTGRESQL: ["CREATE TABLE singers (id bigint NOT NULL, name varchar, score float8, nick varchar, PRIMARY KEY (id))",
                 "CREATE INDEX by_name ON singers (name) INCLUDE (score)"],
}
NAMES = ["kim", "ada", "lou", "bea", "max", "cy", "dot", "eve", "fay", "gus"]
ROWS = [[i, NAMES[i], float((i * 7) % 10), None if i % 3 == 0 else f"n{i}"] for i in range(10)]
FLOAT64 = spanner.param_types.FLOAT64


@pytest.fixture(params=[GOOGLE_STANDARD_SQL, POSTGRESQL])
def singers(request: pytest.FixtureRequest, make_spanner_database: Any) -> tuple[Any, bool]:
    database = make_spanner_database(SCHEMAS[request.param], dialect=request.param)
    with database.batch() as batch:
        batch.insert("singers", ["id", "name", "score", "nick"], ROWS)
    return database, request.param == POSTGRESQL


def query(database: Any, sql: str, **params: Any) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return [list(r) for r in snapshot.execute_sql(sql, params=params or None, param_types={k: FLOAT64 for k in params} or None)]


def test_range_predicates_order_by_limit_and_offset(singers: tuple[Any, bool]) -> None:
    database, postgres = singers
    low, high = ("$1", "$2") if postgres else ("@low", "@high")
    params = {"p1": 2.0, "p2": 8.0} if postgres else {"low": 2.0, "high": 8.0}
    got = query(database, f"SELECT id, score FROM singers WHERE score > {low} AND score <= {high} ORDER BY score DESC, id LIMIT 3 OFFSET 1", **params)
    expected = sorted(([r[0], r[2]] for r in ROWS if 2.0 < r[2] <= 8.0), key=lambda r: (-r[1], r[0]))[1:4]
    assert got == expected and len(got) == 3


def test_in_is_null_and_or_not_and_count(singers: tuple[Any, bool]) -> None:
    database, _ = singers
    got = query(database, "SELECT id FROM singers WHERE (id IN (1, 4, 8) OR nick IS NULL) AND NOT id = 9 ORDER BY id")
    assert got == [[r[0]] for r in ROWS if (r[0] in (1, 4, 8) or r[3] is None) and r[0] != 9]
    assert query(database, "SELECT COUNT(*) FROM singers WHERE nick IS NOT NULL") == [[sum(r[3] is not None for r in ROWS)]]
    assert query(database, "SELECT name FROM singers WHERE id BETWEEN 2 AND 4 AND name LIKE '%e%'") == [["bea"]]


def test_nulls_sort_as_each_dialect_says(singers: tuple[Any, bool]) -> None:
    database, postgres = singers
    nicks = [r[0] for r in query(database, "SELECT nick FROM singers ORDER BY nick")]
    with_nick = sorted(r[3] for r in ROWS if r[3] is not None)
    nulls = [None] * (len(ROWS) - len(with_nick))
    assert nicks == (with_nick + nulls if postgres else nulls + with_nick)  # PostgreSQL: NULLs last; GoogleSQL: first


def test_reads_and_queries_through_a_secondary_index(singers: tuple[Any, bool]) -> None:
    database, postgres = singers
    key_range = spanner.KeySet(ranges=[spanner.KeyRange(start_closed=["bea"], end_open=["fay"])])
    with database.snapshot() as snapshot:
        got = [list(r) for r in snapshot.read("singers", ["name", "id", "score"], key_range, index="by_name")]
    assert got == sorted([r[1], r[0], r[2]] for r in ROWS if "bea" <= r[1] < "fay")
    with database.snapshot() as snapshot:
        assert [list(r) for r in snapshot.read("singers", ["id"], spanner.KeySet(keys=[["max"]]), index="by_name")] == [[4]]
    hint = "singers /*@ FORCE_INDEX = by_name */" if postgres else "singers@{FORCE_INDEX=by_name}"
    assert query(database, f"SELECT name FROM {hint} WHERE name < 'c'") == [["ada"], ["bea"]]
    with pytest.raises(exceptions.NotFound, match="Index not found: nope"), database.snapshot() as snapshot:
        list(snapshot.read("singers", ["id"], spanner.KeySet(all_=True), index="nope"))
    with pytest.raises(exceptions.InvalidArgument, match="nick is neither a key column nor stored"), database.snapshot() as snapshot:
        list(snapshot.read("singers", ["nick"], spanner.KeySet(all_=True), index="by_name"))


@pytest.mark.parametrize(
    ("sql", "error", "fragment"),
    [
        ("SELECT a.id FROM singers a JOIN singers b ON a.id = b.id", exceptions.MethodNotImplemented, "JOINS in a query is not supported"),
        ("SELECT MAX(score) FROM singers", exceptions.MethodNotImplemented, "only COUNT"),
        ("SELECT id FROM singers GROUP BY id", exceptions.MethodNotImplemented, "GROUP in a query"),
        ("SELECT id FROM (SELECT id FROM singers)", exceptions.MethodNotImplemented, "subquery"),
        ("SELECT id FROM singers WHERE", exceptions.InvalidArgument, "Syntax error"),
        ("SELECT nope FROM singers", exceptions.InvalidArgument, "Unrecognized name: nope"),
    ],
)
def test_sql_outside_the_subset_says_what_is_not_supported(singers: tuple[Any, bool], sql: str, error: type[Exception], fragment: str) -> None:
    database, _ = singers
    with pytest.raises(error, match=fragment):
        query(database, sql)


def test_partitions_of_a_query_and_a_read_add_up_to_the_result(singers: tuple[Any, bool]) -> None:
    database, _ = singers
    snapshot = database.batch_snapshot()
    try:
        parts = [[list(r) for r in snapshot.process_query_batch(batch)]
                 for batch in snapshot.generate_query_batches("SELECT id, name FROM singers WHERE id > 2", max_partitions=3)]
        read_parts = [[list(r) for r in snapshot.process_read_batch(batch)]
                      for batch in snapshot.generate_read_batches("singers", ["id"], spanner.KeySet(all_=True), max_partitions=4)]
    finally:
        snapshot.close()
    assert len(parts) == 3 and all(parts)
    assert sorted(r for part in parts for r in part) == [[r[0], r[1]] for r in ROWS if r[0] > 2]
    assert len(read_parts) == 4 and sorted(r for part in read_parts for r in part) == [[r[0]] for r in ROWS]
    with pytest.raises(exceptions.InvalidArgument, match="not root partitionable"):
        snapshot = database.batch_snapshot()
        list(snapshot.generate_query_batches("SELECT id FROM singers ORDER BY id"))
