"""The suite's Postgres servers: real, password-protected, reached as a non-superuser role over TCP."""

from typing import Any
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


def test_a_dev_stack_postgres_knows_who_started_it_and_down_stops_it(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from spanner_cdc.cli.main import main
    from spanner_cdc.devstack import embedded_pg

    home = Path(str(tmp_path))
    first = embedded_pg.ensure_running(home / "postgres")
    try:
        assert first.started  # this call started it: the demo stops such a one at its end
        again = embedded_pg.ensure_running(home / "postgres")
        assert (again.started, again.port) == (False, first.port)  # already running: someone else's to stop
        assert embedded_pg.running(home / "postgres") == again
        assert main(["down", "--home", str(home)]) == 0
        assert f"stopped the embedded Postgres on 127.0.0.1:{first.port}" in capsys.readouterr().out
        assert embedded_pg.running(home / "postgres") is None
        assert main(["down", "--home", str(home)]) == 0
        assert "no embedded Postgres running" in capsys.readouterr().out
        # started again on the port it had, so URLs an earlier run kept (the demo's state) still reach it
        restarted = embedded_pg.ensure_running(home / "postgres")
        assert (restarted.started, restarted.port) == (True, first.port)
    finally:
        embedded_pg.EmbeddedPostgres(home / "postgres", 0).stop()
