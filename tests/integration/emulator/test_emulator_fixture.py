"""The emulator fixture: Google's emulator on a free port, databases of both dialects made with the real client."""

from __future__ import annotations

from typing import Any

import pytest

from spanner_cdc.devstack.emulator import SpannerEmulator
from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL

pytestmark = [pytest.mark.integration]


def test_databases_of_both_dialects_on_the_emulator_answer_the_real_client(
    spanner_emulator: SpannerEmulator, make_emulator_database: Any
) -> None:
    assert spanner_emulator.running and spanner_emulator.port > 0
    google = make_emulator_database(["CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)"], GOOGLE_STANDARD_SQL)
    postgres = make_emulator_database(["CREATE TABLE t (id bigint NOT NULL, v varchar, PRIMARY KEY (id))"], POSTGRESQL)
    for database, table in ((google, "T"), (postgres, "t")):
        with database.batch() as batch:
            batch.insert(table, [c if table == "T" else c.lower() for c in ("Id", "V")], [[1, "one"], [2, "two"]])
        with database.snapshot() as snapshot:
            assert sorted(snapshot.execute_sql(f"SELECT * FROM {table}")) == [[1, "one"], [2, "two"]]
    with postgres.snapshot() as snapshot:  # the emulator made a PostgreSQL database, not a GoogleSQL one
        [[dialect]] = snapshot.execute_sql("SELECT option_value FROM information_schema.database_options WHERE option_name = 'database_dialect'")
    assert dialect == "POSTGRESQL"
