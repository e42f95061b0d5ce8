"""INTERLEAVE IN PARENT with ON DELETE CASCADE and NO ACTION, with the Python client, both dialects.

As Spanner documents ("Schema and data model", parent-child table relationships): a child row needs its parent row
(NOT_FOUND otherwise); deleting a parent row deletes its descendants in the same transaction under ON DELETE CASCADE
(each recorded by a change stream as a DELETE of that transaction) and is refused under ON DELETE NO ACTION (the
default) while a child row exists."""

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
            "CREATE TABLE singers (singer_id bigint PRIMARY KEY, name text)",
            "CREATE TABLE albums (singer_id bigint NOT NULL, album_id bigint NOT NULL, title text, PRIMARY KEY (singer_id, album_id)) "
            "INTERLEAVE IN PARENT singers ON DELETE CASCADE",
            "CREATE TABLE songs (singer_id bigint NOT NULL, album_id bigint NOT NULL, song_id bigint NOT NULL, PRIMARY KEY (singer_id, album_id, song_id)) "
            "INTERLEAVE IN PARENT albums ON DELETE CASCADE",
            "CREATE TABLE tours (singer_id bigint NOT NULL, tour_id bigint NOT NULL, PRIMARY KEY (singer_id, tour_id)) INTERLEAVE IN PARENT singers",
            "CREATE CHANGE STREAM everything FOR ALL",
        ]
    return [
        "CREATE TABLE singers (singer_id INT64 NOT NULL, name STRING(MAX)) PRIMARY KEY (singer_id)",
        "CREATE TABLE albums (singer_id INT64 NOT NULL, album_id INT64 NOT NULL, title STRING(MAX)) PRIMARY KEY (singer_id, album_id), "
        "INTERLEAVE IN PARENT singers ON DELETE CASCADE",
        "CREATE TABLE songs (singer_id INT64 NOT NULL, album_id INT64 NOT NULL, song_id INT64 NOT NULL) PRIMARY KEY (singer_id, album_id, song_id), "
        "INTERLEAVE IN PARENT albums ON DELETE CASCADE",
        "CREATE TABLE tours (singer_id INT64 NOT NULL, tour_id INT64 NOT NULL) PRIMARY KEY (singer_id, tour_id), INTERLEAVE IN PARENT singers",
        "CREATE CHANGE STREAM everything FOR ALL",
    ]


def keys(database: Any, table: str, columns: list[str]) -> list[tuple[int, ...]]:
    with database.snapshot() as snapshot:
        return sorted(tuple(row) for row in snapshot.read(table, columns, spanner.KeySet(all_=True)))


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_cascade_deletes_children_in_the_parents_transaction_and_no_action_refuses(
    make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str
) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    with database.batch() as batch:
        batch.insert("singers", ["singer_id", "name"], [[1, "a"], [2, "b"]])
        batch.insert("albums", ["singer_id", "album_id", "title"], [[1, 1, "x"], [1, 2, "y"], [2, 1, "z"]])
        batch.insert("songs", ["singer_id", "album_id", "song_id"], [[1, 1, 1], [1, 2, 1]])
        batch.insert("tours", ["singer_id", "tour_id"], [[2, 1]])

    with pytest.raises(exceptions.NotFound, match="parent table"), database.batch() as batch:
        batch.insert("albums", ["singer_id", "album_id", "title"], [[3, 1, "orphan"]])

    start = datetime.now(UTC)
    database.run_in_transaction(lambda t: t.delete("singers", spanner.KeySet(keys=[[1]])))
    assert keys(database, "singers", ["singer_id"]) == [(2,)]
    assert keys(database, "albums", ["singer_id", "album_id"]) == [(2, 1)]
    assert keys(database, "songs", ["singer_id", "album_id", "song_id"]) == []

    # NO ACTION: singer 2 has a tour; its delete is refused and changes nothing (not even the cascading albums)
    with pytest.raises(exceptions.FailedPrecondition, match="child row"):
        database.run_in_transaction(lambda t: t.delete("singers", spanner.KeySet(keys=[[2]])))
    delete = "DELETE FROM singers WHERE singer_id = 2"
    with pytest.raises(exceptions.FailedPrecondition, match="tours"):
        database.run_in_transaction(lambda t: t.execute_update(delete))
    assert keys(database, "albums", ["singer_id", "album_id"]) == [(2, 1)]

    def tour_then_singer(transaction: Any) -> None:
        transaction.execute_update("DELETE FROM tours WHERE singer_id = 2")
        transaction.execute_update(delete)

    database.run_in_transaction(tour_then_singer)
    end = datetime.now(UTC)
    assert keys(database, "albums", ["singer_id", "album_id"]) == []

    records = data_records(read_stream(database, "everything", start, end, postgres))
    seen = [(r["server_transaction_id"], r["table_name"], r["mod_type"], tuple(int(v) for v in m["keys"].values())) for r in records for m in r["mods"]]
    first, last = seen[0][0], seen[-1][0]
    assert sorted(s[1:] for s in seen if s[0] == first) == sorted([
        ("singers", "DELETE", (1,)), ("albums", "DELETE", (1, 1)), ("albums", "DELETE", (1, 2)),
        ("songs", "DELETE", (1, 1, 1)), ("songs", "DELETE", (1, 2, 1)),
    ])
    assert sorted(s[1:] for s in seen if s[0] == last) == sorted([
        ("tours", "DELETE", (2, 1)), ("albums", "DELETE", (2, 1)), ("singers", "DELETE", (2,)),
    ])
    assert {s[0] for s in seen} == {first, last}  # the refused deletes recorded nothing


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_interleaving_in_the_schema_views_and_ddl(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    sql = ("SELECT table_name, parent_table_name, on_delete_action FROM information_schema.tables WHERE table_schema = "
           + ("'public'" if postgres else "''"))
    with database.snapshot() as snapshot:
        views = sorted(tuple(row) for row in snapshot.execute_sql(sql))
    assert views == [("albums", "singers", "CASCADE"), ("singers", None, None), ("songs", "albums", "CASCADE"), ("tours", "singers", "NO ACTION")]
    ddl = "\n".join(database.reload() or database.ddl_statements)
    assert "INTERLEAVE IN PARENT singers ON DELETE CASCADE" in ddl
    assert "INTERLEAVE IN PARENT singers ON DELETE NO ACTION" in ddl
    with pytest.raises(exceptions.FailedPrecondition, match="interleaved"):
        database.update_ddl(["DROP TABLE singers"]).result(30)
    bad_key = ("CREATE TABLE notes (note_id bigint PRIMARY KEY) INTERLEAVE IN PARENT singers" if postgres
               else "CREATE TABLE notes (note_id INT64 NOT NULL) PRIMARY KEY (note_id), INTERLEAVE IN PARENT singers")
    with pytest.raises(exceptions.FailedPrecondition, match="parent key column"):
        database.update_ddl([bad_key]).result(30)
