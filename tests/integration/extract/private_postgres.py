"""Stand-in for tests/fixtures/postgres.py's private_postgres (engineer A's): a password-protected Postgres over TCP."""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from spanner_cdc import embedded_pg

USER, DATABASE = "cdc_owner", "cdc_store"
# A plain postgresql:// URL fails in the store until engineer A's fix ("there is no parameter $1", issue 12).
SCHEME = "postgresql+psycopg2"


@dataclass
class PrivatePostgres:
    """`.url` is a plain postgresql:// URL whose password needs quoting; restart() keeps the port and data."""

    data_dir: Path
    port: int
    password: str

    @property
    def url(self) -> str:
        return f"{SCHEME}://{USER}:{quote(self.password, safe='')}@127.0.0.1:{self.port}/{DATABASE}"

    def _options(self) -> str:
        return f"-h 127.0.0.1 -p {self.port} -k '' -c max_connections=300 -c fsync=off"

    def restart(self) -> None:
        embedded_pg._run("pg_ctl", ["-D", str(self.data_dir), "-m", "fast", "-w", "stop"])
        embedded_pg._run("pg_ctl", ["-D", str(self.data_dir), "-w", "-t", "60", "-l", str(self.data_dir / "server.log"),
                                    "-o", self._options(), "start"])  # fmt: skip

    def stop(self) -> None:
        embedded_pg._run("pg_ctl", ["-D", str(self.data_dir), "-m", "fast", "-w", "stop"], check=False)


def start_private_postgres() -> PrivatePostgres:
    """A server of its own: the superuser and the store's owner both need a password (scram) over TCP."""
    root = Path(tempfile.mkdtemp(prefix="spanner-cdc-private-pg-"))
    server = embedded_pg.ensure_running(root / "postgres")
    password = "p@ss:w/rd%" + secrets.token_hex(6)  # every character URLs reserve
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=server.port, user="postgres", dbname="postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SET password_encryption = 'scram-sha-256'")
        cur.execute(f"CREATE ROLE {USER} LOGIN PASSWORD %s", (password,))
        cur.execute("ALTER ROLE postgres PASSWORD %s", (password,))
        cur.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")
    conn.close()
    (server.data_dir / "pg_hba.conf").write_text("host all all 127.0.0.1/32 scram-sha-256\n")
    private = PrivatePostgres(server.data_dir, server.port, password)
    private.restart()
    return private


def remove(private: PrivatePostgres) -> None:
    private.stop()
    shutil.rmtree(private.data_dir.parent, ignore_errors=True)
