"""DML in read-write transactions (ExecuteSql, ExecuteBatchDml, partitioned DML) and conflicting transactions ABORTED."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.rpc import code_pb2

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL
from tests.integration.local_spanner.reading import data_records, read_stream

pytestmark = pytest.mark.integration

SCHEMAS = {
    GOOGLE_STANDARD_SQL: [
        "CREATE TABLE m (k INT64 NOT NULL, v STRING(MAX), n INT64) PRIMARY KEY (k)",
        "CREATE TABLE d (k INT64 NOT NULL, v STRING(MAX), n INT64) PRIMARY KEY (k)",
        "CREATE CHANGE STREAM s FOR ALL",
    ],
    POSTGRESQL: [
        "CREATE TABLE m (k bigint NOT NULL, v varchar, n bigint, PRIMARY KEY (k))",
        "CREATE TABLE d (k bigint NOT NULL, v varchar, n bigint, PRIMARY KEY (k))",
        "CREATE CHANGE STREAM s FOR ALL",
    ],
}
INT64 = spanner.param_types.INT64
# fields a change record of the same writes has alike, whichever table and transaction made it
SAME = ("record_sequence", "is_last_record_in_transaction_in_partition", "mods", "mod_type", "value_capture_type",
        "number_of_records_in_transaction", "number_of_partitions_in_transaction", "is_system_transaction")


def param(postgres: bool, n: int, name: str) -> str:
    return f"${n}" if postgres else f"@{name}"


def names(postgres: bool, **values: Any) -> dict[str, Any]:
    return {f"p{i}" if postgres else name: value for i, (name, value) in enumerate(values.items(), 1)}


def rows(database: Any, table: str) -> list[list[Any]]:
    with database.snapshot() as snapshot:
        return [list(r) for r in snapshot.execute_sql(f"SELECT k, v, n FROM {table} ORDER BY k")]


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    out = {field: record[field] for field in SAME}
    out["column_types"] = [{k: v for k, v in c.items()} for c in record["column_types"]]
    return out


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_dml_changes_rows_and_records_like_the_same_mutations(make_spanner_database: Any, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(SCHEMAS[dialect], dialect=dialect)
    with database.batch() as batch:
        batch.insert("m", ["k", "v", "n"], [[1, "a", 10], [2, "b", 20]])
    first = batch.committed
    with database.batch() as batch:
        batch.update("m", ["k", "n"], [[1, 15]])
    with database.batch() as batch:
        batch.delete("m", spanner.KeySet(keys=[[2]]))

    counts = []
    p = lambda n, name: param(postgres, n, name)  # noqa: E731
    insert = f"INSERT INTO d (k, v, n) VALUES (1, 'a', 10), ({p(1, 'k')}, 'b', {p(2, 'n')})"
    counts.append(database.run_in_transaction(lambda t: t.execute_update(insert, params=names(postgres, k=2, n=20), param_types=names(postgres, k=INT64, n=INT64))))
    counts.append(database.run_in_transaction(lambda t: t.execute_update(f"UPDATE d SET n = n + 5 WHERE k = {p(1, 'k')}", params=names(postgres, k=1), param_types=names(postgres, k=INT64))))
    counts.append(database.run_in_transaction(lambda t: t.execute_update("DELETE FROM d WHERE n > 15")))
    assert counts == [2, 1, 1]
    assert rows(database, "d") == rows(database, "m") == [[1, "a", 15]]

    with database.batch() as batch:
        batch.insert("m", ["k"], [[99]])
    records = data_records(read_stream(database, "s", first - timedelta(microseconds=1), batch.committed, postgres))
    by_table = {t: [comparable(r) for r in records if r["table_name"] == t] for t in ("m", "d")}
    assert by_table["m"][:-1] == by_table["d"]  # the last one is the closing insert of k=99
    assert [r["mod_type"] for r in by_table["d"]] == ["INSERT", "INSERT", "UPDATE", "DELETE"]  # two rows, two partitions
    assert [m["new_values"] for m in by_table["d"][2]["mods"]] == [{"n": "15"}]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_batch_dml_stops_at_the_first_failure_and_returning_gives_the_rows(make_spanner_database: Any, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(SCHEMAS[dialect], dialect=dialect)
    returning = "RETURNING k, n" if postgres else "THEN RETURN k, n"

    def work(transaction: Any) -> tuple[Any, Any, list[list[Any]]]:
        status, counts = transaction.batch_update([
            "INSERT INTO d (k, v, n) VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3)",
            "UPDATE d SET v = 'z' WHERE k >= 2",
            "INSERT INTO d (k) VALUES (1)",  # already exists: the batch stops here
            "DELETE FROM d WHERE k = 3",
        ])
        returned = [list(r) for r in transaction.execute_sql(f"UPDATE d SET n = n * 10 WHERE k < 3 {returning}")]
        return status, counts, returned

    status, counts, returned = database.run_in_transaction(work)
    assert status.code == code_pb2.ALREADY_EXISTS and counts == [3, 2]
    assert returned == [[1, 10], [2, 20]]
    assert rows(database, "d") == [[1, "a", 10], [2, "z", 20], [3, "z", 3]]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_partitioned_dml_commits_without_a_commit_call(make_spanner_database: Any, dialect: str) -> None:
    database = make_spanner_database(SCHEMAS[dialect], dialect=dialect)
    with database.batch() as batch:
        batch.insert("d", ["k", "n"], [[k, k] for k in range(10)])
    assert database.execute_partitioned_dml("UPDATE d SET v = 'big' WHERE n >= 6") == 4
    assert database.execute_partitioned_dml("DELETE FROM d WHERE n < 2") == 2
    assert [r[:2] for r in rows(database, "d")] == [[k, "big" if k >= 6 else None] for k in range(2, 10)]


def test_dml_outside_a_read_write_transaction_is_refused(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMAS[GOOGLE_STANDARD_SQL])
    with pytest.raises(exceptions.InvalidArgument, match="read-write"), database.snapshot() as snapshot:
        list(snapshot.execute_sql("DELETE FROM d WHERE true"))
    with pytest.raises(exceptions.InvalidArgument, match="WHERE"):
        database.run_in_transaction(lambda t: t.execute_update("DELETE FROM d"))


def test_a_transaction_that_read_a_row_another_one_changed_is_aborted_and_its_retry_succeeds(make_spanner_database: Any) -> None:
    database = make_spanner_database(SCHEMAS[GOOGLE_STANDARD_SQL])
    with database.batch() as batch:
        batch.insert("d", ["k", "n"], [[1, 1], [2, 1]])
    attempts: list[datetime] = []

    def increment(transaction: Any) -> None:
        ((n,),) = list(transaction.execute_sql("SELECT n FROM d WHERE k = 1"))
        attempts.append(n)
        if len(attempts) == 1:  # another transaction (another thread: the client refuses nesting) writes the row in between
            other = threading.Thread(target=lambda: database.run_in_transaction(
                lambda t: (t.execute_update("UPDATE d SET n = n + 100 WHERE k = 1"), t.execute_update("UPDATE d SET n = 7 WHERE k = 2"))))
            other.start()
            other.join()
        transaction.execute_update("UPDATE d SET n = @n WHERE k = 1", params={"n": n + 1}, param_types={"n": INT64})

    database.run_in_transaction(increment)
    assert attempts == [1, 101]  # the first attempt was ABORTED, the retry read the other transaction's write
    assert rows(database, "d") == [[1, None, 102], [2, None, 7]]

    session = database.session()
    session.create()
    first, second = session.transaction(), database.session()
    second.create()
    other = second.transaction()
    first.begin()
    other.begin()
    assert first.execute_update("UPDATE d SET n = 0 WHERE k = 2") == 1
    assert other.execute_update("UPDATE d SET n = 1 WHERE k = 2") == 1
    other.commit()
    with pytest.raises(exceptions.Aborted, match="conflicts"):
        first.commit()
