"""Current-state tables: snapshot + windows of changes (splits, a merge, schema changes) == the source at each window end."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from google.cloud import spanner

from spanner_cdc.extract.current_state import fold_state_deletes, state_catalog, update_current_state
from spanner_cdc.extract.maintain import maintain
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import applied_ends, read_state, snapshot_at, state_identifier
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(21)]
# every value capture type: the partial-update paths (NEW_VALUES, OLD_AND_NEW_VALUES) and the whole-row ones
CAPTURES = {"NewValues": "NEW_VALUES", "OldAndNew": "OLD_AND_NEW_VALUES", "NewRow": "NEW_ROW", "NewRowOld": "NEW_ROW_AND_OLD_VALUES"}
ACCOUNTS = ["Id", "Owner", "Balance", "Score", "Amount", "Opened"]  # in the snapshot too, with the dialect's types
LEDGER = ["Id", "Memo", "Amount", "Day", "At", "Ok", "Raw"]  # a table created mid-run, one column of each kind of type


@dataclass(frozen=True)
class Dialect:
    """The database's DDL and identifiers in one dialect; the workload's mutations are the same in both."""

    name: str
    streams: dict[str, str]  # stream name as the extract is given it -> its value capture type

    @property
    def postgres(self) -> bool:
        return self.name == "POSTGRESQL"

    def quote(self, name: str) -> str:
        return f'"{name}"' if self.postgres else f"`{name}`"

    def ddl(self) -> list[str]:
        if self.postgres:
            accounts = ('CREATE TABLE "Accounts" ("Id" bigint NOT NULL, "Owner" varchar, "Balance" bigint, "Score" float8,'
                        ' "Amount" numeric, "Opened" timestamptz, "Legacy" varchar, PRIMARY KEY ("Id"))')  # fmt: skip
            return [accounts, *(f"CREATE CHANGE STREAM {s} FOR ALL WITH (value_capture_type = '{c}')" for s, c in self.streams.items())]
        accounts = ("CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64, Score FLOAT64, Amount NUMERIC,"
                    " Opened TIMESTAMP, Legacy STRING(MAX)) PRIMARY KEY (Id)")  # fmt: skip
        return [accounts, *(f"CREATE CHANGE STREAM {s} FOR ALL OPTIONS (value_capture_type = '{c}')" for s, c in self.streams.items())]

    def add_note(self) -> str:
        return f"ALTER TABLE {self.quote('Accounts')} ADD COLUMN {self.quote('Note')} {'varchar' if self.postgres else 'STRING(MAX)'}"

    def drop_legacy(self) -> str:
        return f"ALTER TABLE {self.quote('Accounts')} DROP COLUMN {self.quote('Legacy')}"

    def create_ledger(self) -> str:
        if self.postgres:
            return ('CREATE TABLE "Ledger" ("Id" bigint NOT NULL, "Memo" varchar, "Amount" numeric, "Day" date, "At" timestamptz,'
                    ' "Ok" boolean, "Raw" bytea, PRIMARY KEY ("Id"))')  # fmt: skip
        return ("CREATE TABLE Ledger (Id INT64 NOT NULL, Memo STRING(MAX), Amount NUMERIC, Day DATE, At TIMESTAMP, Ok BOOL,"
                " Raw BYTES(MAX)) PRIMARY KEY (Id)")  # fmt: skip


GOOGLESQL = Dialect("GOOGLE_STANDARD_SQL", CAPTURES)
# PostgreSQL (its quoted names and its types): the default capture type only, to keep the run short
POSTGRESQL = Dialect("POSTGRESQL", {"oldandnew": "OLD_AND_NEW_VALUES"})


def source_at(database: Any, dialect: Dialect, table: str, at: datetime, columns: list[str]) -> list[dict[str, Any]]:
    """The table's rows read at `at` (a stale read), in key order."""
    sql = f"SELECT {', '.join(map(dialect.quote, columns))} FROM {dialect.quote(table)} ORDER BY {dialect.quote('Id')}"
    with database.snapshot(read_timestamp=at) as snap:
        rows = [dict(zip(columns, row, strict=True)) for row in snap.execute_sql(sql)]
    # the client hands BYTES over as their base64 text: the state holds the bytes themselves
    return [{k: base64.b64decode(v) if isinstance(v, bytes) else v for k, v in row.items()} for row in rows]


def _rows(data: pa.Table) -> tuple[list[str], list[dict[str, Any]]]:
    rows = data.to_pylist()
    amount = data.schema.field("Amount").type if "Amount" in data.column_names else None
    if amount is not None and (pa.types.is_string(amount) or pa.types.is_large_string(amount)):
        # PostgreSQL's numeric has no fixed scale (and NaN): the state keeps its text, the client reads a Decimal
        rows = [{**r, "Amount": None if r["Amount"] is None else Decimal(r["Amount"])} for r in rows]
    return data.column_names, rows


def state_rows(settings: Any, layout: LakeLayout, table: str, as_of: datetime) -> tuple[list[str], list[dict[str, Any]]]:
    """The state table's snapshot of the window ending at `as_of`, read by pyiceberg and by Daft's native Iceberg
    reader (no code of pyiceberg's on its read path): both must give the same rows."""
    import daft

    catalog = state_catalog(settings)
    handle = catalog.load_table(state_identifier(layout, table))
    snapshot_id = snapshot_at(handle, as_of)
    assert snapshot_id is not None, (table, as_of)
    data = read_state(handle, snapshot_id)
    keys = [handle.schema().find_field(i).name for i in handle.schema().identifier_field_ids]
    other = daft.read_iceberg(handle, snapshot_id=snapshot_id).to_arrow()
    other = other.sort_by([(k, "ascending") for k in keys]) if other.num_rows else other
    assert other.column_names == data.column_names and other.to_pylist() == data.to_pylist(), (table, as_of)
    return _rows(data)


def assert_completeness_published(settings: Any, layout: LakeLayout, store: MetadataStore, made: list[Any], tables: list[str]) -> None:
    """Each window's snapshot of each state table carries the window's completeness record in its summary, the
    record its marker has; the window's summary (the current-state asset event's extra) and `lake show`'s entry too."""
    from spanner_cdc.lake.completeness import FIELDS, record_from_summary
    from spanner_cdc.lake.markers import read_marker
    from spanner_cdc.lake.state_table import stream_tables

    windows = {w.end: w for w in store.windows(store.get_lineage(layout.stream, layout.namespace).id)}
    catalog = state_catalog(settings)
    shown = {tuple(t["identifier"]): t for t in stream_tables(catalog, layout)}
    for summary in made:
        marker = read_marker(str(windows[summary.as_of].marker_path))
        assert marker is not None
        record = marker["completeness"]
        assert sorted(record) == sorted(FIELDS) and record["window_end"] == summary.as_of.isoformat()
        assert summary.completeness == record and summary.to_json()["completeness"] == record
        for table in tables:
            handle = catalog.load_table(state_identifier(layout, table))
            snapshot = handle.snapshot_by_id(snapshot_at(handle, summary.as_of))
            assert snapshot is not None and snapshot.summary is not None, (table, summary.as_of)
            assert record_from_summary(snapshot.summary.additional_properties) == record, (table, summary.as_of)
            entry = shown[state_identifier(layout, table)]
            assert [s["completeness"] for s in entry["snapshots"] if s["snapshot_id"] == snapshot.snapshot_id] == [record]


def workload(database: Any, local_spanner: Any, dialect: Dialect) -> tuple[list[datetime], list[dict[str, Any]]]:
    """Window 1: partial updates, deletes, inserts around a split. Window 2: a column added and one dropped, a table
    created (inserts, an update, a delete in it), a merge. Returns the bounds and Accounts read at window 1's end."""
    split_stream = next(iter(dialect.streams))
    bounds = [datetime.now(UTC)]
    with database.batch() as b:
        b.update("Accounts", ["Id", "Balance"], [[i, i * 100] for i in range(0, 10, 2)])
        b.delete("Accounts", spanner.KeySet(keys=[[i] for i in (1, 3)]))
        b.insert("Accounts", ["Id", "Owner", "Balance", "Score", "Legacy"], [[100 + i, f"n{i}", i, 0.5, "l"] for i in range(5)])
    local_spanner.control.split(database.name, split_stream)
    with database.batch() as b:
        b.update("Accounts", ["Id", "Owner", "Legacy"], [[0, "renamed", "z"], [100, None, None]])
        b.insert("Accounts", ["Id", "Owner"], [[1, "back"]])  # deleted earlier in the window, inserted again
    bounds.append(datetime.now(UTC))
    database.update_ddl([dialect.add_note(), dialect.drop_legacy(), dialect.create_ledger()]).result()
    # the stale read at window 1's end, after the DDL: a read at a timestamp uses the schema then (Legacy still there)
    first = source_at(database, dialect, "Accounts", bounds[1] - timedelta(microseconds=1), [*ACCOUNTS, "Legacy"])
    with database.batch() as b:
        b.update("Accounts", ["Id", "Note"], [[2, "noted"], [101, "x"]])
        b.insert("Accounts", ["Id", "Owner", "Note"], [[200, "late", "new"]])
        b.insert("Ledger", LEDGER, [
            [i, f"m{i}", Decimal(f"{i}.125"), date(2026, 11, i + 1), datetime(2026, 11, 24, 1, 2, 3, i * 1001, tzinfo=UTC),
             i % 2 == 0, base64.b64encode(bytes([i, 255]))] for i in range(4)
        ])  # fmt: skip; the client sends BYTES as base64
    local_spanner.control.merge(database.name, split_stream)
    with database.batch() as b:
        b.delete("Accounts", spanner.KeySet(keys=[[4]]))
        b.update("Accounts", ["Id", "Balance", "Score"], [[2, 7, 1.25]])
        b.update("Ledger", ["Id", "Memo", "Ok"], [[1, "changed", None]])
        b.delete("Ledger", spanner.KeySet(keys=[[2]]))
    bounds.append(datetime.now(UTC))
    time.sleep(0.01)
    return bounds, first


@pytest.mark.parametrize("dialect", [GOOGLESQL, POSTGRESQL], ids=["googlesql", "postgresql"])
def test_the_state_at_each_window_end_is_the_source_read_then_for_each_capture_type(
    make_spanner_database: Any, local_spanner: Any, extract_settings: Any, store: MetadataStore, spark: Any, dialect: Dialect
) -> None:
    database = make_spanner_database(dialect.ddl(), dialect.name)
    with database.batch() as b:
        b.insert("Accounts", [*ACCOUNTS, "Legacy"], [
            [i, f"o{i}", i, i / 2, Decimal(i) / 8, datetime(2026, 1, 2, 3, 4, 5, i * 100001, tzinfo=UTC), f"l{i}"] for i in range(10)
        ])  # fmt: skip
    settings = {name: extract_settings(database.database_id, name, namespace=f"ns_{database.database_id}_{name.lower()}") for name in dialect.streams}
    snapshots = {name: run_snapshot(s) for name, s in settings.items()}
    bounds, first_source = workload(database, local_spanner, dialect)
    bounds[0] = min(min(s.at for s in snapshots.values()), bounds[0])
    before = {end: end - timedelta(microseconds=1) for end in bounds[1:]}  # a state holds the commits before its end
    for name, s in settings.items():
        for start, end in zip(bounds, bounds[1:], strict=False):
            assert run_window(s, start, end).complete
        layout = LakeLayout(s.output_root, name, s.namespace)
        first = update_current_state(s, up_to=bounds[1], keep=2)
        # the snapshot (the rows written before T0 are in no window) plus window 1's changes
        assert [m.as_of for m in first] == bounds[1:2] and list(first[0].tables) == ["Accounts"], name  # no Ledger yet
        columns, rows = state_rows(s, layout, "Accounts", bounds[1])
        assert columns == [*ACCOUNTS, "Legacy"], name
        assert rows == first_source, name
        assert first[0].tables == {"Accounts": len(first_source)}, name  # the summary's count: data rows less deletes
        assert_completeness_published(s, layout, store, first, ["Accounts"])
        # incremental: the second window on top of the first; keep=1 expires the first window's snapshot
        second = update_current_state(s, keep=1)
        assert [m.as_of for m in second] == bounds[2:] and sorted(second[0].tables) == ["Accounts", "Ledger"], name
        assert_completeness_published(s, layout, store, second, ["Accounts", "Ledger"])
        columns, rows = state_rows(s, layout, "Accounts", bounds[2])
        assert columns == [*ACCOUNTS, "Note"], name  # the column added mid-window, typed; the dropped one gone
        assert rows == source_at(database, dialect, "Accounts", before[bounds[2]], columns), name
        columns, ledger = state_rows(s, layout, "Ledger", bounds[2])  # the table created mid-window, typed
        assert columns == LEDGER and len(ledger) == 3, name
        assert ledger == source_at(database, dialect, "Ledger", before[bounds[2]], columns), name
        catalog = state_catalog(s)
        accounts = catalog.load_table(state_identifier(layout, "Accounts"))
        assert snapshot_at(accounts, bounds[1]) is None and snapshot_at(accounts, bounds[2]) is not None, name
        assert update_current_state(s, keep=1) == [] and state_rows(s, layout, "Accounts", bounds[2])[1] == rows  # a re-run: nothing new
        # maintenance (`lake maintain`) folds the position deletes into data files: the current snapshot reads the same
        assert "Accounts" in maintain(s).state_tables_folded, name
        accounts = catalog.load_table(state_identifier(layout, "Accounts"))
        assert not any(task.delete_files for task in accounts.scan().plan_files()), name
        current = accounts.current_snapshot()
        assert current is not None and _rows(read_state(accounts, current.snapshot_id))[1] == rows, name
        assert state_rows(s, layout, "Accounts", bounds[2])[1] == rows  # the window's own snapshot reads as before
        assert all(f.snapshot_id is None for f in fold_state_deletes(s)), name  # nothing left to fold
        assert update_current_state(s, keep=1) == [], name  # the fold is no window
        if name == next(iter(settings)):
            # no state left: the snapshot plus the change log alone give the source at each window end again
            for table in ("Accounts", "Ledger"):
                catalog.drop_table(state_identifier(layout, table))
            assert [m.as_of for m in update_current_state(s, keep=2)] == bounds[1:], name
            assert state_rows(s, layout, "Accounts", bounds[1])[1] == first_source and state_rows(s, layout, "Accounts", bounds[2])[1] == rows
            assert state_rows(s, layout, "Ledger", bounds[2])[1] == ledger and "Ledger" not in first[0].tables
            # one snapshot per window, named by its end (keep=2: the seed's, the state at T0, is expired)
            rebuilt = catalog.load_table(state_identifier(layout, "Accounts"))
            assert sorted(applied_ends(rebuilt)) == [b.isoformat() for b in bounds[1:]] and len(rebuilt.snapshots()) == 2, name
            assert sorted(applied_ends(catalog.load_table(state_identifier(layout, "Ledger")))) == [bounds[2].isoformat()], name
