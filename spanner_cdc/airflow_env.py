"""Airflow's environment on the embedded stack: AIRFLOW_HOME under .local, its metadata DB on the embedded Postgres."""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from spanner_cdc import embedded_pg
from spanner_cdc.airflow_support import SPANNER_POOL
from spanner_cdc.errors import SpannerCdcError
from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)

AIRFLOW_DATABASE = "airflow"
SQL_CONN_VAR = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
MIGRATED_STAMP = ".spanner_cdc_migrated"


def repo_root() -> Path:
    """The checkout holding dags/ and plugins/ (the package is installed in editable mode from it)."""
    return Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class AirflowEnv:
    """Where Airflow lives and the environment every Airflow process of the embedded stack runs with."""

    home: Path
    env: dict[str, str]

    def full_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return {**os.environ, **self.env, **(extra or {})}

    def airflow(self, args: Sequence[str], *, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """Run the `airflow` CLI of this virtualenv with this environment; output is captured."""
        command = [str(Path(sys.executable).with_name("airflow")), *args]
        result = subprocess.run(command, env=self.full_env(), capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-1500:]
            raise SpannerCdcError(f"`airflow {' '.join(args)}` failed (exit {result.returncode}): {tail}")
        return result


def _secrets(home: Path) -> dict[str, str]:
    """Keys Airflow needs to be equal in every process (JWTs between scheduler and API server, Fernet)."""
    path = home / "secrets.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    values = {
        "jwt_secret": secrets.token_urlsafe(32),
        "secret_key": secrets.token_urlsafe(32),
        "fernet_key": base64.urlsafe_b64encode(os.urandom(32)).decode(),
    }
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values))
    path.chmod(0o600)
    return values


def airflow_environment(home: Path, sql_alchemy_conn: str, *, api_port: int = 8080) -> dict[str, str]:
    """The AIRFLOW_* variables for the embedded stack: our dags/ and plugins/, no examples, LocalExecutor."""
    root = repo_root()
    keys = _secrets(home)
    return {
        "AIRFLOW_HOME": str(home),
        SQL_CONN_VAR: sql_alchemy_conn,
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(root / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__FERNET_KEY": keys["fernet_key"],
        # The embedded stack is a single-user sandbox on loopback: everyone who reaches the UI is admin.
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__SECRET_KEY": keys["secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": keys["jwt_secret"],
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__CATCHUP_BY_DEFAULT": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # The package is importable from the DAG files even when Airflow is started from another directory.
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p),
    }


def _airflow_db_url(settings: Settings, env: Mapping[str, str]) -> str:
    """Airflow's metadata DB: the one the user configured, else a database on the embedded Postgres."""
    configured = env.get(SQL_CONN_VAR)
    if configured:
        return configured
    server = embedded_pg.ensure_running(settings.home.absolute() / "postgres")
    return server.create_database(AIRFLOW_DATABASE)


def prepare(settings: Settings, *, pool_slots: int | None = None, api_port: int = 8080) -> AirflowEnv:
    """Make Airflow usable on the embedded stack: DB migrated (once), the Spanner query pool in place."""
    home = settings.home.absolute() / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    url = _airflow_db_url(settings, os.environ)
    env = AirflowEnv(home, airflow_environment(home, url, api_port=api_port))
    stamp = home / MIGRATED_STAMP
    version = _airflow_version()
    if not stamp.exists() or stamp.read_text() != f"{version} {url}":
        log.info("migrating Airflow's metadata database (first run takes a minute)")
        env.airflow(["db", "migrate"])
        stamp.write_text(f"{version} {url}")
    slots = pool_slots or settings.concurrency
    env.airflow(["pools", "set", SPANNER_POOL, str(slots), "Bounds concurrent Spanner change stream queries"])
    return env


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow-core")
