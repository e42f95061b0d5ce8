"""Current-state tables: snapshot + windows of changes (splits, a merge, a column added mid-window) == the source at each window end."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from google.cloud import spanner

from spanner_cdc.extract.current_state import update_current_state
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(120)]
STREAMS = {"NewValues": "NEW_VALUES", "NewRow": "NEW_ROW"}  # the partial-update and whole-row paths
DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64, Score FLOAT64) PRIMARY KEY (Id)",
    *(f"CREATE CHANGE STREAM {name} FOR ALL OPTIONS (value_capture_type = '{capture}')" for name, capture in STREAMS.items()),
]


def source_at(database: Any, at: datetime, columns: list[str]) -> list[dict[str, Any]]:
    with database.snapshot(read_timestamp=at) as snap:
        return [dict(zip(columns, row, strict=True)) for row in snap.execute_sql(f"SELECT {', '.join(columns)} FROM Accounts ORDER BY Id")]


def state_rows(layout: LakeLayout, as_of: datetime) -> tuple[list[str], list[dict[str, Any]]]:
    table = pq.read_table(layout.state_object("Accounts", as_of))
    return table.column_names, table.to_pylist()


def workload(database: Any, local_spanner: Any) -> list[datetime]:
    """Window 1: partial updates, deletes, inserts around a split. Window 2: a column added mid-window, a merge."""
    bounds = [datetime.now(UTC)]
    with database.batch() as b:
        b.update("Accounts", ["Id", "Balance"], [[i, i * 100] for i in range(0, 10, 2)])
        b.delete("Accounts", spanner.KeySet(keys=[[i] for i in (1, 3)]))
        b.insert("Accounts", ["Id", "Owner", "Balance", "Score"], [[100 + i, f"n{i}", i, 0.5] for i in range(5)])
    local_spanner.control.split(database.name, "NewValues")
    with database.batch() as b:
        b.update("Accounts", ["Id", "Owner"], [[0, "renamed"], [100, None]])
        b.insert("Accounts", ["Id", "Owner"], [[1, "back"]])  # deleted earlier in the window, inserted again
    bounds.append(datetime.now(UTC))
    database.update_ddl(["ALTER TABLE Accounts ADD COLUMN Note STRING(MAX)"]).result()
    with database.batch() as b:
        b.update("Accounts", ["Id", "Note"], [[2, "noted"], [101, "x"]])
        b.insert("Accounts", ["Id", "Owner", "Note"], [[200, "late", "new"]])
    local_spanner.control.merge(database.name, "NewValues")
    with database.batch() as b:
        b.delete("Accounts", spanner.KeySet(keys=[[4]]))
        b.update("Accounts", ["Id", "Balance", "Score"], [[2, 7, 1.25]])
    bounds.append(datetime.now(UTC))
    time.sleep(0.01)
    return bounds


def test_the_state_at_each_window_end_is_the_source_read_then_for_each_capture_type(
    make_spanner_database: Any, local_spanner: Any, extract_settings: Any, store: MetadataStore, spark: Any
) -> None:
    database = make_spanner_database(DDL)
    with database.batch() as b:
        b.insert("Accounts", ["Id", "Owner", "Balance", "Score"], [[i, f"o{i}", i, i / 2] for i in range(10)])
    settings = {name: extract_settings(database.database_id, name, namespace=f"ns_{database.database_id}_{name.lower()}") for name in STREAMS}
    snapshots = {name: run_snapshot(s) for name, s in settings.items()}
    bounds = workload(database, local_spanner)
    bounds[0] = min(min(s.at for s in snapshots.values()), bounds[0])
    for name, s in settings.items():
        for start, end in zip(bounds, bounds[1:], strict=False):
            assert run_window(s, start, end).complete
        layout = LakeLayout(s.output_root, name, s.namespace)
        first = update_current_state(s, up_to=bounds[1], keep=2)
        assert [m.as_of for m in first] == bounds[1:2]
        columns, rows = state_rows(layout, bounds[1])
        assert columns == ["Id", "Owner", "Balance", "Score"], name
        assert rows == source_at(database, bounds[1] - timedelta(microseconds=1), columns), name
        # incremental: the second state from the first plus one window; keep=1 deletes the first
        assert [m.as_of for m in update_current_state(s, keep=1)] == bounds[2:]
        columns, rows = state_rows(layout, bounds[2])
        assert columns == ["Id", "Owner", "Balance", "Score", "Note"], name  # the column added mid-window, typed
        assert rows == source_at(database, bounds[2] - timedelta(microseconds=1), columns), name
        assert not Path(layout.state_location("Accounts", bounds[1])).exists()
        assert update_current_state(s, keep=1) == [] and state_rows(layout, bounds[2])[1] == rows  # a re-run: nothing new
