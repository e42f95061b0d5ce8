"""Mutation semantics: Spanner's insert / update / insert_or_update / replace / delete rules and the row changes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud.spanner_v1.types import KeyRange, KeySet, Mutation

from spanner_cdc.local_spanner import ddl
from spanner_cdc.local_spanner.keysets import Rows, sorted_keys
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.mutations import MutationSet
from spanner_cdc.local_spanner.schema import Schema
from spanner_cdc.local_spanner.values import to_pb_value

COMMIT_TS = "2024-05-01T00:00:00.5Z"


def schema() -> Schema:
    s = Schema(postgres=False)
    for text in (
        "CREATE TABLE T (K INT64 NOT NULL, V STRING(MAX), N INT64 NOT NULL, At TIMESTAMP) PRIMARY KEY (K)",
        "CREATE TABLE P (A STRING(MAX) NOT NULL, B INT64 NOT NULL, X FLOAT64) PRIMARY KEY (A, B)",
    ):
        s.apply(ddl.parse(text, False), datetime(2024, 5, 1, tzinfo=UTC), lambda _: 0)
    return s


def write(kind: str, table: str, columns: list[str], *rows: list[Any]) -> Any:
    message = Mutation.pb()()
    target = getattr(message, kind)
    target.table = table
    target.columns.extend(columns)
    for row in rows:
        target.values.add().values.extend(to_pb_value(v) for v in row)
    return message


def delete(table: str, keys: list[list[Any]] = (), ranges: list[KeyRange] = (), all_: bool = False) -> Any:  # type: ignore[assignment]
    message = Mutation.pb()()
    message.delete.table = table
    key_set = KeySet.pb(KeySet(keys=[[to_pb_value(v) for v in key] for key in keys], ranges=list(ranges), all_=all_))
    message.delete.key_set.CopyFrom(key_set)
    return message


def commit(data: dict[str, Rows], *mutations: Any) -> MutationSet:
    changes = MutationSet(schema(), data, COMMIT_TS)
    changes.apply(mutations)
    for table, key, row in changes.writes():
        rows = data.setdefault(table, {})
        if row is None:
            rows.pop(key, None)
        else:
            rows[key] = row
    return changes


def summary(changes: MutationSet) -> list[tuple[Any, ...]]:
    return [(c.table, c.mod_type, c.keys, c.old_row, c.new_row, c.written_columns) for c in changes.changes()]


def test_insert_update_and_delete_produce_full_old_and_new_rows() -> None:
    data: dict[str, Rows] = {}
    inserted = commit(data, write("insert", "T", ["K", "V", "N"], [1, "a", 10], [2, "b", 20]))
    assert summary(inserted) == [
        ("T", "INSERT", {"K": "1"}, None, {"V": "a", "N": "10", "At": None}, ("V", "N", "At")),
        ("T", "INSERT", {"K": "2"}, None, {"V": "b", "N": "20", "At": None}, ("V", "N", "At")),
    ]
    updated = commit(data, write("update", "T", ["K", "V"], [1, "aa"]))
    assert summary(updated) == [
        ("T", "UPDATE", {"K": "1"}, {"V": "a", "N": "10", "At": None}, {"V": "aa", "N": "10", "At": None}, ("V",)),
    ]
    deleted = commit(data, delete("T", keys=[[2], [99]]))  # a missing key deletes nothing and records nothing
    assert summary(deleted) == [("T", "DELETE", {"K": "2"}, {"V": "b", "N": "20", "At": None}, None, ())]
    assert list(data["T"]) == [("1",)]


def test_several_mutations_of_one_row_in_a_commit_give_its_net_change() -> None:
    data: dict[str, Rows] = {}
    changes = commit(
        data,
        write("insert", "T", ["K", "V", "N"], [1, "a", 1]),
        write("update", "T", ["K", "N"], [1, 2]),
        write("insert_or_update", "T", ["K", "V", "N"], [5, "x", 5]),
        delete("T", keys=[[5]]),
    )
    assert summary(changes) == [("T", "INSERT", {"K": "1"}, None, {"V": "a", "N": "2", "At": None}, ("V", "N", "At"))]
    # delete then insert of an existing row: an update of every column
    replaced = commit(data, delete("T", keys=[[1]]), write("insert", "T", ["K", "N"], [1, 3]))
    assert summary(replaced) == [
        ("T", "UPDATE", {"K": "1"}, {"V": "a", "N": "2", "At": None}, {"V": None, "N": "3", "At": None}, ("V", "N", "At")),
    ]


def test_replace_clears_unnamed_columns_and_insert_or_update_keeps_them() -> None:
    data: dict[str, Rows] = {}
    commit(data, write("insert", "T", ["K", "V", "N"], [1, "a", 1]))
    kept = commit(data, write("insert_or_update", "T", ["K", "N"], [1, 2]))
    assert summary(kept)[0][4] == {"V": "a", "N": "2", "At": None} and summary(kept)[0][5] == ("N",)
    cleared = commit(data, write("replace", "T", ["K", "N"], [1, 3]))
    assert summary(cleared)[0][1:] == ("UPDATE", {"K": "1"}, {"V": "a", "N": "2", "At": None}, {"V": None, "N": "3", "At": None}, ("V", "N", "At"))
    fresh = commit(data, write("replace", "T", ["K", "N"], [2, 4]))
    assert summary(fresh)[0][1] == "INSERT"


def test_commit_timestamp_placeholder_becomes_the_commit_timestamp() -> None:
    data: dict[str, Rows] = {}
    changes = commit(data, write("insert", "T", ["K", "N", "At"], [1, 1, "spanner.commit_timestamp()"]))
    assert changes.changes()[0].new_row == {"V": None, "N": "1", "At": COMMIT_TS}


def test_key_ranges_follow_spanner_key_order_with_prefixes() -> None:
    data: dict[str, Rows] = {}
    rows = [["a", b, float(b)] for b in (1, 2, 10)] + [["b", 1, 0.5], ["c", 7, None]]
    commit(data, write("insert", "P", ["A", "B", "X"], *rows))
    closed_open = KeyRange(start_closed=["a", 2], end_open=["b"])  # prefix end: everything under "a" from B=2
    changes = commit(data, delete("P", ranges=[KeyRange.pb(closed_open)]))
    assert [c.keys for c in changes.changes()] == [{"A": "a", "B": "2"}, {"A": "a", "B": "10"}]  # 10 > 2 numerically
    open_closed = KeyRange(start_open=["a"], end_closed=["c"])
    changes = commit(data, delete("P", ranges=[KeyRange.pb(open_closed)]))
    assert [c.keys for c in changes.changes()] == [{"A": "b", "B": "1"}, {"A": "c", "B": "7"}]
    assert list(data["P"]) == [("a", "1")]
    everything = commit(data, delete("P", all_=True))
    assert [c.mod_type for c in everything.changes()] == ["DELETE"]
    assert data["P"] == {}


def test_sorted_keys_orders_numbers_numerically() -> None:
    data: dict[str, Rows] = {}
    commit(data, write("insert", "T", ["K", "N"], [10, 0], [9, 0], [-1, 0]))
    table = schema().tables["T"]
    assert sorted_keys(table, data["T"], postgres=False) == [("-1",), ("9",), ("10",)]


@pytest.mark.parametrize(
    ("mutation", "code", "fragment"),
    [
        (write("insert", "T", ["K", "N"], [1, 1]), "ALREADY_EXISTS", "Row [1] in table T already exists"),
        (write("update", "T", ["K", "N"], [2, 1]), "NOT_FOUND", "Row [2] not found in table T"),
        (write("insert", "T", ["K", "V"], [3, "x"]), "FAILED_PRECONDITION", "T.N must not be NULL"),
        (write("update", "T", ["K", "N"], [1, None]), "FAILED_PRECONDITION", "T.N must not be NULL"),
        (write("insert", "T", ["K", "N"], [4, "four"]), "FAILED_PRECONDITION", "expected INT64"),
        (write("insert", "T", ["K", "N", "Z"], [4, 1, 1]), "NOT_FOUND", "Column not found in table T: Z"),
        (write("insert", "Nope", ["K"], [4]), "NOT_FOUND", "Table not found: Nope"),
        (write("insert", "T", ["V", "N"], ["x", 1]), "FAILED_PRECONDITION", "missing key column(s): K"),
        (write("insert", "T", ["K", "N", "At"], [5, 1, "yesterday"]), "FAILED_PRECONDITION", "expected TIMESTAMP"),
    ],
)
def test_invalid_mutations_are_rejected_and_change_nothing(mutation: Any, code: str, fragment: str) -> None:
    data: dict[str, Rows] = {}
    commit(data, write("insert", "T", ["K", "N"], [1, 1]))
    before = {k: dict(v) for k, v in data["T"].items()}
    changes = MutationSet(schema(), data, COMMIT_TS)
    with pytest.raises(QueryError) as error:
        changes.apply([write("insert", "T", ["K", "N"], [7, 7]), mutation])
    assert error.value.code == code
    assert fragment in str(error.value)
    assert data["T"] == before


def test_a_write_gives_what_its_values_give_one_by_one_whatever_its_column_names() -> None:
    """apply() looks a write's columns up once for all its rows: names in another case, a name given twice (the last
    value counts, the other is never checked) and an unknown column after a bad value answer as write() does."""
    data: dict[str, Rows] = {}
    mixed = commit(data, write("insert", "T", ["k", "N", "v"], [1, 1, "a"], [2, 2, None]))
    assert summary(mixed) == [
        ("T", "INSERT", {"K": "1"}, None, {"V": "a", "N": "1", "At": None}, ("V", "N", "At")),
        ("T", "INSERT", {"K": "2"}, None, {"V": None, "N": "2", "At": None}, ("V", "N", "At")),
    ]
    twice = commit(data, write("update", "T", ["K", "N", "N"], [1, "not a number", 5]))
    assert summary(twice) == [("T", "UPDATE", {"K": "1"}, {"V": "a", "N": "1", "At": None}, {"V": "a", "N": "5", "At": None}, ("N",))]
    for columns, row, fragment in ((["K", "N", "Z"], [3, "four", 1], "expected INT64"), (["K", "Z", "N"], [3, 1, "four"], "Column not found")):
        with pytest.raises(QueryError, match=fragment):
            MutationSet(schema(), data, COMMIT_TS).apply([write("insert", "T", columns, row)])
    one_by_one = MutationSet(schema(), data, COMMIT_TS)
    one_by_one.write("insert_or_update", schema().tables["T"], {"K": "7", "V": "x", "N": "1", "At": "2024-05-01T00:00:00.000Z"})
    at_once = MutationSet(schema(), data, COMMIT_TS)
    at_once.apply([write("insert_or_update", "T", ["K", "V", "N", "At"], [7, "x", 1, "2024-05-01T00:00:00.000Z"])])
    assert summary(at_once) == summary(one_by_one)
