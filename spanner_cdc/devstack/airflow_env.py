"""Airflow's environment on the embedded stack: AIRFLOW_HOME under .local, its metadata DB on the embedded Postgres."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanner_cdc.devstack import embedded_pg
from spanner_cdc.errors import SpannerCdcError
from spanner_cdc.names import MAINTENANCE_POOL, SPANNER_POOL
from spanner_cdc.resources import dags_folder
from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)

AIRFLOW_DATABASE = "airflow"
SQL_CONN_VAR = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"
MIGRATED_STAMP = ".spanner_cdc_migrated"


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
    """The AIRFLOW_* variables for the embedded stack: the package's DAG file, no examples, LocalExecutor.

    The UI plugin comes from the package's `airflow.plugins` entry point, so the plugins folder stays Airflow's default.
    """
    keys = _secrets(home)
    return {
        "AIRFLOW_HOME": str(home),
        SQL_CONN_VAR: sql_alchemy_conn,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder()),
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
        # a loop with nothing to do sleeps this long (default 1 s): a run's next task, or the skip of a wave after an
        # empty one, follows the last one sooner on a one-user stack
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.25",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }


def _airflow_db_url(settings: Settings, env: Mapping[str, str]) -> str:
    """Airflow's metadata DB: the one the user configured, else a database on the embedded Postgres."""
    configured = env.get(SQL_CONN_VAR)
    if configured:
        return configured
    server = embedded_pg.ensure_running(settings.home.absolute() / "postgres")
    return server.create_database(AIRFLOW_DATABASE)


def prepare(
    settings: Settings, *, pool_slots: int | None = None, api_port: int = 8080, airflow_db_url: str | None = None
) -> AirflowEnv:
    """Make Airflow usable on the embedded stack: DB migrated (once), the Spanner query pool in place.

    The environment also carries absolute SPANNER_CDC_* defaults (home, lake, lineage store), so the
    task processes find the same embedded services whatever their working directory.
    """
    home = settings.home.absolute() / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    url = airflow_db_url or _airflow_db_url(settings, os.environ)
    variables = airflow_environment(home, url, api_port=api_port)
    variables.update(
        {
            "SPANNER_CDC_HOME": str(settings.home.absolute()),
            "SPANNER_CDC_OUTPUT_ROOT": str(root if isinstance(root := settings.output_root, str) else root.absolute()),
            "SPANNER_CDC_METADATA_URL": embedded_pg.metadata_url(settings.home.absolute(), settings.metadata_url),
        }
    )
    upgrade_store(variables["SPANNER_CDC_METADATA_URL"])
    env = AirflowEnv(home, variables)
    stamp = home / MIGRATED_STAMP
    version = _airflow_version()
    if not stamp.exists() or stamp.read_text() != migrated_stamp(version, url):
        log.info("migrating Airflow's metadata database (first run takes a minute)")
        env.airflow(["db", "migrate"])
        # Only with the migration: later changes of the pool's slots in the UI are the operator's to keep.
        pools = {
            SPANNER_POOL: {"slots": pool_slots or settings.concurrency,
                           "description": "Bounds concurrent Spanner change stream queries"},
            MAINTENANCE_POOL: {"slots": 1, "description": "Lake maintenance, apart from the extracts"},
        }  # fmt: skip
        pools_file = home / "pools.json"
        pools_file.write_text(json.dumps(pools))
        try:
            env.airflow(["pools", "import", str(pools_file)])  # both in one Airflow CLI start (seconds of CPU each)
        finally:
            pools_file.unlink(missing_ok=True)
        write_private(stamp, migrated_stamp(version, url))
    return env


def migrated_stamp(version: str, url: str) -> str:
    """What the stamp says of a migration: Airflow's version, a digest of its DB URL (never the URL: its password), and
    the pools made with it (a release with a new pool sets it up once more)."""
    return f"{version} {hashlib.sha256(url.encode()).hexdigest()} {SPANNER_POOL},{MAINTENANCE_POOL}"


def write_private(path: Path, text: str) -> None:
    """`text` in a file only its owner may read (0600 from its creation on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older stamp, made with the umask's mode
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def upgrade_store(url: str) -> None:
    """The lineage store's schema, created or migrated (a no-op when current), as `spanner-cdc db upgrade` does."""
    from spanner_cdc.store import MetadataStore

    with MetadataStore.connect(url) as store:
        applied = store.upgrade()
    if applied:
        log.info("metadata store: applied %s", ", ".join(applied))


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow-core")


SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


def wait_healthy(url: str, process: subprocess.Popen[bytes], log_path: Path, timeout: float = 300) -> None:
    """Poll the api-server's health endpoint until it answers, or fail naming its log."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SpannerCdcError(f"the Airflow api-server exited with {process.returncode}; see {log_path}")
        try:
            with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise SpannerCdcError(f"the Airflow api-server did not answer on {url} within {timeout:.0f} s; see {log_path}")


# How long a service is waited for after its SIGTERM before it is killed. The scheduler's LocalExecutor waits for its
# running tasks, and the api-server for its requests: STOP_GRACE_S. The triggerer's trigger runner leaves some 10 s
# after its supervisor's SIGINT (the supervisor's escalation delay), though nothing of this stack's is left to finish by
# then (its one trigger work, the deadline callback, is a few store reads). The dag-processor exits within a second,
# unless the signal lands while its main thread releases logging's lock: its handler's sys.exit is then "ignored" there
# and it parses on until killed (seen in the suite: 30 s of waiting); a parse cut short loses nothing.
STOP_GRACE_S = 30.0
SHORT_GRACE_S = {"triggerer": 3.0, "dag-processor": 5.0}


def _stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM each service's process group (its workers and task processes too), then SIGKILL stragglers."""
    import signal

    for process in processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    for name, process in processes.items():
        wait_s = SHORT_GRACE_S.get(name, STOP_GRACE_S)
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            (log.info if name in SHORT_GRACE_S else log.warning)("airflow %s did not stop within %.0f s: killing it", name, wait_s)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def serve(
    env: AirflowEnv,
    *,
    extra_env: Mapping[str, str] | None = None,
    stop: Any = None,
    on_ready: Any = None,
) -> int:
    """Run the Airflow services until `stop` (a threading.Event) is set, Ctrl-C, or one of them dies."""
    import threading

    stop = stop or threading.Event()
    logs = env.home / "logs" / "services"
    logs.mkdir(parents=True, exist_ok=True)
    executable = str(Path(sys.executable).with_name("airflow"))
    port = env.env["AIRFLOW__API__PORT"]
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in SERVICES:
            args = [executable, name] + (["--port", port, "--host", "127.0.0.1"] if name == "api-server" else [])
            with (logs / f"{name}.log").open("ab") as log_file:
                # Own session per service: Ctrl-C reaches only us, and we stop each service with its children.
                processes[name] = subprocess.Popen(
                    args, env=env.full_env(extra_env), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
                )
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, processes["api-server"], logs / "api-server.log")
        if on_ready is not None:
            on_ready(url, logs)
        while not stop.is_set():
            for name, process in processes.items():
                if process.poll() is not None:
                    log.error("airflow %s exited with %s; see %s", name, process.returncode, logs / f"{name}.log")
                    return 1
            stop.wait(1.0)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        _stop(processes)


def run_dags(
    env: AirflowEnv,
    jobs: Sequence[Mapping[str, Any]],
    *,
    extra_env: Mapping[str, str] | None = None,
    log_path: Path,
    retries: int | None = None,
    retry_delay_s: float = 5.0,
    on_progress: Any = None,
) -> list[dict[str, Any]]:
    """Run DAG runs with dag.test() in a child process (see orchestration.dag_runs); its output goes to log_path."""
    from spanner_cdc.orchestration.dag_runs import PROGRESS

    plan = log_path.with_suffix(".plan.json")
    result = log_path.with_suffix(".result.json")
    plan.write_text(json.dumps(list(jobs), default=str))
    result.unlink(missing_ok=True)
    args = [sys.executable, "-m", "spanner_cdc.orchestration.dag_runs", "--plan", str(plan), "--result", str(result)]
    if retries is not None:
        args += ["--retries", str(retries), "--retry-delay", str(retry_delay_s)]
    with log_path.open("w") as log_file:
        # its own process group: when this caller is interrupted (Ctrl-C, a test's timeout) the runs, their
        # task processes and their Spark drivers go with it instead of running on unowned
        process = subprocess.Popen(args, env=env.full_env(extra_env), stdout=subprocess.PIPE, stderr=log_file, text=True,
                                   start_new_session=True)  # fmt: skip
        assert process.stdout is not None
        try:
            for line in process.stdout:
                log_file.write(line)
                if on_progress is not None and line.startswith(PROGRESS):
                    on_progress(line[len(PROGRESS):].rstrip())
            process.wait()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
    if not result.exists():
        raise SpannerCdcError(f"the DAG runs did not finish (exit {process.returncode}); see {log_path}")
    return list(json.loads(result.read_text()))
