"""Stored generated columns with the Python client, both dialects: computed on write, readable, refused as a write target,
and recorded by change streams as stored columns.

Spanner's "Create and manage generated columns" (cloud.google.com/spanner/docs/generated-column/how-to): a STORED
generated column "is only computed when a new row is inserted or when [a referenced column] is updated for an existing
row. The computed value is stored along with other columns in the table", and direct writes to it are not allowed. A
change stream watching the column records that stored value: with the INSERT, with an UPDATE that wrote a referenced
column (new and old value), and not with an UPDATE that wrote only other columns."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, LocalSpanner
from tests.integration.local_spanner.reading import data_records, read_stream

pytestmark = pytest.mark.integration


def schema(postgres: bool) -> list[str]:
    if postgres:
        return [
            "CREATE TABLE users (id bigint PRIMARY KEY, first_name text, last_name text, age bigint, "
            "full_name text GENERATED ALWAYS AS (first_name || ' ' || last_name) STORED, "
            "next_age bigint NOT NULL GENERATED ALWAYS AS (age + 1) STORED)",
            "CREATE CHANGE STREAM everything FOR ALL",
        ]
    return [
        "CREATE TABLE users (id INT64 NOT NULL, first_name STRING(MAX), last_name STRING(MAX), age INT64, "
        "full_name STRING(MAX) AS (first_name || ' ' || last_name) STORED, next_age INT64 NOT NULL AS (age + 1) STORED) PRIMARY KEY (id)",
        "CREATE CHANGE STREAM everything FOR ALL",
    ]


def rows(database: Any) -> list[tuple[Any, ...]]:
    with database.snapshot() as snapshot:
        return sorted(tuple(r) for r in snapshot.execute_sql("SELECT id, full_name, next_age FROM users"))


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_generated_columns_are_computed_on_write_and_recorded(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    start = datetime.now(UTC)
    with database.batch() as batch:
        batch.insert("users", ["id", "first_name", "last_name", "age"], [[1, "Ann", "Lee", 30]])
    database.run_in_transaction(lambda t: t.execute_update("INSERT INTO users (id, first_name, last_name, age) VALUES (2, 'Bo', 'Li', 40)"))
    assert rows(database) == [(1, "Ann Lee", 31), (2, "Bo Li", 41)]

    database.run_in_transaction(lambda t: t.execute_update("UPDATE users SET first_name = 'Bea' WHERE id = 1"))
    database.run_in_transaction(lambda t: t.update("users", ["id", "age"], [[2, 50]]))
    database.run_in_transaction(lambda t: t.delete("users", spanner.KeySet(keys=[[2]])))
    end = datetime.now(UTC)
    assert rows(database) == [(1, "Bea Lee", 31)]

    def number(value: Any) -> Any:  # INT64 values are strings in change records
        return str(value) if isinstance(value, int) else value

    seen = [(r["mod_type"], m["keys"]["id"], m["new_values"], m["old_values"]) for r in data_records(read_stream(database, "everything", start, end, postgres))
            for m in r["mods"]]
    row1 = {"first_name": "Ann", "last_name": "Lee", "age": "30", "full_name": "Ann Lee", "next_age": "31"}
    row2 = {"first_name": "Bo", "last_name": "Li", "age": "40", "full_name": "Bo Li", "next_age": "41"}
    assert [(kind, str(key), {k: number(v) for k, v in new.items()}, {k: number(v) for k, v in old.items()}) for kind, key, new, old in seen] == [
        ("INSERT", "1", row1, {}),
        ("INSERT", "2", row2, {}),
        ("UPDATE", "1", {"first_name": "Bea", "full_name": "Bea Lee"}, {"first_name": "Ann", "full_name": "Ann Lee"}),
        ("UPDATE", "2", {"age": "50", "next_age": "51"}, {"age": "40", "next_age": "41"}),
        ("DELETE", "2", {}, {**row2, "age": "50", "next_age": "51"}),
    ]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_what_generated_columns_refuse(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    with pytest.raises(exceptions.InvalidArgument, match="generated column"), database.batch() as batch:
        batch.insert("users", ["id", "age", "full_name"], [[3, 1, "x"]])
    with pytest.raises(exceptions.FailedPrecondition, match="must not be NULL"), database.batch() as batch:
        batch.insert("users", ["id"], [[4]])  # next_age is NOT NULL and age + 1 is NULL
    with pytest.raises(exceptions.FailedPrecondition, match="generated column full_name references it"):
        database.update_ddl(["ALTER TABLE users DROP COLUMN last_name"]).result(30)
    virtual = ("ALTER TABLE users ADD COLUMN shout text GENERATED ALWAYS AS (first_name || '!') VIRTUAL" if postgres
               else "ALTER TABLE users ADD COLUMN shout STRING(MAX) AS (first_name || '!')")
    with pytest.raises(exceptions.MethodNotImplemented, match="Non-stored"):
        database.update_ddl([virtual]).result(30)
    database.reload()
    assert any(("GENERATED ALWAYS AS (first_name || ' ' || last_name) STORED" if postgres else "AS (first_name || ' ' || last_name) STORED") in s
               for s in database.ddl_statements)
    sql = "SELECT column_name, is_generated, generation_expression FROM information_schema.columns WHERE table_name = 'users'"
    with database.snapshot() as snapshot:
        columns = {r[0]: (r[1], r[2]) for r in snapshot.execute_sql(sql)}
    assert columns["full_name"] == ("ALWAYS", "first_name || ' ' || last_name")
    assert columns["age"] == ("NEVER", None)
