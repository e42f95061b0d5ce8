"""The fault campaign through Airflow: a real scheduler runs the hourly DAG, an extract task's process is killed."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack import airflow_env
from spanner_cdc.devstack.demo_summary import lake_identities, lake_uuids, published_files
from spanner_cdc.devstack.demo_truth import truth_identities
from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres, free_port
from spanner_cdc.settings import Settings
from spanner_cdc.store import MetadataStore
from tests.fixtures.airflow_db import prepare_copied
from tests.fixtures.postgres import PrivatePostgres
from tests.integration.dags.airflow_api import Api
from tests.integration.extract.fault_campaign import (
    CHANGE_STREAM,
    INSTANCE,
    PROJECT,
    History,
    files_containing,
    past_history,
    secret_forms,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(83), pytest.mark.timeout(900)]

STREAM_NAME = "campaign"
DAG_ID = f"spanner_cdc_hourly__{STREAM_NAME}"
SEED = 20261124
KILLED_TASK = "wave_1.extract"


@dataclass
class Outcome:
    history: History
    lake: Path
    store_url: str
    airflow_home: Path
    run_state: str
    killed: str  # what was killed: the task runner process of one try of the extract task
    tries: dict[str, int]  # task id[map index] -> highest try number
    elapsed_s: float



@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    with past_history(tmp_path_factory.mktemp("history"), hours=1, transactions=150, seed=SEED,
                      workload_seconds=8.0) as history:  # fmt: skip
        yield history


def write_config(path: Path, start: dt.datetime) -> None:
    path.write_text(
        f"[streams.{STREAM_NAME}]\n"
        f'project = "{PROJECT}"\ninstance = "{INSTANCE}"\ndatabase = "campaign"\n'
        f'change_stream = "{CHANGE_STREAM}"\ndialect = "GOOGLE_STANDARD_SQL"\n'
        # catchup from the window's start: the scheduler itself creates the run of the past hour; the hour's lineage is
        # up to 8 generations deep (the server splits and merges every few minutes of its time), so the run has 10 waves
        f"start_date = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}\ncatchup = true\nwaves = 10\n"
        'retry_delay = "5s"\n'  # the killed task's retry comes after 5-10 s (Airflow adds up to as much again), not 30-60 s
    )


class AirflowDb:
    """Reads Airflow's own database (task instances, DAG runs), as the scheduler records them."""

    def __init__(self, url: str) -> None:
        import sqlalchemy as sa

        self.sa = sa
        self.engine = sa.create_engine(url)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(self.sa.text(sql), params))

    def run_state(self) -> str | None:
        found = self.rows("SELECT state FROM dag_run WHERE dag_id = :d ORDER BY data_interval_start LIMIT 1", d=DAG_ID)
        return found[0][0] if found else None

    def running(self, task_id: str) -> list[Any]:
        return self.rows("SELECT id, map_index, try_number FROM task_instance WHERE dag_id = :d AND task_id = :t "
                         "AND state = 'running'", d=DAG_ID, t=task_id)  # fmt: skip

    def tries(self) -> dict[str, int]:
        rows = self.rows("SELECT task_id, map_index, try_number FROM task_instance WHERE dag_id = :d", d=DAG_ID)
        return {f"{t}[{m}]": n for t, m, n in rows}


def task_process(ti_id: str) -> Any:
    """The process running the task's code: Airflow's task runner titles itself `airflow worker -- <ti id>`."""
    import psutil

    for process in psutil.process_iter(["pid", "cmdline"]):
        if f"airflow worker -- {ti_id}" in " ".join(process.info["cmdline"] or ()):
            return process
    return None


def extracting(store_url: str, ti_owner: str) -> bool:
    """Whether a token is RUNNING under the lease of this task instance's try (hourly.owner_of)."""
    from spanner_cdc.errors import NotFound

    with MetadataStore.connect(store_url) as store:
        try:
            lineage = store.get_lineage(CHANGE_STREAM, "live")
        except NotFound:
            return False
        return any(p.state == "RUNNING" and ti_owner in (p.lease_owner or "") for p in store.partitions(lineage.id))


def _kill_an_extract_mid_run(db: AirflowDb, store_url: str, deadline: float) -> str:
    """Wait for a try of wave_1.extract holding a token, then SIGKILL its task runner process."""
    while time.monotonic() < deadline:
        for ti_id, map_index, try_number in db.running(KILLED_TASK):
            process = task_process(str(ti_id))
            if process is not None and extracting(store_url, f"/{KILLED_TASK}[{map_index}]#{try_number}"):
                process.send_signal(signal.SIGKILL)
                return f"pid {process.pid} 'airflow worker -- {ti_id}' ({KILLED_TASK}[{map_index}] try {try_number})"
        time.sleep(0.1)
    raise AssertionError(f"no {KILLED_TASK} task held a token before the deadline (DAG run: {db.run_state()})")


@pytest.fixture(scope="module")
def airflow_campaign(
    history: History, private_postgres: PrivatePostgres, embedded_postgres: EmbeddedPostgres | None,
    spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory, migrated_airflow_db: Callable[[], tuple[str, str]],
) -> Iterator[Outcome]:  # fmt: skip
    if embedded_postgres is None:
        pytest.skip("Airflow's own database is made on the embedded Postgres (SPANNER_CDC_METADATA_URL is set)")
    started = time.monotonic()
    home = tmp_path_factory.mktemp("airflow-campaign")
    airflow_db, airflow_db_url = migrated_airflow_db()
    settings = Settings(home=home, metadata_url=private_postgres.url, output_root=home / "lake")
    env = prepare_copied(settings, airflow_db_url, api_port=free_port())
    config = home / "streams.toml"
    write_config(config, history.windows[0][0])
    extra = {
        "SPANNER_CDC_CONFIG": str(config),
        "SPANNER_EMULATOR_HOST": history.server.host,
        "SPANNER_CDC_METADATA_URL": private_postgres.url,
        "SPANNER_CDC_OUTPUT_ROOT": str(settings.output_root),
        "SPANNER_CDC_SPARK_MASTER": spark_connect_server.url,
    }
    stop = threading.Event()

    def unpause(url: str, logs: Path) -> None:
        # only once the api-server answers: a task queued before it would fail to start (and wait for a retry)
        Api(url).unpause(DAG_ID)

    service = threading.Thread(target=airflow_env.serve, kwargs={"env": env, "extra_env": extra, "stop": stop,
                               "on_ready": unpause}, name="airflow-services", daemon=True)  # fmt: skip
    db = AirflowDb(env.env[airflow_env.SQL_CONN_VAR])
    service.start()
    try:
        deadline = time.monotonic() + 720
        killed = _kill_an_extract_mid_run(db, private_postgres.url, deadline)
        print(f"\nAirflow fault campaign: killed {killed}")
        while (state := db.run_state()) not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(1.0)
        outcome = Outcome(history, settings.output_root / CHANGE_STREAM / "live", private_postgres.url, env.home,
                          str(state), killed, db.tries(), time.monotonic() - started)  # fmt: skip
        print(f"Airflow fault campaign: DAG run {state} in {outcome.elapsed_s:.0f} s; tries {outcome.tries}")
        yield outcome
    finally:
        stop.set()
        service.join(timeout=120)
        db.engine.dispose()
        embedded_postgres.drop_database(airflow_db)


def test_airflow_retries_the_killed_extract_and_the_run_succeeds(airflow_campaign: Outcome) -> None:
    outcome = airflow_campaign
    assert outcome.run_state == "success", f"{outcome.run_state}; killed {outcome.killed}; logs in {outcome.airflow_home}"
    killed_try = max(n for key, n in outcome.tries.items() if key.startswith(f"{KILLED_TASK}["))
    assert killed_try >= 2, f"the killed task was not retried: {outcome.tries}"


def test_the_lake_equals_the_ground_truth_and_the_window_is_complete(airflow_campaign: Outcome) -> None:
    outcome = airflow_campaign
    (window,) = outcome.history.windows
    files = published_files(outcome.lake)
    expected, _ = truth_identities(outcome.history.ground_truth, *window)
    landed = Counter(lake_identities(files))
    lost, duplicated = Counter(expected) - landed, landed - Counter(expected)
    figures = f"rows expected {len(expected)}, landed {sum(landed.values())}; killed {outcome.killed}"
    assert expected and (sum(lost.values()), sum(duplicated.values())) == (0, 0), figures
    uuids = lake_uuids(files)
    assert len(uuids) == len(set(uuids)), figures
    with MetadataStore.connect(outcome.store_url) as store:
        rows = {(w.start, w.end): w for w in store.windows(store.get_lineage(CHANGE_STREAM, "live").id)}
    row = rows.get(window)
    assert row is not None and row.state == "COMPLETE", f"{row}; {figures}"
    assert row.transaction_check and row.transaction_check["ok"], f"{row}; {figures}"


def test_the_store_password_is_in_no_airflow_log_or_lake_file(
    airflow_campaign: Outcome, private_postgres: PrivatePostgres
) -> None:
    logs = airflow_campaign.airflow_home / "logs"
    assert logs.exists() and any(logs.rglob("*")), logs
    leaked = files_containing([logs, airflow_campaign.lake], secret_forms(private_postgres.password))
    assert not leaked, f"the store's password is in {leaked[:5]}"
