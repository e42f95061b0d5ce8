"""Store fixtures: an upgraded store on the module's database, and fresh empty databases on demand."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from spanner_cdc.embedded_pg import EmbeddedPostgres
from spanner_cdc.store import MetadataStore
from tests.fixtures.postgres import PostgresRole, create_owned_database


@pytest.fixture(scope="module")
def store(pg_url: str) -> Iterator[MetadataStore]:
    metadata = MetadataStore.connect(pg_url)
    metadata.upgrade()
    yield metadata
    metadata.close()


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
