"""Schema versions of a database: the schema and rows a read at a timestamp sees, also after a restart from the journal."""

from __future__ import annotations

from pathlib import Path

from google.cloud.spanner_v1.types import Mutation

from spanner_cdc.local_spanner.catalog import Instance
from spanner_cdc.local_spanner.server import LocalSpannerServer, ServerOptions

DB = "projects/p/instances/i/databases/d"


def test_schema_and_rows_at_a_timestamp_survive_a_restart(tmp_path: Path) -> None:
    server = LocalSpannerServer(ServerOptions(data_dir=tmp_path, ttl_interval=0))
    server.catalog.create_instance(Instance("projects/p/instances/i"))
    server.catalog.create_database(DB, 1, ["CREATE TABLE t (k INT64 NOT NULL, b STRING(MAX)) PRIMARY KEY (k)"])
    t0 = server.catalog.commit(DB, [Mutation.pb()(insert={"table": "t", "columns": ["k", "b"], "values": [{"values": [{"string_value": "1"},
                                                                                                                       {"string_value": "x"}]}]})])
    server.catalog.update_ddl(DB, ["ALTER TABLE t DROP COLUMN b", "ALTER TABLE t ADD COLUMN b STRING(MAX)", "CREATE TABLE u (k INT64) PRIMARY KEY (k)"])

    def seen(catalog_server: LocalSpannerServer) -> tuple[list[str], list[str], dict[str, object], dict[str, object]]:
        database = catalog_server.catalog.database(DB)
        old, now = database.schema_at(t0), database.schema_at(None)
        return sorted(old.tables), sorted(now.tables), database.rows_at("t", t0)[("1",)], database.rows_at("t", None)[("1",)]

    before = seen(server)
    assert before == (["t"], ["t", "u"], {"k": "1", "b": "x"}, {"k": "1", "b": None})  # a re-added column starts empty
    server.stop()
    again = LocalSpannerServer(ServerOptions(data_dir=tmp_path, ttl_interval=0))
    try:
        assert seen(again) == before
    finally:
        again.stop()
