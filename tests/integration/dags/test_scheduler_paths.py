"""The Airflow paths a user takes, with the real scheduler: a missed deadline, and Airflow's own backfill (REST API).

One window is run as the demo runs it (dag.test(), through orchestration.dag_runs, without OpenLineage); the scheduler
then runs the next one, which misses its deadline on purpose (one minute after its window's end, already past when the
run starts); a backfill of both windows through `POST /api/v2/backfills` re-runs them in the runs they already have (one
run per window) and leaves the lake as it was. The Airflow services report to OpenLineage with its file transport.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack import airflow_env
from spanner_cdc.devstack.demo_summary import lake_identities, published_files
from spanner_cdc.devstack.demo_truth import truth_identities
from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres, free_port
from spanner_cdc.settings import Settings
from spanner_cdc.store import MetadataStore
from tests.fixtures.airflow_db import prepare_copied
from tests.integration.dags.airflow_api import Api
from tests.integration.extract.fault_campaign import CHANGE_STREAM, INSTANCE, PROJECT, History, past_history

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(168), pytest.mark.timeout(1200)]

STREAM_NAME = "paths"
DAG_ID = f"spanner_cdc_hourly__{STREAM_NAME}"
DEADLINE_MINUTES = 1


def write_config(path: Path, start: dt.datetime, last: dt.datetime) -> None:
    path.write_text(
        f"[streams.{STREAM_NAME}]\n"
        f'project = "{PROJECT}"\ninstance = "{INSTANCE}"\ndatabase = "campaign"\n'
        f'change_stream = "{CHANGE_STREAM}"\ndialect = "GOOGLE_STANDARD_SQL"\n'
        f"start_date = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}\ncatchup = true\nwaves = 10\n"
        # no run of the hour after: the wall clock's hour may turn while the test runs
        f"end_date = {last.strftime('%Y-%m-%dT%H:%M:%SZ')}\n"
        f"deadline_minutes = {DEADLINE_MINUTES}\n"
    )


@dataclass
class Paths:
    history: History
    lake: Path
    store_url: str
    airflow_home: Path
    demo_runs: list[dict[str, Any]]
    scheduled: dict[str, Any]  # the scheduler's run of the second window, once finished
    scheduled_tasks: list[dict[str, Any]]  # its task instances (task_id, map_index, state, try_number)
    lake_before: dict[str, str]  # published file -> sha256, before the backfill
    windows_before: list[Any]
    backfill: dict[str, Any]  # the backfill as the REST API shows it at the end
    runs_after: list[dict[str, Any]]  # dag_run rows of the two windows after the backfill
    lake_after: dict[str, str]
    windows_after: list[Any]
    callbacks: list[dict[str, Any]]  # Airflow's callback rows
    lineage_events: list[dict[str, Any]]  # what the OpenLineage file transport wrote
    events_of_the_demo_run: int  # files in the transport's folder after the demo's run, before the services start
    manifest: list[Any]  # the live lineage's published files


class AirflowDb:
    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.sa = sa
        self.engine = sa.create_engine(url)

    def rows(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(row._mapping) for row in conn.execute(self.sa.text(sql), params)]

    def runs(self) -> list[dict[str, Any]]:
        return self.rows("SELECT run_id, logical_date, data_interval_start, data_interval_end, run_type, state "
                         "FROM dag_run WHERE dag_id = :d ORDER BY logical_date", d=DAG_ID)  # fmt: skip


def _lake_digest(root: Path) -> dict[str, str]:
    return {str(Path(f).relative_to(root)): hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in published_files(root)}


def _windows(url: str) -> list[Any]:
    with MetadataStore.connect(url) as store:
        rows = store.windows(store.get_lineage(CHANGE_STREAM, "live").id)
    return sorted((w.start, w.end, w.state, w.records, w.files) for w in rows)


def _until(what: str, check: Any, deadline: float, service: threading.Thread, every: float = 1.0) -> Any:
    while time.monotonic() < deadline:
        assert service.is_alive(), f"the Airflow services stopped while waiting for {what}"
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    # two hours at 810x: 30 minutes of lead are 2.2 s of set-up; three hours leave 13 s
    with past_history(tmp_path_factory.mktemp("history"), hours=2, transactions=80, seed=20261126,
                      workload_seconds=8.0, lead=dt.timedelta(hours=3)) as history:  # fmt: skip
        assert history.windows[-1][1] <= dt.datetime.now(dt.UTC), f"the history's windows {history.windows} are not past"
        yield history


@pytest.fixture(scope="module")
def paths(
    history: History, pg_url: str, embedded_postgres: EmbeddedPostgres | None, spark_connect_server: Any,
    tmp_path_factory: pytest.TempPathFactory, migrated_airflow_db: Callable[[], tuple[str, str]],
) -> Iterator[Paths]:
    if embedded_postgres is None:
        pytest.skip("Airflow's own database is made on the embedded Postgres (SPANNER_CDC_METADATA_URL is set)")
    home = tmp_path_factory.mktemp("airflow-paths")
    airflow_db, airflow_db_url = migrated_airflow_db()
    settings = Settings(home=home, metadata_url=pg_url, output_root=home / "lake")
    env = prepare_copied(settings, airflow_db_url, api_port=free_port())
    config = home / "streams.toml"
    first, second = history.windows
    write_config(config, first[0], second[0])
    extra = {
        "SPANNER_CDC_CONFIG": str(config),
        "SPANNER_EMULATOR_HOST": history.server.host,
        "SPANNER_CDC_METADATA_URL": pg_url,
        "SPANNER_CDC_OUTPUT_ROOT": str(settings.output_root),
        "SPANNER_CDC_SPARK_MASTER": spark_connect_server.url,
    }
    events_dir = home / "openlineage"
    events_dir.mkdir()
    # the Airflow services only: the demo's dag.test() run below has no OpenLineage set-up and must emit nothing
    lineage_env = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(events_dir / "event")}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "spanner-cdc-test",
    }
    lake = settings.output_root / CHANGE_STREAM / "live"
    # the first window as the demo runs it, before any scheduler runs
    demo_runs = airflow_env.run_dags(env, [{"dag_id": DAG_ID, "windows": [[first[0].isoformat(), first[1].isoformat()]]}],
                                     extra_env=extra, log_path=home / "demo-runs.log", retries=0)  # fmt: skip
    events_of_the_demo_run = len(list(events_dir.iterdir()))
    # the second window's deadline (its end + DEADLINE_MINUTES) must be past when the scheduler starts its run
    while dt.datetime.now(dt.UTC) < second[1] + dt.timedelta(minutes=DEADLINE_MINUTES, seconds=5):
        time.sleep(1.0)
    api: list[Api] = []
    stop = threading.Event()

    def unpause(url: str, logs: Path) -> None:
        api.append(Api(url))
        api[0].unpause(DAG_ID)

    service = threading.Thread(target=airflow_env.serve, kwargs={"env": env, "extra_env": {**extra, **lineage_env}, "stop": stop,
                               "on_ready": unpause}, name="airflow-services", daemon=True)  # fmt: skip
    db = AirflowDb(env.env[airflow_env.SQL_CONN_VAR])
    service.start()
    try:
        deadline = time.monotonic() + 720

        def scheduled_done() -> dict[str, Any] | None:
            found = [r for r in db.runs() if r["logical_date"] == second[0] and r["state"] in ("success", "failed")]
            return found[0] if found else None

        scheduled = _until("the scheduler's run of the second window", scheduled_done, deadline, service)
        scheduled_tasks = db.rows("SELECT task_id, map_index, state, try_number FROM task_instance "
                                  "WHERE dag_id = :d AND run_id = :r", d=DAG_ID, r=scheduled["run_id"])  # fmt: skip
        lake_before, windows_before = _lake_digest(lake), _windows(pg_url)
        (client,) = api
        backfill = client.call("POST", "/api/v2/backfills", {
            "dag_id": DAG_ID, "from_date": first[0].isoformat(), "to_date": second[0].isoformat(),
            "reprocess_behavior": "completed", "max_active_runs": 1})  # fmt: skip
        backfill = _until("the backfill to complete",
                          lambda: (b := client.call("GET", f"/api/v2/backfills/{backfill['id']}"))["completed_at"] and b,
                          deadline, service, every=2.0)  # fmt: skip
        # the backfill completes when its runs are finished; the runs' own rows say how
        runs_after = [r for r in db.runs() if r["logical_date"] in (first[0], second[0])]
        callbacks = db.rows("SELECT * FROM callback")
        events = [json.loads(p.read_text()) for p in sorted(events_dir.iterdir())]
        with MetadataStore.connect(pg_url) as store:
            manifest = store.manifest(store.get_lineage(CHANGE_STREAM, "live").id)
        yield Paths(history, lake, pg_url, env.home, demo_runs, scheduled, scheduled_tasks, lake_before, windows_before, backfill,
                    runs_after, _lake_digest(lake), _windows(pg_url), callbacks, events, events_of_the_demo_run, manifest)  # fmt: skip
    finally:
        stop.set()
        service.join(timeout=120)
        db.engine.dispose()
        embedded_postgres.drop_database(airflow_db)


def test_the_demos_run_of_a_window_has_the_schedulers_logical_date(paths: Paths) -> None:
    (run,) = paths.demo_runs
    first = paths.history.windows[0]
    assert run["state"] == "success", paths.airflow_home
    assert (run["logical_date"], run["data_interval_start"], run["data_interval_end"]) == (
        first[0].isoformat(), first[0].isoformat(), first[1].isoformat())  # fmt: skip
    second = paths.history.windows[1]
    assert paths.scheduled["state"] == "success", paths.airflow_home
    assert (paths.scheduled["data_interval_start"], paths.scheduled["data_interval_end"]) == second
    assert paths.scheduled["run_type"] == "scheduled"


def test_an_empty_wave_ends_the_runs_waves_without_starting_a_task_and_the_close_runs(paths: Paths) -> None:
    """Of `waves = 10`, the window settles in a few: the first wave whose extract had no token is skipped, and the
    scheduler skips every wave after it without queueing a task (try 0); close still runs."""
    tasks = {(t["task_id"], t["map_index"]): t for t in paths.scheduled_tasks}

    def wave_of(task_id: str) -> int:
        return int(task_id.split(".")[0].removeprefix("wave_")) if task_id.startswith("wave_") else 0

    empty = [wave_of(task) for (task, index), t in tasks.items() if task.endswith(".extract") and t["state"] == "skipped"]
    assert empty and min(empty) < 10, sorted(tasks.items())
    later = [t for (task, _), t in tasks.items() if wave_of(task) > min(empty)]
    assert later and all(t["state"] == "skipped" and t["try_number"] == 0 for t in later), later
    assert tasks[("close", -1)]["state"] == "success", sorted(tasks.items())


def test_a_missed_deadline_runs_the_callback_once_with_the_stream_window_and_partitions(paths: Paths) -> None:
    start, end = paths.history.windows[1]
    assert len(paths.callbacks) == 1, paths.callbacks
    logs = paths.airflow_home / "logs"
    lines = [line for path in logs.rglob("*.log") for line in path.read_text(errors="replace").splitlines()
             if "min after its end (DAG run" in line]  # fmt: skip
    assert len(lines) == 1, lines
    assert f"stream {STREAM_NAME} window [{start.isoformat()}, {end.isoformat()}) not complete {DEADLINE_MINUTES} min" in lines[0]
    assert "holding it open" in lines[0] or "no partition holds it open" in lines[0] or "not started" in lines[0]


def test_airflows_backfill_reruns_the_windows_in_their_runs_and_leaves_the_lake_as_it_was(paths: Paths) -> None:
    first, second = paths.history.windows
    assert paths.backfill["completed_at"], paths.backfill
    # one run per window (the demo's and the scheduler's), re-run by the backfill
    assert [(r["logical_date"], r["run_type"], r["state"]) for r in paths.runs_after] == [
        (first[0], "backfill", "success"), (second[0], "backfill", "success")], paths.airflow_home  # fmt: skip
    assert paths.lake_after == paths.lake_before and paths.lake_before
    assert paths.windows_after == paths.windows_before
    assert [w[2] for w in paths.windows_after if (w[0], w[1]) in (first, second)] == ["COMPLETE", "COMPLETE"]
    expected, _ = truth_identities(paths.history.ground_truth, first[0], second[1])
    landed = [row for row in lake_identities(published_files(paths.lake)) if first[0].isoformat() <= row[2] < second[1].isoformat()]
    assert expected and Counter(landed) == Counter(expected)


def _event_model(event: dict[str, Any]) -> Any:
    """The event rebuilt with openlineage-python's classes generated from OpenLineage's published spec: their
    validators refuse a bad run id, time or schema URL; missing required fields fail to construct."""
    from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
    from openlineage.client.facet_v2 import output_statistics_output_dataset, schema_dataset

    assert event["schemaURL"] == RunEvent._get_schema(), event["schemaURL"]
    for dataset in event["inputs"] + event["outputs"]:
        schema = dataset.get("facets", {}).get("schema")
        if schema is not None:
            assert schema["_schemaURL"] == schema_dataset.SchemaDatasetFacet._get_schema()
            schema_dataset.SchemaDatasetFacet(fields=[schema_dataset.SchemaDatasetFacetFields(name=f["name"], type=f["type"])
                                                      for f in schema["fields"]])  # fmt: skip
        stats = dataset.get("outputFacets", {}).get("outputStatistics")
        if stats is not None:
            facet = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet
            assert stats["_schemaURL"] == facet._get_schema()
            facet(rowCount=stats["rowCount"], size=stats["size"], fileCount=stats["fileCount"])
    return RunEvent(
        eventType=RunState(event["eventType"]), eventTime=event["eventTime"], run=Run(runId=event["run"]["runId"]),
        job=Job(namespace=event["job"]["namespace"], name=event["job"]["name"]), producer=event["producer"],
        inputs=[InputDataset(namespace=d["namespace"], name=d["name"]) for d in event["inputs"]],
        outputs=[OutputDataset(namespace=d["namespace"], name=d["name"]) for d in event["outputs"]],
    )  # fmt: skip


def _interval(event: dict[str, Any]) -> tuple[dt.datetime, dt.datetime]:
    run = event["run"]["facets"]["airflow"]["dagRun"]
    return (dt.datetime.fromisoformat(run["data_interval_start"]), dt.datetime.fromisoformat(run["data_interval_end"]))


def _run_id(event: dict[str, Any]) -> str:
    return str(event["run"]["facets"]["airflow"]["dagRun"]["run_id"])


def test_openlineage_events_of_the_extract_and_close_tasks_name_the_stream_and_the_lake_with_the_windows_counts(
    paths: Paths,
) -> None:
    from spanner_cdc.lake.columns import LAKE_SCHEMA

    events = paths.lineage_events
    assert events, "no OpenLineage event was written"
    for event in events:
        _event_model(event)
    tasks = [e for e in events if e["job"]["name"].startswith(f"{DAG_ID}.")]
    # nothing changes without an OpenLineage set-up: the demo's run (dag.test()) emitted nothing
    assert paths.events_of_the_demo_run == 0
    assert {_run_id(e) for e in tasks} <= {r["run_id"] for r in paths.runs_after}, {_run_id(e) for e in tasks}
    source = {"namespace": f"spanner://{PROJECT}/{INSTANCE}/campaign", "name": CHANGE_STREAM}
    windows = {(w[0], w[1]): w for w in paths.windows_after}

    def window_counts(files: list[Any]) -> tuple[int, int, int]:
        return sum(f.rows for f in files), len(files), sum(f.bytes for f in files)

    closes = [e for e in tasks if e["job"]["name"] == f"{DAG_ID}.close" and e["eventType"] == "COMPLETE"]
    assert {_interval(e) for e in closes} == set(paths.history.windows), "no close event for a window"
    for event in closes + [e for e in tasks if e["job"]["name"].endswith(".extract") and e["eventType"] == "COMPLETE"]:
        assert [{k: d[k] for k in ("namespace", "name")} for d in event["inputs"]] == [source], event["inputs"]
        (output,) = event["outputs"]
        assert (output["namespace"], output["name"]) == ("file", str(paths.lake))
        assert [f["name"] for f in output["facets"]["schema"]["fields"]] == LAKE_SCHEMA.names
    for event in closes:  # a close reports its window's rows, files and bytes, as the store and the manifest have them
        start, end = _interval(event)
        in_window = [f for f in paths.manifest if (f.window_start, f.window_end) == (start, end)]
        stats = event["outputs"][0]["outputFacets"]["outputStatistics"]
        assert (stats["rowCount"], stats["fileCount"], stats["size"]) == window_counts(in_window)
        assert (stats["rowCount"], stats["fileCount"]) == (windows[(start, end)][3], windows[(start, end)][4]) and stats["size"] > 0
    # the scheduler's run of the second window: its extracts together landed what that window's files hold
    extracts = [e for e in tasks if e["job"]["name"].endswith(".extract") and e["eventType"] == "COMPLETE"
                and _run_id(e) == paths.scheduled["run_id"]]  # fmt: skip
    assert extracts, "no extract event of the scheduler's run"
    landed = [sum(e["outputs"][0]["outputFacets"]["outputStatistics"][k] for e in extracts) for k in ("rowCount", "fileCount", "size")]
    second = [f for f in paths.manifest if (f.window_start, f.window_end) == paths.history.windows[1]]
    assert tuple(landed) == window_counts(second) and landed[0] > 0
