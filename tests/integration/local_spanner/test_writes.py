"""Writes through database.batch() and run_in_transaction, read back with SELECT, errors as Spanner gives them."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

pytestmark = pytest.mark.integration

SCHEMA = ["CREATE TABLE Items (Shop STRING(20) NOT NULL, Id INT64 NOT NULL, Price NUMERIC, Tags ARRAY<STRING(MAX)>, "
          "Doc JSON, Updated TIMESTAMP OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (Shop, Id)"]


def select(database: Any, sql: str, **params: Any) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return [list(row) for row in snapshot.execute_sql(sql, params=params or None, param_types={k: spanner.param_types.STRING for k in params} or None)]


def test_batch_mutations_and_key_ranges(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMA)
    columns = ["Shop", "Id", "Price", "Tags"]
    with database.batch() as batch:
        batch.insert("Items", columns, [["a", i, f"{i}.50", ["x", None]] for i in (1, 2, 3, 10)] + [["b", 1, None, []]])
    with database.batch() as batch:
        batch.update("Items", ["Shop", "Id", "Price"], [["a", 1, "9.99"]])
        batch.insert_or_update("Items", ["Shop", "Id", "Tags"], [["a", 2, ["y"]], ["c", 5, None]])
        batch.replace("Items", ["Shop", "Id"], [["a", 3]])
        batch.delete("Items", spanner.KeySet(ranges=[spanner.KeyRange(start_open=["a", 3], end_closed=["a"])]))
    rows = select(database, "SELECT Shop, Id, Price, Tags FROM Items")
    assert rows == [
        ["a", 1, Decimal("9.99"), ["x", None]],
        ["a", 2, Decimal("2.5"), ["y"]],
        ["a", 3, None, None],
        ["b", 1, None, []],
        ["c", 5, None, None],
    ]
    assert select(database, "SELECT COUNT(*) FROM Items WHERE Shop = @shop", shop="a") == [[3]]


def test_run_in_transaction_commits_with_its_tag_and_commit_timestamp(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMA)

    def work(transaction: Any) -> None:
        transaction.insert("Items", ["Shop", "Id", "Doc", "Updated"], [["s", 1, '{"b": 2, "a": 1}', spanner.COMMIT_TIMESTAMP]])

    database.run_in_transaction(work, transaction_tag="app=test")
    ((doc, updated),) = select(database, "SELECT Doc, Updated FROM Items")
    assert dict(doc) == {"a": 1, "b": 2}
    with database.snapshot() as snapshot:
        assert list(snapshot.execute_sql("SELECT 1")) == [[1]]
    assert updated is not None and updated.tzinfo is not None


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (lambda b: b.insert("Items", ["Shop", "Id"], [["a", 1]]), exceptions.AlreadyExists, "already exists"),
        (lambda b: b.update("Items", ["Shop", "Id", "Price"], [["zz", 1, "1"]]), exceptions.NotFound, "not found"),
        (lambda b: b.insert("Nope", ["Shop"], [["a"]]), exceptions.NotFound, "Table not found: Nope"),
        (lambda b: b.insert("Items", ["Shop", "Id", "Shop2"], [["a", 9, "x"]]), exceptions.NotFound, "Column not found"),
        (lambda b: b.insert("Items", ["Shop", "Id"], [["a-very-long-shop-name-over-20", 9]]), exceptions.FailedPrecondition, "maximum size"),
    ],
)
def test_bad_mutations_fail_the_whole_commit(make_spanner_database: Any, mutate: Any, error: type[Exception], message: str) -> None:
    database = make_spanner_database(SCHEMA)
    with database.batch() as batch:
        batch.insert("Items", ["Shop", "Id"], [["a", 1]])
    with pytest.raises(error, match=message), database.batch() as batch:
        batch.insert("Items", ["Shop", "Id"], [["a", 2]])
        mutate(batch)
    assert select(database, "SELECT Shop, Id FROM Items") == [["a", 1]]


def test_snapshot_read_by_keys_and_ranges(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMA)
    with database.batch() as batch:
        batch.insert("Items", ["Shop", "Id", "Price"], [["a", i, f"{i}"] for i in (1, 2, 3, 20)] + [["b", 1, "7"]])
    key_set = spanner.KeySet(keys=[["b", 1], ["a", 1], ["zz", 0]], ranges=[spanner.KeyRange(start_closed=["a", 2], end_open=["a", 20])])
    with database.snapshot() as snapshot:
        rows = [list(r) for r in snapshot.read("Items", ["Id", "Shop", "Price"], key_set)]
    assert rows == [[1, "a", Decimal("1")], [2, "a", Decimal("2")], [3, "a", Decimal("3")], [1, "b", Decimal("7")]]
    with database.snapshot() as snapshot:
        assert [list(r) for r in snapshot.read("Items", ["Id"], spanner.KeySet(all_=True), limit=2)] == [[1], [2]]
    with pytest.raises(exceptions.NotFound, match="Column not found in table Items: Nope"), database.snapshot() as snapshot:
        list(snapshot.read("Items", ["Nope"], spanner.KeySet(all_=True)))
