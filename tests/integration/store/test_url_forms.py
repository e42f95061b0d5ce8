"""The store over every URL form a user or an Airflow connection writes, against the run's password-protected Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from spanner_cdc.errors import StoreUnreachable
from spanner_cdc.model.records import ChildPartition
from spanner_cdc.orchestration.connections import metadata_url_from
from spanner_cdc.store import MetadataStore, State
from tests.fixtures.postgres import PostgresRole

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, tzinfo=UTC)
W1 = T0 + timedelta(hours=1)


@dataclass(frozen=True)
class Target:
    """The module's database on the run's server, reached as the run's role."""

    server: EmbeddedPostgres
    role: PostgresRole
    database: str

    @property
    def auth(self) -> str:
        return f"{quote(self.role.name, safe='')}:{quote(self.role.password, safe='')}"

    def tcp(self, scheme: str, query: str = "") -> str:
        return f"{scheme}://{self.auth}@127.0.0.1:{self.server.port}/{self.database}{query}"


@pytest.fixture(scope="module")
def target(embedded_postgres: EmbeddedPostgres | None, pg_role: PostgresRole | None, pg_url: str) -> Target:
    if embedded_postgres is None or pg_role is None:
        pytest.skip("the URL forms need the run's own Postgres (SPANNER_CDC_METADATA_URL is set)")
    return Target(embedded_postgres, pg_role, pg_url.rsplit("/", 1)[1])


def airflow_connection_url(target: Target) -> str:
    """What the DAGs get from a real Airflow `postgres` connection defined as a URI (as AIRFLOW_CONN_* does)."""
    from airflow.models.connection import Connection

    uri = f"postgres://{target.auth}@127.0.0.1:{target.server.port}/{target.database}?sslmode=disable"
    conn = Connection(conn_id="spanner_cdc_metadata", uri=uri)
    assert conn.password == target.role.password  # Airflow unquoted it: metadata_url_from must quote it again
    return metadata_url_from(conn)  # type: ignore[arg-type]


def airflow_socket_connection_url(target: Target) -> str:
    """A `postgres` connection whose host is the server's socket directory."""
    from airflow.models.connection import Connection

    conn = Connection(
        conn_id="spanner_cdc_metadata", conn_type="postgres", host=str(target.server.socket_dir),
        port=target.server.port, login=target.role.name, password=target.role.password, schema=target.database,
    )  # fmt: skip
    return metadata_url_from(conn)  # type: ignore[arg-type]


# form -> (URL for the target, the driver SQLAlchemy must use, whether the session is over TCP)
FORMS: dict[str, tuple[Callable[[Target], str], str, bool]] = {
    "postgresql://": (lambda t: t.tcp("postgresql"), "psycopg2", True),
    "postgres://": (lambda t: t.tcp("postgres"), "psycopg2", True),
    "postgresql+psycopg2://": (lambda t: t.tcp("postgresql+psycopg2"), "psycopg2", True),
    "postgresql+psycopg://": (lambda t: t.tcp("postgresql+psycopg"), "psycopg", True),
    "sslmode=disable": (lambda t: t.tcp("postgresql", "?sslmode=disable"), "psycopg2", True),
    "sslmode=prefer": (lambda t: t.tcp("postgresql", "?sslmode=prefer"), "psycopg2", True),
    "unix socket": (
        lambda t: f"postgresql://{t.auth}@/{t.database}?host={t.server.socket_dir}&port={t.server.port}", "psycopg2", False
    ),
    "airflow connection": (airflow_connection_url, "psycopg2", True),
    "airflow socket connection": (airflow_socket_connection_url, "psycopg2", False),
}


def claim_and_complete(store: MetadataStore) -> None:
    """A token bootstrapped, claimed and completed: the statements an extract runs."""
    lineage = store.ensure_lineage("s_" + uuid.uuid4().hex[:8], "live", database="cdc")
    store.bootstrap(lineage.id, T0, [ChildPartition("a", ())])
    (claim,) = store.claim(lineage.id, window_end=W1, owner="w1", lease=timedelta(minutes=5), tokens=["a"])
    store.complete(claim, watermark=T0 + timedelta(minutes=30), finished=False, records=7)
    (row,) = store.partitions(lineage.id)
    assert (row.token, row.state, row.watermark) == ("a", State.READY, T0 + timedelta(minutes=30))


@pytest.mark.parametrize("form", list(FORMS))
def test_store_connects_and_upgrades_with_each_url_form(target: Target, form: str) -> None:
    make_url, driver, over_tcp = FORMS[form]
    with MetadataStore.connect(make_url(target)) as store:
        engine = store._db.engine
        assert engine.dialect.driver == driver
        with engine.connect() as conn:
            user, address = conn.execute(sa.text("SELECT current_user, inet_server_addr()")).one()
        assert user == target.role.name  # the password was checked (scram): it reached the server intact
        assert (address is not None) == over_tcp
        store.upgrade()
        store.check_schema()


@pytest.mark.parametrize("form", list(FORMS))
def test_claim_and_complete_with_each_url_form(target: Target, form: str) -> None:
    with MetadataStore.connect(FORMS[form][0](target)) as store:
        store.upgrade()
        claim_and_complete(store)


def test_a_wrong_password_is_refused_with_a_masked_line(target: Target) -> None:
    wrong = "wr0ng:" + uuid.uuid4().hex[:6]
    url = f"postgresql://{target.role.name}:{quote(wrong, safe='')}@127.0.0.1:{target.server.port}/{target.database}"
    with pytest.raises(StoreUnreachable) as raised:
        MetadataStore.connect(url)
    text = str(raised.value)
    assert f'password authentication failed for user "{target.role.name}"' in text
    assert wrong not in text and quote(wrong, safe="") not in text and "\n" not in text
    assert f"postgresql://{target.role.name}:***@127.0.0.1:{target.server.port}/" in text


def test_sslmode_require_against_a_server_without_ssl_says_what_to_change(target: Target) -> None:
    with pytest.raises(StoreUnreachable) as raised:
        MetadataStore.connect(target.tcp("postgresql", "?sslmode=require"))
    assert str(raised.value).endswith(
        "(server does not support SSL, but SSL was required): "
        "set sslmode=prefer or sslmode=disable in the URL, or enable SSL on the server"
    )
    assert target.role.password not in str(raised.value)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `spanner-cdc` console script, with no SPANNER_CDC_* of this process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    command = [str(Path(sys.executable).with_name("spanner-cdc")), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**clean, **(env or {})})


def test_db_upgrade_through_the_cli_with_the_plain_url(target: Target, empty_database: Callable[[], str]) -> None:
    url = empty_database()
    assert url.startswith(f"postgresql://{target.role.name}:")
    result = cli("db", "upgrade", "--metadata-url", url)
    assert result.returncode == 0, result.stderr
    assert "applied 0001_" in result.stdout
    assert f"metadata store at postgresql://{target.role.name}:***@127.0.0.1:" in result.stdout
    shown = result.stdout + result.stderr
    assert target.role.password not in shown and quote(target.role.password, safe="") not in shown
    status = cli("db", "status", env={"SPANNER_CDC_METADATA_URL": url})
    assert status.returncode == 0, status.stdout + status.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--metadata-url", "mysql://user:secret@host/db"], {},
            "spanner-cdc: error: invalid --metadata-url='mysql://user:***@host/db': expected a Postgres URL",
        ),
        (
            [], {"SPANNER_CDC_METADATA_URL": "mysql://user:secret@host/db"},
            "spanner-cdc: error: invalid SPANNER_CDC_METADATA_URL='mysql://user:***@host/db': expected a Postgres URL",
        ),
        (
            ["--metadata-url", "postgresql+asyncpg://user:secret@host/db"], {},
            "spanner-cdc: error: metadata store URL postgresql+asyncpg://user:***@host/db names the driver asyncpg",
        ),
        (
            ["--metadata-url", "postgresql://user:p@ss:w/rd%secret@127.0.0.1:5432/db"], {},
            "spanner-cdc: error: metadata store URL postgresql://user:***@127.0.0.1:5432/db is not a usable Postgres URL",
        ),
    ],
)
def test_bad_urls_through_the_cli_are_one_masked_line(args: list[str], env: dict[str, str], expected: str) -> None:
    result = cli("db", "upgrade", *args, env=env)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected), lines[0]
    assert "secret" not in result.stderr + result.stdout


def test_a_wrong_password_through_the_cli_is_one_masked_line(target: Target) -> None:
    wrong = "secret-" + uuid.uuid4().hex[:6]
    url = f"postgresql://{target.role.name}:{wrong}@127.0.0.1:{target.server.port}/{target.database}"
    result = cli("db", "upgrade", "--metadata-url", url)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"spanner-cdc: error: metadata store at postgresql://{target.role.name}:***@127.0.0.1:")
    assert f'password authentication failed for user "{target.role.name}"' in lines[0]
    assert wrong not in result.stderr + result.stdout
