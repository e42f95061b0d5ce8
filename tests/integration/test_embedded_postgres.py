"""The suite's Postgres servers: real, password-protected, reached as a non-superuser role over TCP."""

from urllib.parse import quote, unquote, urlsplit

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from tests.fixtures.postgres import PostgresRole, PrivatePostgres

pytestmark = pytest.mark.integration


def test_fixture_gives_a_real_postgres_server(pg_url: str) -> None:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    with engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version()")).scalar_one()
        database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
        superuser = conn.execute(sa.text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar_one()
    engine.dispose()
    assert version.startswith("PostgreSQL 18")
    assert database.startswith("t_")
    assert superuser is False


def test_pg_url_is_plain_with_a_quoted_password_the_server_checks(
    pg_url: str, embedded_postgres: EmbeddedPostgres | None, pg_role: PostgresRole | None
) -> None:
    if embedded_postgres is None or pg_role is None:
        pytest.skip("SPANNER_CDC_METADATA_URL points at another Postgres")
    parts = urlsplit(pg_url)
    assert (parts.scheme, parts.hostname, parts.port) == ("postgresql", "127.0.0.1", embedded_postgres.port)
    assert unquote(parts.password or "") == pg_role.password and parts.password != pg_role.password
    wrong = pg_url.replace(quote(pg_role.password, safe=""), "not-the-password")
    engine = sa.create_engine(wrong.replace("postgresql://", "postgresql+psycopg2://"))
    with pytest.raises(sa.exc.OperationalError, match="password authentication failed"):
        engine.connect()
    engine.dispose()


def test_private_postgres_restarts_on_the_same_url(private_postgres: PrivatePostgres) -> None:
    assert private_postgres.url.startswith("postgresql://")
    assert quote(private_postgres.password, safe="") in private_postgres.url
    assert private_postgres.password not in private_postgres.url  # it needs quoting
    engine = sa.create_engine(private_postgres.url.replace("postgresql://", "postgresql+psycopg2://"))
    with engine.connect() as conn:
        conn.execute(sa.text("CREATE TABLE kept (x int)"))
        conn.execute(sa.text("INSERT INTO kept VALUES (1)"))
        conn.commit()
        before = conn.execute(sa.text("SELECT pg_postmaster_start_time()")).scalar_one()
        private_postgres.restart()
        with pytest.raises(sa.exc.OperationalError):  # the restart cut the open session
            conn.execute(sa.text("SELECT 1"))
    with engine.connect() as conn:
        after = conn.execute(sa.text("SELECT pg_postmaster_start_time()")).scalar_one()
        assert conn.execute(sa.text("SELECT x FROM kept")).scalar_one() == 1  # same data
    assert after > before
    private_postgres.stop()
    engine.dispose()  # a new connection, not one from the pool
    with pytest.raises(sa.exc.OperationalError):
        engine.connect()
    private_postgres.start()  # the module's other users get it back
