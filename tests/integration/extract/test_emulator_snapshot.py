"""On Google's Spanner emulator, a FOR ALL, a table-limited and a column-limited stream in both dialects: the initial
snapshot, a window of changes and the current-state tables equal the source read at each time, and `verify` agrees."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.extract.current_state import state_catalog, update_current_state
from spanner_cdc.extract.snapshot import MICROSECOND, run_snapshot
from spanner_cdc.extract.verify import run_verify
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.lake.state_table import read_state, snapshot_at, state_identifier
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(80)]
GOOGLE_STANDARD_SQL, POSTGRESQL = "GOOGLE_STANDARD_SQL", "POSTGRESQL"
# lower-case names work unquoted in both dialects; TIMESTAMPs in whole seconds (the emulator truncates them in mods)
TABLES = {
    "accounts": {"id": ("INT64", "bigint"), "owner": ("STRING(MAX)", "varchar"), "balance": ("INT64", "bigint"),
                 "score": ("FLOAT64", "float8"), "opened": ("TIMESTAMP", "timestamptz"), "tags": ("ARRAY<STRING(MAX)>", "varchar[]")},
    "events": {"id": ("INT64", "bigint"), "kind": ("STRING(MAX)", "varchar")},
    "unwatched": {"id": ("INT64", "bigint"), "v": ("STRING(MAX)", "varchar")},
}  # fmt: skip
# at most three streams may watch a table: accounts is watched by all three
STREAMS = {
    "everything": ("FOR ALL", {table: [c for c in columns if c != "id"] for table, columns in TABLES.items()}),
    "some_tables": ("FOR accounts, events", {"accounts": ["owner", "balance", "score", "opened", "tags"], "events": ["kind"]}),
    "some_columns": ("FOR accounts(owner, balance)", {"accounts": ["owner", "balance"]}),
}
OPENED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def ddl(dialect: str) -> list[str]:
    statements = []
    for table, columns in TABLES.items():
        if dialect == POSTGRESQL:
            body = ", ".join(f"{c} {pg}{' NOT NULL' if c == 'id' else ''}" for c, (_, pg) in columns.items())
            statements.append(f"CREATE TABLE {table} ({body}, PRIMARY KEY (id))")
        else:
            body = ", ".join(f"{c} {gsql}{' NOT NULL' if c == 'id' else ''}" for c, (gsql, _) in columns.items())
            statements.append(f"CREATE TABLE {table} ({body}) PRIMARY KEY (id)")
    return statements + [f"CREATE CHANGE STREAM {name} {scope}" for name, (scope, _) in STREAMS.items()]


def write_history(database: Any) -> None:
    with database.batch() as batch:
        batch.insert("accounts", list(TABLES["accounts"]), [
            [i, f"o{i}", i * 10, i / 4, OPENED + timedelta(seconds=i), [f"t{i}", "x"]] for i in range(30)
        ])  # fmt: skip
        batch.insert("events", ["id", "kind"], [[i, "open"] for i in range(12)])
        batch.insert("unwatched", ["id", "v"], [[i, "u"] for i in range(3)])


def write_changes(database: Any) -> None:
    """Updates of watched and unwatched columns, deletes and inserts in every table."""
    with database.batch() as batch:
        batch.update("accounts", ["id", "balance", "opened"], [[i, -i, OPENED + timedelta(days=1)] for i in range(0, 30, 4)])
        batch.update("accounts", ["id", "score", "tags"], [[i, None, []] for i in range(1, 30, 5)])
        batch.delete("accounts", spanner.KeySet(keys=[[2], [3]]))
        batch.insert("accounts", ["id", "owner"], [[100, "new"]])
        batch.update("events", ["id", "kind"], [[1, "closed"]])
        batch.delete("events", spanner.KeySet(keys=[[5]]))
        batch.insert("unwatched", ["id", "v"], [[10, "late"]])
    with database.batch() as batch:
        batch.update("accounts", ["id", "owner"], [[i, f"renamed{i}"] for i in range(10, 20)])
        batch.insert("events", ["id", "kind"], [[50, "late"]])


def source_at(database: Any, at: datetime, watched: dict[str, list[str]]) -> dict[str, dict[int, dict[str, Any]]]:
    """table -> id -> watched values, read at `at`."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    with database.snapshot(read_timestamp=at, multi_use=True) as snap:
        for table, columns in watched.items():
            rows = snap.execute_sql(f"SELECT id, {', '.join(columns)} FROM {table}")
            out[table] = {row[0]: dict(zip(columns, row[1:], strict=True)) for row in rows}
    return out


def snapshot_rows(layout: LakeLayout) -> dict[str, dict[int, dict[str, Any]]]:
    """table -> id -> new values of the snapshot's lake rows (the change stream's JSON form, read back to the client's)."""
    import pyarrow.parquet as pq

    out: dict[str, dict[int, dict[str, Any]]] = {}
    for path in published_locations(layout.snapshot_location):
        for row in pq.read_table(path).to_pylist():
            values = json.loads(row["new_values"])
            for name, value in values.items():
                if name == "balance" and value is not None:
                    values[name] = int(value)
                elif name == "opened" and value is not None:
                    values[name] = datetime.fromisoformat(value.replace("Z", "+00:00"))
            out.setdefault(row["object"], {})[int(json.loads(row["keys"])["id"])] = values
    return out


def state_at(settings: Any, layout: LakeLayout, tables: list[str], end: datetime) -> dict[str, dict[int, dict[str, Any]]]:
    catalog = state_catalog(settings)
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for table in tables:
        handle = catalog.load_table(state_identifier(layout, table))
        snapshot_id = snapshot_at(handle, end)
        assert snapshot_id is not None, (table, end)
        out[table] = {row.pop("id"): row for row in read_state(handle, snapshot_id).to_pylist()}
    return out


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_snapshot_window_and_state_of_each_kind_of_stream_equal_the_source_and_verify_clean(
    dialect: str, make_emulator_database: Any, emulator_settings: Any, store: MetadataStore, spark: Any
) -> None:
    database = make_emulator_database(ddl(dialect), dialect)
    write_history(database)
    settings = {name: emulator_settings(database.database_id, name) for name in STREAMS}  # dialect auto
    snapshots = {name: run_snapshot(s) for name, s in settings.items()}
    write_changes(database)
    end = datetime.now(UTC)
    time.sleep(0.01)
    for name, s in settings.items():
        watched = STREAMS[name][1]
        layout = LakeLayout(s.output_root, name, s.namespace)
        at = snapshots[name].at
        # the snapshot: each watched table, its watched columns only, as the source was at T0
        assert sorted(snapshots[name].tables) == sorted(watched), name
        assert snapshot_rows(layout) == source_at(database, at, watched), name
        window = run_window(s, at, end)
        assert window.complete and window.transaction_check["ok"] and window.records > 0, (name, window)
        [state] = update_current_state(s)
        assert state.as_of == end and sorted(state.tables) == sorted(watched), (name, state)
        assert state_at(s, layout, list(watched), end) == source_at(database, end - MICROSECOND, watched), name
        result = run_verify(s)
        assert result.ok and result.mismatches == 0, (name, result)
        assert sorted(t.table for t in result.tables) == sorted(watched), name
        assert all(t.lake_rows == t.source_rows == len(source_at(database, end - MICROSECOND, {t.table: ["id"]})[t.table])
                   for t in result.tables), (name, result.tables)  # fmt: skip
        assert result.change_log is not None and result.change_log.checked, name
        assert result.change_log.source_rows == result.change_log.lake_rows == window.records, (name, result.change_log)
