"""Store fixtures: an upgraded store on the module's database, and fresh empty databases on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from spanner_cdc.store import MetadataStore
from tests.fixtures.postgres import PostgresRole, create_owned_database

# Both Postgres drivers a URL can name: psycopg2 (binds on the client) and psycopg 3 (binds on the server).
DRIVERS = ("psycopg2", "psycopg")


@pytest.fixture(scope="module", params=DRIVERS)
def store(
    pg_url: str,
    embedded_postgres: EmbeddedPostgres | None,
    pg_role: PostgresRole | None,
    request: pytest.FixtureRequest,
) -> Iterator[MetadataStore]:
    """An upgraded store through each driver, each on a database of its own (tests reuse lineage names)."""
    database = None
    if request.param != DRIVERS[0]:
        if embedded_postgres is None or pg_role is None:
            pytest.skip("needs the embedded Postgres for a second database")
        database, pg_url = create_owned_database(embedded_postgres, pg_role, prefix="drv_")
    url = sa.make_url(pg_url).set(drivername=f"postgresql+{request.param}")
    metadata = MetadataStore.connect(url.render_as_string(hide_password=False))
    metadata.upgrade()
    yield metadata
    metadata.close()
    if database is not None:
        embedded_postgres.drop_database(database)  # type: ignore[union-attr]


@pytest.fixture
def empty_database(
    embedded_postgres: EmbeddedPostgres | None, pg_role: PostgresRole | None
) -> Iterator[Callable[[], str]]:
    """Makes databases with no schema at all, owned by the run's role (needs the embedded server)."""
    if embedded_postgres is None or pg_role is None:
        pytest.skip("needs the embedded Postgres to create databases")
    made: list[str] = []

    def make() -> str:
        name, url = create_owned_database(embedded_postgres, pg_role, prefix="empty_")
        made.append(name)
        return url

    yield make
    for name in made:
        embedded_postgres.drop_database(name)
