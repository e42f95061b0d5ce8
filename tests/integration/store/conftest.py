"""Store fixtures: an upgraded store on the module's database, and fresh empty databases on demand."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from spanner_cdc.embedded_pg import EmbeddedPostgres
from spanner_cdc.store import MetadataStore


@pytest.fixture(scope="module")
def store(pg_url: str) -> Iterator[MetadataStore]:
    metadata = MetadataStore.connect(pg_url)
    metadata.upgrade()
    yield metadata
    metadata.close()


@pytest.fixture
def empty_database(embedded_postgres: EmbeddedPostgres | None) -> Iterator[Callable[[], str]]:
    """Makes databases with no schema at all (needs the embedded server: an external URL is one database)."""
    if embedded_postgres is None:
        pytest.skip("needs the embedded Postgres to create databases")
    made: list[str] = []

    def make() -> str:
        name = "empty_" + uuid.uuid4().hex[:10]
        made.append(name)
        return embedded_postgres.create_database(name)

    yield make
    for name in made:
        embedded_postgres.drop_database(name)
