import pytest
import sqlalchemy as sa

pytestmark = pytest.mark.integration


def test_fixture_gives_a_real_postgres_server(pg_url: str) -> None:
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        version = conn.execute(sa.text("SELECT version()")).scalar_one()
        database = conn.execute(sa.text("SELECT current_database()")).scalar_one()
    engine.dispose()
    assert version.startswith("PostgreSQL 18")
    assert database.startswith("t_")
