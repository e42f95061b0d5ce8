"""Outside the dev stack no metadata store is an error naming the setting, never a Postgres started on the worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

MESSAGE = "no metadata store configured: set the Airflow connection spanner_cdc_metadata or SPANNER_CDC_METADATA_URL"

# Each task body is called as the DAG's tasks call them; starting an embedded Postgres would raise instead.
TASKS = r"""
import datetime as dt, json, sys
from spanner_cdc.devstack import embedded_pg

def refuse(*args, **kwargs):
    raise SystemExit("an Airflow task body tried to start an embedded Postgres")

embedded_pg.ensure_running = refuse
from spanner_cdc.orchestration import backfill, hourly

start, end = dt.datetime(2024, 6, 1, tzinfo=dt.UTC), dt.datetime(2024, 6, 1, 1, tzinfo=dt.UTC)
calls = {
    "catch_up": lambda: hourly.catch_up("orders", start),
    "plan": lambda: hourly.plan("orders", start, end),
    "next_wave": lambda: hourly.next_wave("orders", start, end),
    "extract": lambda: hourly.extract("orders", start, end, [], owner="worker-1"),
    "close": lambda: hourly.close("orders", start, end),
    "backfill.run": lambda: backfill.run({"stream": "orders", "windows": [[start.isoformat(), end.isoformat()]]}, "manual__1"),
}
for name, call in calls.items():
    try:
        call()
        print(json.dumps([name, "returned", ""]))
    except Exception as exc:
        print(json.dumps([name, type(exc).__name__, str(exc)]))
"""


def test_airflow_task_bodies_without_a_metadata_url_fail_naming_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "streams.toml"
    config.write_text('[streams.orders]\ndatabase = "shop"\nchange_stream = "orders_stream"\nstart_date = 2024-06-01T00:00:00Z\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANNER_CDC_", "AIRFLOW_CONN_"))}
    env.update(SPANNER_CDC_CONFIG=str(config), SPANNER_CDC_HOME=str(tmp_path / "home"), AIRFLOW_HOME=str(tmp_path / "airflow"))
    result = subprocess.run([sys.executable, "-c", TASKS], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = {name: (kind, text) for name, kind, text in map(json.loads, result.stdout.splitlines())}
    assert set(outcomes) == {"catch_up", "plan", "next_wave", "extract", "close", "backfill.run"}
    for name, (kind, text) in outcomes.items():
        # fail_fast: a missing setting does not heal on retry, so the task fails without retrying
        assert kind == "AirflowFailException", (name, kind, text)
        assert text.startswith(f"StoreNotConfigured: {MESSAGE}"), (name, text)
    assert not (tmp_path / "home" / "postgres").exists()


def test_the_cli_on_a_laptop_starts_the_embedded_store(tmp_path: Path) -> None:
    from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    env["SPANNER_CDC_HOME"] = str(tmp_path / "home")
    command = [str(Path(sys.executable).with_name("spanner-cdc")), "db", "upgrade"]
    data_dir = tmp_path / "home" / "postgres"
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "metadata store at postgresql+psycopg2://postgres@127.0.0.1:" in result.stdout
        assert (data_dir / "PG_VERSION").exists()
    finally:
        port_file = tmp_path / "home" / "postgres.port"
        if port_file.exists():
            EmbeddedPostgres(data_dir, int(port_file.read_text())).stop()
