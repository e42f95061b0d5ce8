"""One window end to end over a real schema's features: an interleaved ON DELETE CASCADE table, a stored generated column
and a TTL table. The lake lands exactly the change records the reference describes (the cascade's DELETEs in the parent's
transaction, the generated column with the columns it is computed from, the TTL delete as a system transaction), and the
current state at the window end equals a stale read of the source (the expired row gone)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.extract.current_state import state_catalog, update_current_state
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import read_state, snapshot_at, state_identifier
from spanner_cdc.store import MetadataStore
from tests.integration.extract.lake_reading import published_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(10)]
DDL = [
    "CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX), Shout STRING(MAX) AS (Name || '!') STORED) PRIMARY KEY (SingerId)",
    "CREATE TABLE Albums (SingerId INT64 NOT NULL, AlbumId INT64 NOT NULL, Title STRING(MAX)) PRIMARY KEY (SingerId, AlbumId), "
    "INTERLEAVE IN PARENT Singers ON DELETE CASCADE",
    "CREATE TABLE Events (Id INT64 NOT NULL, At TIMESTAMP, Kind STRING(MAX)) PRIMARY KEY (Id), ROW DELETION POLICY (OLDER_THAN(At, INTERVAL 1 DAY))",
    "CREATE CHANGE STREAM Everything FOR ALL",
]
COLUMNS = {"Singers": ["SingerId", "Name", "Shout"], "Albums": ["SingerId", "AlbumId", "Title"], "Events": ["Id", "At", "Kind"]}


def source_at(database: Any, table: str, at: datetime) -> list[dict[str, Any]]:
    columns = COLUMNS[table]
    with database.snapshot(read_timestamp=at) as snap:
        rows = [dict(zip(columns, row, strict=True)) for row in snap.execute_sql(f"SELECT {', '.join(columns)} FROM {table}")]
    return sorted(rows, key=lambda r: [r[c] for c in columns[:2]])


def test_cascade_generated_column_and_ttl_land_as_the_reference_describes(
    make_spanner_database: Any, local_spanner: Any, extract_settings: Any, store: MetadataStore, spark: Any
) -> None:
    database = make_spanner_database(DDL)
    now = datetime.now(UTC)
    with database.batch() as b:
        b.insert("Singers", ["SingerId", "Name"], [[1, "ann"], [2, "bo"]])
        b.insert("Albums", ["SingerId", "AlbumId", "Title"], [[1, 1, "a"], [1, 2, "b"], [2, 1, "c"]])
        b.insert("Events", ["Id", "At", "Kind"], [[1, now, "fresh"]])
    settings = extract_settings(database.database_id, "Everything")
    start = run_snapshot(settings).at
    with database.batch() as b:
        b.insert("Events", ["Id", "At", "Kind"], [[2, now - timedelta(days=2), "expired"]])
    local_spanner.control.sweep_ttl()  # the server's own sweeper may have come first: the same system transaction
    database.run_in_transaction(lambda t: t.update("Singers", ["SingerId", "Name"], [[2, "bea"]]))
    database.run_in_transaction(lambda t: t.delete("Singers", spanner.KeySet(keys=[[1]])))
    with database.batch() as b:
        b.insert("Albums", ["SingerId", "AlbumId", "Title"], [[2, 2, "d"]])
    end = datetime.now(UTC)
    assert run_window(settings, start + timedelta(microseconds=1), end).complete

    layout = LakeLayout(settings.output_root, "Everything", settings.namespace)
    rows = [r for r in published_rows(layout.root) if r["read_method"] != "spanner-snapshot"]
    landed = sorted((r["object"], r["change_type"], r["keys"], r["new_values"], r["old_values"], r["is_system_transaction"]) for r in rows)

    def js(**values: Any) -> str:
        return json.dumps(values, sort_keys=True, separators=(",", ":"))

    def canonical(text: str) -> str:
        return js(**json.loads(text))

    expired_at = json.loads(next(r["new_values"] for r in rows if r["object"] == "Events" and r["change_type"] == "INSERT"))["At"]
    assert [(o, c, canonical(k), canonical(n), canonical(v), s) for o, c, k, n, v, s in landed] == sorted([
        ("Events", "INSERT", js(Id="2"), js(At=expired_at, Kind="expired"), js(), False),
        ("Events", "DELETE", js(Id="2"), js(), js(At=expired_at, Kind="expired"), True),  # the TTL delete: a system transaction
        ("Singers", "UPDATE", js(SingerId="2"), js(Name="bea", Shout="bea!"), js(Name="bo", Shout="bo!"), False),
        ("Singers", "DELETE", js(SingerId="1"), js(), js(Name="ann", Shout="ann!"), False),
        ("Albums", "DELETE", js(SingerId="1", AlbumId="1"), js(), js(Title="a"), False),
        ("Albums", "DELETE", js(SingerId="1", AlbumId="2"), js(), js(Title="b"), False),
        ("Albums", "INSERT", js(SingerId="2", AlbumId="2"), js(Title="d"), js(), False),
    ])
    cascade = {r["server_transaction_id"] for r in rows if r["change_type"] == "DELETE" and r["object"] in ("Singers", "Albums")}
    assert len(cascade) == 1  # the children's DELETEs are in the parent's transaction

    (state,) = update_current_state(settings)
    assert state.as_of == end
    before = end - timedelta(microseconds=1)
    catalog = state_catalog(settings)
    for table in COLUMNS:  # the state table's snapshot of the window (Iceberg), row for row a stale read at end - 1 µs
        handle = catalog.load_table(state_identifier(layout, table))
        snapshot_id = snapshot_at(handle, end)
        assert snapshot_id is not None, table
        got = sorted(read_state(handle, snapshot_id).select(COLUMNS[table]).to_pylist(), key=lambda r: [r[c] for c in COLUMNS[table][:2]])
        assert got == source_at(database, table, before), table
