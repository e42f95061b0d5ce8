"""Start and stop the local Spanner server as a subprocess (tests, benchmarks, demos) and create databases on it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.devstack.processes import stop_process
from spanner_cdc.errors import SpannerCdcError
from spanner_cdc.local_spanner.control import ControlClient
from spanner_cdc.local_spanner.values import format_timestamp

log = logging.getLogger(__name__)

READY_PREFIX = "listening on "
GOOGLE_STANDARD_SQL, POSTGRESQL = "GOOGLE_STANDARD_SQL", "POSTGRESQL"


class LocalSpanner:
    """A local server process. `host` ("127.0.0.1:PORT") stays the same across restart()."""

    def __init__(
        self,
        data_dir: Path | str | None = None,
        clock_start: datetime | str | None = None,
        clock_rate: float = 1.0,
        extra_args: Sequence[str] = (),
        bind: str = "127.0.0.1",
        startup_timeout: float = 60.0,
        log_path: Path | str | None = None,
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.clock_start = format_timestamp(clock_start) if isinstance(clock_start, datetime) else clock_start
        self.clock_rate = clock_rate
        self.extra_args = list(extra_args)
        self.bind = bind
        self.startup_timeout = startup_timeout
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="local-spanner-", suffix=".log")[1])
        self.port = 0
        self._process: subprocess.Popen[str] | None = None
        self._control: ControlClient | None = None

    @property
    def host(self) -> str:
        if not self.port:
            raise SpannerCdcError("the local Spanner server is not running: call start() first")
        return f"{self.bind}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs (benchmarks read its CPU time)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    @property
    def control(self) -> ControlClient:
        if self._control is None:
            self._control = ControlClient(self.host)
        return self._control

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command(self) -> list[str]:
        args = [sys.executable, "-m", "spanner_cdc", "local-spanner", "serve", "--host", self.bind, "--port", str(self.port)]
        if self.data_dir is not None:
            args += ["--data-dir", str(self.data_dir)]
        if self.clock_start:
            args += ["--clock-start", self.clock_start]
        args += ["--clock-rate", repr(self.clock_rate), *self.extra_args]
        return args

    def start(self) -> LocalSpanner:
        if self.running:
            return self
        log_file = self.log_path.open("a", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "SPANNER_EMULATOR_HOST"}
        process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log_file, text=True, env=env)
        log_file.close()
        self._process = process
        ready: list[str] = []
        got_line = threading.Event()

        def read_stdout() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                if not ready:
                    ready.append(line.strip())
                    got_line.set()
            got_line.set()

        threading.Thread(target=read_stdout, name="local-spanner-stdout", daemon=True).start()
        got_line.wait(self.startup_timeout)
        if not ready or not ready[0].startswith(READY_PREFIX):
            self._terminate(kill=True)
            tail = self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:]
            raise SpannerCdcError(f"the local Spanner server did not start (log {self.log_path}):\n{tail}")
        self.port = int(ready[0].rsplit(":", 1)[1])
        log.info("local Spanner server running at %s (pid %s, log %s)", self.host, process.pid, self.log_path)
        return self

    def _terminate(self, kill: bool) -> None:
        if self._process is not None:
            stop_process(self._process, kill=kill)
        self._process = None

    def stop(self) -> None:
        """Stop gracefully (SIGTERM); the host stays reserved for a later start()."""
        if self._control is not None:
            self._control.close()
            self._control = None
        self._terminate(kill=False)

    def kill(self) -> None:
        """Stop abruptly (SIGKILL), as a crash would."""
        if self._control is not None:
            self._control.close()
            self._control = None
        self._terminate(kill=True)

    def restart(self, crash: bool = False) -> LocalSpanner:
        """Stop and start again on the same port (state survives only with data_dir)."""
        self.kill() if crash else self.stop()
        return self.start()

    def env(self) -> dict[str, str]:
        return {"SPANNER_EMULATOR_HOST": self.host}

    def __enter__(self) -> LocalSpanner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spanner_client(host: str, project: str) -> Any:
    """A google-cloud-spanner Client for the server at host:port (insecure channel, anonymous credentials)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import spanner

    configured = os.environ.get("SPANNER_EMULATOR_HOST")
    if configured and configured != host:
        raise SpannerCdcError(f"SPANNER_EMULATOR_HOST={configured} would override the requested host {host}; unset it or make them equal")
    return spanner.Client(project=project, credentials=AnonymousCredentials(), client_options={"api_endpoint": host},
                          disable_builtin_metrics=True)


def create_database(
    host: str, project: str, instance: str, database: str, ddl: Sequence[str] = (), dialect: str = GOOGLE_STANDARD_SQL
) -> Any:
    """Create the instance if missing and a database with `ddl` (PostgreSQL: DDL applied after creation, as
    Cloud Spanner requires); returns the client's Database object."""
    from google.cloud.spanner_admin_database_v1 import DatabaseDialect

    client = spanner_client(host, project)
    spanner_instance = client.instance(instance, configuration_name=f"projects/{project}/instanceConfigs/emulator-config",
                                       display_name=instance, node_count=1)
    if not spanner_instance.exists():
        spanner_instance.create().result(60)
    if dialect.upper() == POSTGRESQL:
        db = spanner_instance.database(database, database_dialect=DatabaseDialect.POSTGRESQL)
        db.create().result(60)
        if ddl:
            db.update_ddl(list(ddl)).result(60)
    elif dialect.upper() == GOOGLE_STANDARD_SQL:
        db = spanner_instance.database(database, ddl_statements=list(ddl))
        db.create().result(60)
    else:
        raise SpannerCdcError(f"invalid dialect {dialect!r}: expected {GOOGLE_STANDARD_SQL} or {POSTGRESQL}")
    return db
