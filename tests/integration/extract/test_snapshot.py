"""The initial snapshot: every watched table at T0 (a stale read, partitioned over Spark tasks), exactly once, resumable."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from google.cloud import spanner

from spanner_cdc.cli.main import main
from spanner_cdc.extract.current_state import state_catalog
from spanner_cdc.extract.snapshot import MICROSECOND, run_snapshot
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.lake.snapshot import read_snapshot_marker
from spanner_cdc.lake.state_table import read_state, snapshot_at, state_identifier
from spanner_cdc.orchestration.snapshot_task import first_snapshot
from spanner_cdc.settings import subprocess_env
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(22)]
REPO = Path(__file__).resolve().parents[3]
SEED = 20261123
DDL = [
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Region STRING(10) NOT NULL, Owner STRING(MAX), Balance INT64, Score FLOAT64,"
    " Active BOOL, Opened TIMESTAMP, Tags ARRAY<STRING(MAX)>, Secret STRING(MAX)) PRIMARY KEY (Region, Id)",
    "CREATE TABLE Events (Id INT64 NOT NULL, Kind STRING(MAX)) PRIMARY KEY (Id)",
    "CREATE TABLE Unwatched (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)",
    # Secret is not watched: the snapshot must not read it
    "CREATE CHANGE STREAM Tables FOR Accounts (Owner, Balance, Score, Active, Opened, Tags), Events",
]
STREAM = "Tables"
WATCHED = ["Owner", "Balance", "Score", "Active", "Opened", "Tags"]


def write_history(database: Any, count: int = 40) -> datetime:
    """Rows in both tables, then T0, then updates, deletes and inserts the snapshot must not see; returns T0."""
    opened = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    with database.batch() as batch:
        batch.insert("Accounts", ["Id", "Region", "Owner", "Balance", "Score", "Active", "Opened", "Tags", "Secret"],
                     [[i, f"r{i % 3}", f"o{i}", i * 10, i / 4, i % 2 == 0, opened + timedelta(seconds=i), [f"t{i}", None], "s"]
                      for i in range(count)])  # fmt: skip
        batch.insert("Events", ["Id", "Kind"], [[i, "open"] for i in range(count // 2)])
        batch.insert("Unwatched", ["Id", "V"], [[1, "x"]])
    at = batch.committed
    with database.batch() as later:
        later.update("Accounts", ["Id", "Region", "Balance"], [[i, f"r{i % 3}", -1] for i in range(5)])
        later.delete("Events", spanner.KeySet(keys=[[i] for i in range(3)]))
        later.insert("Events", ["Id", "Kind"], [[1000, "late"]])
    return at


def source_at(database: Any, at: datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """(table, keys JSON) -> watched values, read back at `at` in the change stream's JSON form."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    with database.snapshot(read_timestamp=at, multi_use=True) as snap:
        for row in snap.execute_sql(f"SELECT Region, Id, {', '.join(WATCHED)} FROM Accounts"):
            region, key, owner, balance, score, active, opened, tags = row
            out[("Accounts", json.dumps({"Region": region, "Id": str(key)}, sort_keys=True))] = {
                "Owner": owner, "Balance": str(balance), "Score": score, "Active": active,
                "Opened": opened.isoformat().replace("+00:00", "Z"), "Tags": tags,
            }  # fmt: skip
        for key, kind in snap.execute_sql("SELECT Id, Kind FROM Events"):
            out[("Events", json.dumps({"Id": str(key)}, sort_keys=True))] = {"Kind": kind}
    return out


def lake_rows(layout: LakeLayout) -> list[dict[str, Any]]:
    return [row for path in published_locations(layout.snapshot_location) for row in pq.read_table(path).to_pylist()]


def as_source(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["object"], json.dumps(json.loads(r["keys"]), sort_keys=True)): json.loads(r["new_values"]) for r in rows}


@pytest.fixture
def snapshot_db(make_spanner_database: Any) -> tuple[Any, datetime]:
    database = make_spanner_database(DDL)
    return database, write_history(database)


def test_snapshot_lands_the_watched_columns_at_t0_once_and_extraction_starts_after_it(
    snapshot_db: tuple[Any, datetime], extract_settings: Any, store: MetadataStore, spark: Any
) -> None:
    database, at = snapshot_db
    settings = extract_settings(database.database_id, STREAM)
    # what the hourly DAG's `snapshot` task runs on the first window [at + 1 µs, ...): T0 is just before it
    first = first_snapshot(settings, at + MICROSECOND)
    summary = run_snapshot(settings)  # complete: reads nothing, says what is there
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    rows = lake_rows(layout)
    assert as_source(rows) == source_at(database, at) and len(rows) == 60
    assert first["at"] == summary.to_json()["at"] and sorted(first["tables_read_now"]) == ["Accounts", "Events"]
    assert summary.at == at and summary.tables == {"Accounts": 40, "Events": 20} and summary.read_now == []
    assert {(r["read_method"], r["change_type"], r["commit_timestamp"], r["old_values"]) for r in rows} == {("spanner-snapshot", "INSERT", at, "{}")}
    assert len({r["uuid"] for r in rows}) == 60
    accounts = next(r for r in rows if r["object"] == "Accounts")
    types = {c["name"]: c for c in json.loads(accounts["column_types"])}
    assert accounts["primary_keys"] == ["Region", "Id"] and types["Id"]["ordinal_position"] == 1 and types["Id"]["is_primary_key"]
    assert types["Tags"]["type"] == {"code": "ARRAY", "array_element_type": {"code": "STRING"}} and "Secret" not in types
    files = published_locations(layout.snapshot_location)
    assert len(files) > 2  # partitioned: more than one task's file per table
    marker = read_snapshot_marker(layout)
    assert marker is not None and marker["at"] == summary.to_json()["at"] and marker["rows"] == 60
    assert sorted(layout.location + "/" + f["path"] for f in marker["files"]) == files
    # extraction starts right after T0: a commit at T0 is in the snapshot, never in the change log too
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert {p.start for p in store.partitions(lineage.id)} == {at + MICROSECOND} == {summary.changes_from}
    assert first_snapshot(settings, at + timedelta(hours=1))["skipped"] and lake_rows(layout) == rows


def run_cli(settings: Any, *args: str, kill_after: float | None = None, command: tuple[str, ...] = ("snapshot",), **env: str) -> tuple[int, str]:
    """`spanner-cdc snapshot --json` (or `command`) in a subprocess; SIGKILLed after `kill_after` seconds if still running."""
    process = subprocess.Popen([sys.executable, "-m", "spanner_cdc", *command, *args, "--json"], env=subprocess_env(settings, **env),
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        out, err = process.communicate(timeout=kill_after if kill_after is not None else 600)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
    assert process.returncode in (0, -signal.SIGKILL), err[-4000:]
    return process.returncode, out


def test_snapshot_and_state_jobs_killed_then_rerun_are_exact(
    snapshot_db: tuple[Any, datetime], extract_settings: Any, store: MetadataStore, spark_connect_server: Any
) -> None:
    database, at = snapshot_db
    # state_driver_rows 0: the seed and the window's state are Spark jobs (on Connect), as for a window past it
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url, state_driver_rows=0)
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    # killed after the first table's files landed, before the store knew them: they must not count twice
    code, _ = run_cli(settings, "--at", at.isoformat(), SPANNER_CDC_FAILPOINT="snapshot_after_job:1")
    assert code == -signal.SIGKILL and lake_rows(layout), "the kill should have left landed, uncommitted files"
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert store.snapshot_tables(lineage.id) == {}
    delay = random.Random(SEED).uniform(0.5, 6.0)
    killed, _ = run_cli(settings, kill_after=delay)
    code, out = run_cli(settings)  # no --at: the snapshot begun goes on at its own T0
    assert code == 0, (delay, killed)
    summary = json.loads(out)
    rows = lake_rows(layout)
    assert summary["at"] == at.isoformat().replace("+00:00", "Z") and summary["rows"] == 60 == len(rows) == len({r["uuid"] for r in rows})
    assert as_source(rows) == source_at(database, at)
    marker = read_snapshot_marker(layout)
    assert marker is not None
    committed = {f.path for f in store.snapshot_files(lineage.id)}
    assert committed == {layout.location + "/" + f["path"] for f in marker["files"]} == set(published_locations(layout.snapshot_location))
    # the state job killed after writing the state, before its marker; the re-run writes the same state
    with database.batch() as batch:
        batch.update("Accounts", ["Id", "Region", "Owner"], [[7, "r1", "changed"]])
        batch.delete("Events", spanner.KeySet(keys=[[5]]))
    end = datetime.now(UTC)
    window = ["extract", "--window-start", at.isoformat(), "--window-end", end.isoformat(), "--current-state"]
    killed, _ = run_cli(settings, *window, command=(), SPANNER_CDC_FAILPOINT="state_before_commit:1")
    catalog = state_catalog(settings)
    accounts = catalog.load_table(state_identifier(layout, "Accounts"))
    assert killed == -signal.SIGKILL and snapshot_at(accounts, end) is None  # the window's files written, not committed
    code, out = run_cli(settings, *window, command=())
    assert code == 0 and [s["as_of"] for s in json.loads(out)["current_state"]] == [end.isoformat().replace("+00:00", "Z")]
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for table in ("Accounts", "Events"):
        handle = catalog.load_table(state_identifier(layout, table))
        snapshot_id = snapshot_at(handle, end)
        assert snapshot_id is not None
        keys = [handle.schema().find_field(i).name for i in handle.schema().identifier_field_ids]
        for row in read_state(handle, snapshot_id).to_pylist():
            plain = {c: _as_json(v) for c, v in row.items()}  # the change stream's JSON form of each value
            found[(table, json.dumps({k: plain[k] for k in keys}, sort_keys=True))] = {c: v for c, v in plain.items() if c not in keys}
    assert found == source_at(database, end - MICROSECOND)


def _as_json(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return value


def test_snapshot_times_outside_what_spanner_keeps_are_refused_in_one_line(
    snapshot_db: tuple[Any, datetime], extract_settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    database, at = snapshot_db
    settings = extract_settings(database.database_id, STREAM)
    argv = ["snapshot", "--stream", STREAM, "--namespace", settings.namespace, "--output-root", str(settings.output_root),
            "--project", settings.project, "--instance", settings.instance, "--database", settings.database,
            "--metadata-url", settings.metadata_url, "--json"]  # fmt: skip
    for when, expected in ((at - timedelta(hours=3), "version_retention_period 1h"), (datetime.now(UTC) + timedelta(hours=1), "is in the future")):
        code = main([*argv, "--at", when.isoformat()])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("spanner-cdc: error:")]
        assert code != 0 and len(lines) == 1 and expected in lines[0] and "--at" in lines[0] and "Traceback" not in err, err


def test_snapshot_at_t0_lands_the_schema_of_t0_across_a_dropped_column_and_an_added_table(
    make_spanner_database: Any, extract_settings: Any, spark: Any
) -> None:
    database = make_spanner_database([
        "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), Legacy STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE CHANGE STREAM Everything FOR ALL",
    ])
    with database.batch() as batch:
        batch.insert("Items", ["Id", "Name", "Legacy"], [[i, f"n{i}", f"l{i}"] for i in range(5)])
    at = batch.committed
    database.update_ddl(["ALTER TABLE Items DROP COLUMN Legacy", "CREATE TABLE Later (Id INT64 NOT NULL) PRIMARY KEY (Id)"]).result(60)
    with database.batch() as batch:
        batch.insert("Later", ["Id"], [[1]])
    settings = extract_settings(database.database_id, "Everything")
    argv = ["snapshot", "--stream", "Everything", "--namespace", settings.namespace, "--output-root", str(settings.output_root),
            "--project", settings.project, "--instance", settings.instance, "--database", settings.database,
            "--metadata-url", settings.metadata_url, "--at", at.isoformat(), "--json"]  # fmt: skip
    assert main(argv) == 0
    rows = lake_rows(LakeLayout(settings.output_root, "Everything", settings.namespace))
    assert {r["object"] for r in rows} == {"Items"}  # Later did not exist at T0
    assert sorted((json.loads(r["keys"])["Id"], json.loads(r["new_values"])) for r in rows) == [
        (str(i), {"Name": f"n{i}", "Legacy": f"l{i}"}) for i in range(5)
    ]
