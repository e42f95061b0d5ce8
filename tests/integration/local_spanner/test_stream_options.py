"""Change stream options exclude_insert / exclude_update / exclude_delete / allow_txn_exclusion and the transaction option
exclude_txn_from_change_streams, with the Python client, both dialects.

Semantics (Spanner's "Create and manage change streams" and TransactionOptions.exclude_txn_from_change_streams): the
exclude_* options drop modifications of that type from the stream; a transaction with exclude_txn_from_change_streams
is left out of the streams that have allow_txn_exclusion = true and recorded by every other stream; the option on a
read-only transaction is INVALID_ARGUMENT."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, LocalSpanner
from tests.integration.local_spanner.reading import data_records, read_stream

pytestmark = pytest.mark.integration

STREAMS = ("all_mods", "no_inserts", "no_updates", "no_deletes", "exclusion_allowed")


def schema(postgres: bool) -> list[str]:
    if postgres:
        return [
            "CREATE TABLE t (k bigint PRIMARY KEY, v text)",
            "CREATE CHANGE STREAM all_mods FOR t",
            "CREATE CHANGE STREAM no_inserts FOR t WITH (exclude_insert = true)",
            "CREATE CHANGE STREAM no_updates FOR t WITH (exclude_update = true)",
            "CREATE CHANGE STREAM no_deletes FOR t WITH (exclude_delete = true)",
            "CREATE CHANGE STREAM exclusion_allowed FOR t WITH (allow_txn_exclusion = true)",
        ]
    return [
        "CREATE TABLE t (k INT64 NOT NULL, v STRING(MAX)) PRIMARY KEY (k)",
        "CREATE CHANGE STREAM all_mods FOR t",
        "CREATE CHANGE STREAM no_inserts FOR t OPTIONS (exclude_insert = true)",
        "CREATE CHANGE STREAM no_updates FOR t OPTIONS (exclude_update = true)",
        "CREATE CHANGE STREAM no_deletes FOR t OPTIONS (exclude_delete = true)",
        "CREATE CHANGE STREAM exclusion_allowed FOR t OPTIONS (allow_txn_exclusion = true)",
    ]


def mods(database: Any, stream: str, start: datetime, end: datetime, postgres: bool) -> list[tuple[str, str]]:
    return [(r["mod_type"], str(m["keys"]["k"])) for r in data_records(read_stream(database, stream, start, end, postgres)) for m in r["mods"]]


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_mod_type_filters_and_transaction_exclusion(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres), dialect=dialect)
    start = datetime.now(UTC)
    with database.batch() as batch:
        batch.insert("t", ["k", "v"], [[1, "a"], [2, "b"]])
    database.run_in_transaction(lambda t: t.update("t", ["k", "v"], [[1, "a2"]]))
    database.run_in_transaction(lambda t: t.delete("t", spanner.KeySet(keys=[[2]])))
    # excluded: a read-write transaction, a batch (Commit with a single-use transaction) and a BatchWrite
    database.run_in_transaction(lambda t: t.insert("t", ["k", "v"], [[3, "c"]]), exclude_txn_from_change_streams=True)
    with database.batch(exclude_txn_from_change_streams=True) as batch:
        batch.update("t", ["k", "v"], [[3, "c2"]])
    with database.mutation_groups() as groups:
        groups.group().delete("t", spanner.KeySet(keys=[[1]]))
        assert all(r.status.code == 0 for r in groups.batch_write(exclude_txn_from_change_streams=True))
    end = datetime.now(UTC)

    everything = [("INSERT", "1"), ("INSERT", "2"), ("UPDATE", "1"), ("DELETE", "2"), ("INSERT", "3"), ("UPDATE", "3"), ("DELETE", "1")]
    assert mods(database, "all_mods", start, end, postgres) == everything
    assert mods(database, "no_inserts", start, end, postgres) == [m for m in everything if m[0] != "INSERT"]
    assert mods(database, "no_updates", start, end, postgres) == [m for m in everything if m[0] != "UPDATE"]
    assert mods(database, "no_deletes", start, end, postgres) == [m for m in everything if m[0] != "DELETE"]
    assert mods(database, "exclusion_allowed", start, end, postgres) == everything[:4]


def test_exclusion_on_a_read_only_transaction_is_invalid(make_spanner_database: Any, local_spanner: LocalSpanner) -> None:
    from google.cloud.spanner_v1 import BeginTransactionRequest, TransactionOptions

    database = make_spanner_database(schema(False))
    options = TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True), exclude_txn_from_change_streams=True)
    session = database.session()
    session.create()
    with pytest.raises(exceptions.InvalidArgument, match="exclude_txn_from_change_streams"):
        database.spanner_api.begin_transaction(request=BeginTransactionRequest(session=session.name, options=options))


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_bad_option_value_is_invalid_argument(make_spanner_database: Any, local_spanner: LocalSpanner, dialect: str) -> None:
    postgres = dialect == POSTGRESQL
    database = make_spanner_database(schema(postgres)[:1], dialect=dialect)
    text = "CREATE CHANGE STREAM s FOR t " + ("WITH" if postgres else "OPTIONS") + " (exclude_update = 'yes')"
    with pytest.raises(exceptions.InvalidArgument, match="exclude_update"):
        database.update_ddl([text]).result(30)
