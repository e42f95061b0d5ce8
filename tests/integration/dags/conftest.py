"""Fixtures for the DAG end-to-end tests: Airflow on the run's Postgres, the local Spanner server with a past history."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack import airflow_env
from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from spanner_cdc.settings import Settings
from tests.fixtures.airflow_db import prepare_copied

HOUR = dt.timedelta(hours=1)
PROJECT, INSTANCE, DATABASE = "local-project", "local-instance", "e2e"
STREAM_NAME, CHANGE_STREAM = "orders", "orders_stream"
# a second stream over the same tables in MUTABLE_KEY_RANGE partition mode: its config says nothing about the mode
MUTABLE_NAME, MUTABLE_STREAM = "moving", "moving_stream"


@dataclass
class Stack:
    """Airflow (its own DB), a lineage store, a lake and a streams config, all in one temporary home."""

    env: airflow_env.AirflowEnv
    home: Path
    lineage_url: str
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def lake(self) -> Path:
        return self.home / "lake"

    def run(self, jobs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
        """DAG runs with dag.test() in a child process, no retries (a failure shows at once)."""
        return airflow_env.run_dags(self.env, jobs, extra_env=self.extra, log_path=self.log_path(name), retries=0)

    def log_path(self, name: str) -> Path:
        return self.home / f"{name}.log"


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, embedded_postgres: EmbeddedPostgres | None, pg_url: str,
    migrated_airflow_db: Callable[[], tuple[str, str]],
) -> Iterator[Stack]:  # fmt: skip
    home = tmp_path_factory.mktemp("stack")
    settings = Settings(home=home, metadata_url=pg_url, output_root=home / "lake")
    if embedded_postgres is None:  # an external server: Airflow's tables in the store's database, migrated here
        yield Stack(env=airflow_env.prepare(settings, airflow_db_url=pg_url), home=home, lineage_url=pg_url)
        return
    airflow_db, airflow_db_url = migrated_airflow_db()  # a copy of the run's migrated Airflow database
    yield Stack(env=prepare_copied(settings, airflow_db_url), home=home, lineage_url=pg_url)
    embedded_postgres.drop_database(airflow_db)


def write_config(path: Path, start: dt.datetime) -> None:
    path.write_text(
        f"[streams.{STREAM_NAME}]\n"
        f'project = "{PROJECT}"\ninstance = "{INSTANCE}"\ndatabase = "{DATABASE}"\n'
        f'change_stream = "{CHANGE_STREAM}"\ndialect = "GOOGLE_STANDARD_SQL"\n'
        f"start_date = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}\ncatchup = false\n"
        # Two waves are fewer than the lineage changes of an hour on the local server (a split or merge
        # every 20 minutes): windows are left open and the next run's catch_up must finish them.
        "waves = 2\n"
        # the first run snapshots the tables at its window start - 1 µs; each closed window gets a current state
        "snapshot = true\ncurrent_state = true\n"
        f"[streams.{MUTABLE_NAME}]\n"
        f'project = "{PROJECT}"\ninstance = "{INSTANCE}"\ndatabase = "{DATABASE}"\n'
        f'change_stream = "{MUTABLE_STREAM}"\n'
        f"start_date = {start.strftime('%Y-%m-%dT%H:%M:%SZ')}\ncatchup = false\n"
        # enough waves for the partitions a window's moves start (each wave reads those the previous one announced)
        "waves = 6\n"
    )


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
