"""The DAGs end to end with dag.test(): hourly windows through splits and merges, a backfill, refused backfill forms."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack.demo_summary import lake_identities, lake_uuids, published_files
from spanner_cdc.devstack.demo_truth import truth_identities
from spanner_cdc.store import MetadataStore
from tests.integration.dags.conftest import (
    CHANGE_STREAM,
    DATABASE,
    HOUR,
    INSTANCE,
    MUTABLE_NAME,
    MUTABLE_STREAM,
    PROJECT,
    STREAM_NAME,
    Stack,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(86)]

HOURLY = f"spanner_cdc_hourly__{STREAM_NAME}"
MUTABLE_HOURLY = f"spanner_cdc_hourly__{MUTABLE_NAME}"
WORKLOAD_SECONDS = 12.0
SEED_TRANSACTIONS = 20


@dataclass
class History:
    windows: list[tuple[dt.datetime, dt.datetime]]  # the two hours the workload wrote
    ground_truth: Path
    host: str
    database: Any = None  # the real client's Database on the local server (runs until the module ends)

    @property
    def runs(self) -> list[tuple[dt.datetime, dt.datetime]]:
        """The hourly runs: the two windows and the next hour, whose run finishes a window left open."""
        return [*self.windows, (self.windows[-1][1], self.windows[-1][1] + HOUR)]


def _server_now(server: Any) -> dt.datetime:
    return dt.datetime.fromisoformat(str(server.control.status()["now"]).replace("Z", "+00:00"))


def _wait_until(server: Any, when: dt.datetime, rate: float) -> None:
    import time

    while (now := _server_now(server)) < when:
        time.sleep(max(0.05, (when - now).total_seconds() / rate))


@pytest.fixture(scope="module")
def history(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    """Two past hours of changes, written by the workload while the server splits and merges partitions."""
    from spanner_cdc.devstack import workload
    from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database

    # The clock starts early enough that the stream exists before the first window whatever the start-up
    # takes; the two windows are the first whole hours after that, and end before the wall clock's hour.
    clock_start = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0) - 4 * HOUR
    rate = 2 * 3600 * 0.9 / WORKLOAD_SECONDS  # the workload ends inside the second window
    data = tmp_path_factory.mktemp("spanner")
    with LocalSpanner(data_dir=data, clock_start=clock_start, clock_rate=rate, log_path=data / "server.log") as server:
        database = create_database(server.host, PROJECT, INSTANCE, DATABASE)
        workload.setup_database(database, "GOOGLE_STANDARD_SQL", CHANGE_STREAM, "OLD_AND_NEW_VALUES")
        database.update_ddl([
            f"CREATE CHANGE STREAM {MUTABLE_STREAM} FOR ALL OPTIONS (partition_mode = 'MUTABLE_KEY_RANGE')",
            # the orders stream's snapshot reads the tables at the first window's start, hours of server time back
            f"ALTER DATABASE {DATABASE} SET OPTIONS (version_retention_period = '7d')",
        ]).result(120)
        # rows that exist before the first window: the snapshot's content (their changes are in no window)
        workload.run_workload(database, transactions=SEED_TRANSACTIONS, seed=5, ground_truth=data / "seed_truth.jsonl")
        now = _server_now(server)
        first = now.replace(minute=0, second=0, microsecond=0) + HOUR
        windows = [(first, first + HOUR), (first + HOUR, first + 2 * HOUR)]
        _wait_until(server, first, rate)
        ground_truth = data / "ground_truth.jsonl"
        workload.run_workload(database, transactions=240, tx_per_second=240 / WORKLOAD_SECONDS, seed=11,
                              ground_truth=ground_truth)
        _wait_until(server, windows[-1][1] + HOUR + dt.timedelta(minutes=1), rate)
        # Real time from here on (the clock resumes from where it was): at the accelerated rate the
        # history would leave the stream's one-day retention while the DAGs run.
        server.clock_start, server.clock_rate = None, 1.0
        server.restart()
        config = stack.home / "streams.toml"
        write_config(config, first)
        stack.extra.update({
            "SPANNER_CDC_CONFIG": str(config),
            "SPANNER_EMULATOR_HOST": server.host,
            "SPANNER_CDC_METADATA_URL": stack.lineage_url,
            "SPANNER_CDC_OUTPUT_ROOT": str(stack.lake),
            "SPANNER_CDC_SPARK_MASTER": "local[2]",
            # each close commits its window to the store's Iceberg catalog, with the window's completeness record
            "SPANNER_CDC_ICEBERG_CATALOG": "store",
            # One mapped task per wave: more ready tokens than max_map_length go several to a task.
            "AIRFLOW__CORE__MAX_MAP_LENGTH": "1",
        })
        yield History(windows=windows, ground_truth=ground_truth, host=server.host, database=database)


def _lineage_snapshot(url: str, namespace: str) -> dict[str, Any]:
    with MetadataStore.connect(url) as store:
        lineage = store.get_lineage(CHANGE_STREAM, namespace)
        return {
            "partitions": sorted(store.partitions(lineage.id), key=lambda p: p.token),
            "windows": store.windows(lineage.id),
            "manifest": sorted(f.path for f in store.manifest(lineage.id)),
        }


@pytest.fixture(scope="module")
def all_hourly_runs(stack: Stack, history: History) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The hourly runs of both streams in one child process: (orders: the three runs, moving: the two windows)."""
    jobs = [
        {"dag_id": HOURLY, "windows": [[s.isoformat(), e.isoformat()] for s, e in history.runs]},
        {"dag_id": MUTABLE_HOURLY, "windows": [[s.isoformat(), e.isoformat()] for s, e in history.windows]},
    ]
    runs = stack.run(jobs, "hourly")
    return runs[: len(history.runs)], runs[len(history.runs) :]


@pytest.fixture(scope="module")
def hourly_runs(all_hourly_runs: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return all_hourly_runs[0]


def _rows_in(files: list[str], start: dt.datetime, end: dt.datetime) -> list[Any]:
    return [row for row in lake_identities(files) if start.isoformat() <= row[2] < end.isoformat()]


def test_two_hourly_windows_through_a_split_and_a_merge_land_the_ground_truth(
    stack: Stack, history: History, hourly_runs: list[dict[str, Any]]
) -> None:
    assert [run["state"] for run in hourly_runs] == ["success"] * 3, stack.log_path("hourly")
    for run, (start, end) in zip(hourly_runs, history.runs, strict=True):
        # the scheduler's logical date for the window (its start), so Airflow's backfill re-runs this very run
        assert (run["logical_date"], run["data_interval_start"], run["data_interval_end"]) == (
            start.isoformat(), start.isoformat(), end.isoformat())  # fmt: skip
    live = _lineage_snapshot(stack.lineage_url, "live")
    # The lineage went through at least one split (a parent with several children) and one merge.
    with MetadataStore.connect(stack.lineage_url) as store:
        edges = store.graph(store.get_lineage(CHANGE_STREAM, "live").id).edges
    assert any(n > 1 for n in Counter(p for p, _ in edges).values()), "no split happened"
    assert any(n > 1 for n in Counter(c for _, c in edges).values()), "no merge happened"
    states = {(w.start, w.end): w.state for w in live["windows"]}
    assert [states.get(window) for window in history.windows] == ["COMPLETE", "COMPLETE"]
    files = published_files(stack.lake / CHANGE_STREAM / "live")
    start, end = history.windows[0][0], history.windows[-1][1]
    expected, _ = truth_identities(history.ground_truth, start, end)
    assert expected, "the workload wrote nothing in the windows"
    assert Counter(_rows_in(files, start, end)) == Counter(expected)
    uuids = lake_uuids(files)
    assert len(uuids) == len(set(uuids))
    assert sum(w.records or 0 for w in live["windows"] if (w.start, w.end) in history.windows) == len(expected)
    # Every row landed in the window of its commit timestamp, also when a later run finished the window.
    import pyarrow.parquet as pq

    for path in files:
        table = pq.read_table(path, columns=["commit_timestamp", "window_start", "window_end"]).to_pylist()
        assert all(r["window_start"] <= r["commit_timestamp"] < r["window_end"] for r in table), path
    # Waves: children of the window's splits and merges were read in the same run, by later waves.
    assert any(key.startswith("wave_2.extract[") for run in hourly_runs for key in run["tasks"])
    # Over max_map_length (1 here) a mapped task extracts several tokens; the UI label says how many.
    extracts = [key for run in hourly_runs for key in run["tasks"] if ".extract[" in key]
    assert all(".extract[0]" in key for key in extracts)
    assert any("more token" in key for key in extracts)
    # With two waves a window was left open by its run (close skipped) and finished by the next one's catch_up.
    left_open = [i for i, run in enumerate(hourly_runs[:2]) if run["tasks"]["close"] == "skipped"]
    assert left_open, "every window closed in its own run: the catch_up path was not exercised"
    assert all(hourly_runs[i + 1]["tasks"]["catch_up"] == "success" for i in left_open)


def test_the_same_dag_reads_a_mutable_key_range_stream_with_no_setting_for_the_mode(
    stack: Stack, history: History, all_hourly_runs: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> None:
    """A second stream over the same tables in MUTABLE_KEY_RANGE mode (its config names no mode): the same
    hourly DAG lands the same changes, its partitions are long-lived and key range moves are kept as edges."""
    import sqlalchemy as sa

    runs = all_hourly_runs[1]
    assert [(run["dag_id"], run["state"]) for run in runs] == [(MUTABLE_HOURLY, "success")] * 2, stack.log_path("hourly")
    with MetadataStore.connect(stack.lineage_url) as store:
        lineage = store.get_lineage(MUTABLE_STREAM, "live")
        states = {(w.start, w.end): w.state for w in store.windows(lineage.id)}
        partitions = store.partitions(lineage.id)
    assert [states.get(window) for window in history.windows] == ["COMPLETE", "COMPLETE"]
    assert partitions and all(not p.parents for p in partitions)
    with sa.create_engine(stack.lineage_url).connect() as conn:
        moved_at = conn.execute(
            sa.text("SELECT moved_at FROM cdc_partition_moves WHERE lineage_id = :id"), {"id": lineage.id}
        ).scalars().all()
    start, end = history.windows[0][0], history.windows[-1][1]
    assert any(start <= at < end for at in moved_at), "no key range moved during the windows"
    expected, _ = truth_identities(history.ground_truth, start, end)
    files = published_files(stack.lake / MUTABLE_STREAM / "live")
    assert Counter(_rows_in(files, start, end)) == Counter(expected)
    uuids = lake_uuids(files)
    assert len(uuids) == len(set(uuids))


def _asset_events(stack: Stack) -> list[dict[str, Any]]:
    import sqlalchemy as sa

    engine = sa.create_engine(stack.env.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT a.name, e.extra, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id "
                "ORDER BY e.timestamp"
            ))
            return [{"asset": r[0], "extra": r[1] if isinstance(r[1], dict) else json.loads(r[1]), "task": r[2]} for r in rows]
    finally:
        engine.dispose()


def test_each_complete_window_emits_one_asset_event_with_its_bounds_and_counts(
    stack: Stack, history: History, hourly_runs: list[dict[str, Any]]
) -> None:
    events = [e for e in _asset_events(stack) if e["asset"] == f"spanner_cdc_landed__{STREAM_NAME}"]
    live = _lineage_snapshot(stack.lineage_url, "live")
    complete = {(w.start.isoformat(), w.end.isoformat()): w for w in live["windows"] if w.state == "COMPLETE"}
    by_window = Counter((e["extra"]["window_start"], e["extra"]["window_end"]) for e in events)
    assert by_window == Counter(complete.keys())  # one event per complete window, from close or catch_up
    for event in events:
        window = complete[(event["extra"]["window_start"], event["extra"]["window_end"])]
        assert (event["extra"]["records"], event["extra"]["files"]) == (window.records, window.files)
        assert event["extra"]["namespace"] == "live" and event["task"] in ("close", "catch_up")
    assert any(e["task"] == "catch_up" for e in events), "no window was finished by a later run"


def test_each_windows_completeness_record_is_the_same_in_its_marker_snapshots_asset_events_and_lake_show(
    stack: Stack, history: History, hourly_runs: list[dict[str, Any]]
) -> None:
    from spanner_cdc.cli.main import main
    from spanner_cdc.devstack.workload_schema import TABLES
    from spanner_cdc.lake.completeness import FIELDS, record_from_summary
    from spanner_cdc.lake.iceberg import catalog_properties, open_catalog
    from spanner_cdc.lake.state_table import snapshot_at

    events = {
        (e["extra"]["window_start"], e["extra"]["window_end"]): e["extra"]["completeness"]
        for e in _asset_events(stack) if e["asset"] == f"spanner_cdc_landed__{STREAM_NAME}"
    }  # fmt: skip
    out = stack.home / "lake-show.json"
    argv = ["lake", "show", "--stream", CHANGE_STREAM, "--metadata-url", stack.lineage_url, "--output-root", str(stack.lake), "--json"]
    with out.open("w") as handle, contextlib.redirect_stdout(handle):
        assert main(argv) == 0
    listed = json.loads(out.read_text())
    shown = {(s["window_start"], s["window_end"]): s["completeness"] for s in listed["snapshots"]}
    # each current-state table's window snapshots, as `lake show` lists them and as their Iceberg summaries carry them
    state_tables = [t for t in listed["tables"] if t["kind"] == "current_state"]
    assert sorted(t["source_table"] for t in state_tables) == sorted(t.name for t in TABLES)
    catalog = open_catalog(catalog_properties("store", metadata_url=stack.lineage_url, warehouse=str(stack.lake)))
    handles = {t["source_table"]: catalog.load_table(tuple(t["identifier"])) for t in state_tables}
    state_events = {e["extra"]["as_of"]: e["extra"]["completeness"] for e in _asset_events(stack)
                    if e["asset"] == f"spanner_cdc_current_state__{STREAM_NAME}"}  # fmt: skip
    complete = [w for w in _lineage_snapshot(stack.lineage_url, "live")["windows"] if w.state == "COMPLETE"]
    assert len(complete) >= 2
    rows: dict[tuple[str, str], int] = {}
    for window in complete:
        key = (window.start.isoformat(), window.end.isoformat())
        marker = json.loads(Path(str(window.marker_path)).read_text())["completeness"]
        assert sorted(marker) == sorted(FIELDS) and (marker["window_start"], marker["window_end"]) == key
        assert marker["transaction_check"] == "passed"
        assert events[key] == marker and shown[key] == marker, key
        assert state_events[_z(window.end)] == marker, key  # the current-state asset event of the window
        for table in state_tables:
            snapshot = handles[table["source_table"]].snapshot_by_id(snapshot_at(handles[table["source_table"]], window.end))
            assert snapshot is not None and snapshot.summary is not None, (table["source_table"], key)
            assert record_from_summary(snapshot.summary.additional_properties) == marker, (table["source_table"], key)
            listed_snapshot = [s for s in table["snapshots"] if s["snapshot_id"] == snapshot.snapshot_id]
            assert [s["completeness"] for s in listed_snapshot] == [marker], (table["source_table"], key)
        rows[key] = marker["rows"]
    # the workload's two hours have changes; the hour after (its run finishes a window left open) may have none
    assert all(rows[(s.isoformat(), e.isoformat())] > 0 for s, e in history.windows)


def _z(value: dt.datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _xcoms(stack: Stack, dag_id: str, task_id: str) -> dict[str, Any]:
    """The task's return values by run id, from Airflow's metadata DB."""
    import sqlalchemy as sa

    engine = sa.create_engine(stack.env.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT run_id, value FROM xcom WHERE dag_id = :d AND task_id = :t AND key = 'return_value'"),
                {"d": dag_id, "t": task_id},
            )
            values = {}
            for run_id, value in rows:
                while isinstance(value, str):  # JSON text, however many times the column's type wrapped it
                    value = json.loads(value)
                values[run_id] = value
            return values
    finally:
        engine.dispose()


def _source_rows(database: Any, table: Any, at: dt.datetime) -> list[dict[str, Any]]:
    """The table read through the real client at `at` (a stale read), values as a change stream carries them."""
    from spanner_cdc.devstack.workload_schema import encode

    columns = [*table.keys, *table.values]
    with database.snapshot(read_timestamp=at) as snap:
        found = list(snap.execute_sql(f"SELECT {', '.join(c.name for c in columns)} FROM {table.name}"))
    return [{c.name: encode(c.type, v) for c, v in zip(columns, values, strict=True)} for values in found]


def _state_rows(handle: Any, snapshot_id: int, table: Any) -> list[dict[str, Any]]:
    """A current-state table's typed rows at a snapshot, encoded as _source_rows does (BYTES are raw there, base64
    from the client)."""
    import base64

    from spanner_cdc.devstack.workload_schema import encode
    from spanner_cdc.lake.state_table import read_state

    columns = [*table.keys, *table.values]
    data = read_state(handle, snapshot_id)
    assert data.column_names == [c.name for c in columns], table.name  # named as in Spanner, keys first
    return [
        {c.name: base64.b64encode(r[c.name]).decode() if c.type == "BYTES" and r[c.name] is not None else encode(c.type, r[c.name])
         for c in columns}
        for r in data.to_pylist()
    ]  # fmt: skip


def _by_key(table: Any, rows: list[dict[str, Any]], *, values_only: bool = False) -> dict[str, str]:
    """Rows by their key, each compared by column type (demo_truth.canonical)."""
    from spanner_cdc.devstack.demo_truth import canonical

    keys = [c.name for c in table.keys]
    by_key = {
        canonical(table.name, {k: r[k] for k in keys}): canonical(table.name, {k: v for k, v in r.items() if not (values_only and k in keys)})
        for r in rows
    }  # fmt: skip
    assert len(by_key) == len(rows), f"a key twice in {table.name}"
    return by_key


def test_the_first_run_snapshots_the_watched_tables_just_before_its_window_and_later_runs_skip_it(
    stack: Stack, history: History, hourly_runs: list[dict[str, Any]]
) -> None:
    import pyarrow.parquet as pq

    from spanner_cdc.devstack.demo_truth import canonical
    from spanner_cdc.devstack.workload_schema import TABLES
    from spanner_cdc.extract.snapshot import MICROSECOND
    from spanner_cdc.lake.layout import LakeLayout

    assert [run["tasks"]["snapshot"] for run in hourly_runs] == ["success"] * 3, stack.log_path("hourly")
    returned = _xcoms(stack, HOURLY, "snapshot")
    first, *later = (returned[run["run_id"]] for run in hourly_runs)
    at = history.windows[0][0] - MICROSECOND  # T0: the first window holds every later change
    assert (first["at"], first["changes_from"]) == (_z(at), _z(history.windows[0][0]))
    assert all(r.get("skipped") == "the snapshot is complete" and r["at"] == at.isoformat() for r in later), later
    layout = LakeLayout(stack.lake, CHANGE_STREAM, "live")
    marker = json.loads(Path(layout.snapshot_marker_location).read_text())
    assert marker["at"] == first["at"] and marker["tables"] == first["tables"]
    assert sorted(marker["tables"]) == sorted(t.name for t in TABLES) and marker["rows"] > 0
    for table in TABLES:  # the snapshot's rows are the source read at T0, row for row and value for value
        files = [layout.location + "/" + f["path"] for f in marker["files"] if f["table"] == table.name]
        rows = [r for path in files for r in pq.read_table(path).to_pylist()]
        assert {r["read_method"] for r in rows} <= {"spanner-snapshot"} and {r["change_type"] for r in rows} <= {"INSERT"}
        assert all(r["commit_timestamp"] == at for r in rows)
        landed = {canonical(table.name, r["keys"]): canonical(table.name, r["new_values"]) for r in rows}
        assert len(landed) == len(rows) == marker["tables"][table.name]
        assert landed == _by_key(table, _source_rows(history.database, table, at), values_only=True), table.name


def test_each_closed_window_gets_a_current_state_equal_to_the_source_at_its_end_and_one_asset_event(
    stack: Stack, history: History, hourly_runs: list[dict[str, Any]]
) -> None:
    from spanner_cdc.devstack.workload_schema import TABLES
    from spanner_cdc.extract.snapshot import MICROSECOND
    from spanner_cdc.lake.iceberg import catalog_properties, open_catalog
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.lake.state_table import snapshot_at, state_identifier

    layout = LakeLayout(stack.lake, CHANGE_STREAM, "live")
    with MetadataStore.connect(stack.lineage_url) as store:
        closed = sorted(w.end for w in store.windows(store.get_lineage(CHANGE_STREAM, "live").id) if w.state == "COMPLETE")
    assert {end for _, end in history.windows} <= set(closed), closed
    # the runs' return values: every closed window's state once, oldest first, also when a later run closed it
    by_run = _xcoms(stack, HOURLY, "current_state")
    made = [s for run in hourly_runs for s in by_run.get(run["run_id"], [])]
    caught_up = _xcoms(stack, HOURLY, "catch_up")
    for run in hourly_runs:  # a run's states: the windows its catch_up closed, then its own if its close did
        ends = [c["window_end"] for c in caught_up.get(run["run_id"], [])]
        ends += [run["data_interval_end"]] if run["tasks"]["close"] == "success" else []
        assert [s["as_of"] for s in by_run.get(run["run_id"], [])] == [_z(dt.datetime.fromisoformat(e)) for e in ends], run
    # also when the run's own window was left open (close skipped): the states of the windows its catch_up closed
    assert any(run["tasks"]["close"] == "skipped" and by_run.get(run["run_id"]) for run in hourly_runs)
    assert [s["as_of"] for s in made] == [_z(end) for end in closed]
    catalog = open_catalog(catalog_properties("store", metadata_url=stack.lineage_url, warehouse=str(stack.lake)))
    handles = {t.name: catalog.load_table(state_identifier(layout, t.name)) for t in TABLES}
    for state_made, end in zip(made, closed, strict=True):
        assert sorted(state_made["tables"]) == sorted(t.name for t in TABLES)
        for table in TABLES:  # a stale read at end - 1 µs through the real client, while the server still runs
            snapshot_id = snapshot_at(handles[table.name], end)  # the window's one snapshot, named by its end
            assert snapshot_id is not None and snapshot_id == state_made["snapshots"][table.name], (table.name, end)
            state = _state_rows(handles[table.name], snapshot_id, table)
            source = _source_rows(history.database, table, end - MICROSECOND)
            assert _by_key(table, state) == _by_key(table, source), (table.name, end)
            assert state_made["tables"][table.name] == len(state)
    # one asset event per new state, from the current_state task, with the state's summary as its extra
    events = [e for e in _asset_events(stack) if e["asset"] == f"spanner_cdc_current_state__{STREAM_NAME}"]
    by_state = sorted(events, key=lambda e: str(e["extra"].get("as_of")))  # one transaction's events may share a timestamp
    assert [(e["task"], e["extra"]) for e in by_state] == [("current_state", s) for s in made]


def _refused_confs(history: History) -> dict[str, dict[str, Any]]:
    """Backfill forms the DAG must refuse, by what is wrong with them."""
    start, end = history.windows[0][0], history.windows[-1][1]
    return {
        "reversed": {"stream": STREAM_NAME, "start": end.isoformat(), "end": start.isoformat()},
        "too old": {"stream": STREAM_NAME, "start": (start - dt.timedelta(days=30)).isoformat(), "end": end.isoformat()},
        "future": {"stream": STREAM_NAME, "start": start.isoformat(), "end": (end + dt.timedelta(days=400)).isoformat()},
        "not a date": {"stream": STREAM_NAME, "start": "yesterday", "end": end.isoformat()},
        "unknown stream": {"stream": "nope", "start": start.isoformat(), "end": end.isoformat()},
        "heartbeat": {"stream": STREAM_NAME, "start": start.isoformat(), "end": end.isoformat(), "heartbeat_ms": 10},
    }


@pytest.fixture(scope="module")
def backfill(stack: Stack, history: History, hourly_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A backfill of the two windows, then the refused forms, in one child process (one Airflow start, not two)."""
    before = _lineage_snapshot(stack.lineage_url, "live")
    conf = {"stream": STREAM_NAME, "start": history.windows[0][0].isoformat(), "end": history.windows[-1][1].isoformat()}
    refused = _refused_confs(history)
    jobs = [{"dag_id": "spanner_cdc_backfill", "conf": c} for c in (conf, *refused.values())]
    runs = stack.run(jobs, "backfill")
    return {"runs": runs[:1], "refused": dict(zip(refused, runs[1:], strict=True)), "before": before,
            "after": _lineage_snapshot(stack.lineage_url, "live")}  # fmt: skip


def test_a_backfill_lands_the_same_changes_in_its_own_namespace(
    stack: Stack, history: History, backfill: dict[str, Any]
) -> None:
    [run] = backfill["runs"]
    assert run["state"] == "success", stack.log_path("backfill")
    assert backfill["after"] == backfill["before"], "the backfill moved the live lineage"
    with MetadataStore.connect(stack.lineage_url) as store:
        namespaces = {lineage.namespace for lineage in store.lineages() if lineage.stream == CHANGE_STREAM}
    [namespace] = namespaces - {"live"}
    assert namespace.startswith("backfill_")
    start, end = history.windows[0][0], history.windows[-1][1]
    live_files = published_files(stack.lake / CHANGE_STREAM / "live")
    backfilled_files = published_files(stack.lake / CHANGE_STREAM / namespace)
    assert Counter(lake_identities(backfilled_files)) == Counter(_rows_in(live_files, start, end))
    import pyarrow.parquet as pq

    methods = {m for path in backfilled_files for m in pq.read_table(path, columns=["read_method"]).column(0).to_pylist()}
    assert methods == {"spanner-change-stream-backfill"}
    # Same change, same id: every backfilled row carries the uuid of the live row of that change.
    assert set(lake_uuids(backfilled_files)) <= set(lake_uuids(live_files))
    assert len(set(lake_uuids(backfilled_files))) == len(backfilled_files and lake_uuids(backfilled_files))


def test_bad_backfill_forms_are_refused_with_a_clear_message(stack: Stack, history: History, backfill: dict[str, Any]) -> None:
    start, end = history.windows[0][0], history.windows[-1][1]
    results = backfill["refused"]  # run after the backfill, in its child process (its log)
    log = stack.log_path("backfill").read_text()
    for name in ("reversed", "too old", "future"):
        assert results[name]["state"] == "failed", name
        assert results[name]["tasks"] == {"validate": "failed", "extract_windows": "upstream_failed"}, name
    assert f"backfill refused: invalid end='{start.isoformat()}': expected a date-time after start ({end.isoformat()})" in log
    assert "backfill refused: invalid start=" in log and "of history; older changes are gone from Spanner" in log
    assert "expected a date-time not after the database's current time" in log
    # Without a date-time format checker installed, jsonschema lets the text through and validate refuses it.
    if results["not a date"]["state"] == "refused":
        assert "date-time" in results["not a date"]["error"]
    else:
        assert results["not a date"]["tasks"] == {"validate": "failed", "extract_windows": "upstream_failed"}
        assert "backfill refused: invalid start='yesterday': expected an ISO 8601 date-time" in log
    # The form itself (JSON schema of the Params) refuses an unknown stream and a heartbeat out of range.
    assert results["unknown stream"]["state"] == "refused"
    assert "'nope' is not one of ['moving', 'orders']" in results["unknown stream"]["error"]
    assert results["heartbeat"]["state"] == "refused"
    assert "10 is less than the minimum of 1000" in results["heartbeat"]["error"]
    with MetadataStore.connect(stack.lineage_url) as store:
        backfills = [lin for lin in store.lineages() if lin.namespace.startswith("backfill_")]
    assert len(backfills) == 1, "a refused form created a lineage"
