"""What `airflow_env.prepare` leaves in Airflow's database: the pools the DAGs' tasks run in."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from spanner_cdc.names import MAINTENANCE_POOL, SPANNER_POOL
from spanner_cdc.settings import Settings

pytestmark = [pytest.mark.integration]


def test_the_migrated_database_has_the_spanner_and_maintenance_pools(
    migrated_airflow_db: Callable[[], tuple[str, str]], embedded_postgres: EmbeddedPostgres | None
) -> None:
    """The run's template is made by `prepare` itself (tests/fixtures/airflow_db.py); a copy holds what it made."""
    name, url = migrated_airflow_db()
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            pools = {row.pool: (row.slots, row.description) for row in conn.execute(sa.text("SELECT * FROM slot_pool"))}
    finally:
        engine.dispose()
        if embedded_postgres is not None:
            embedded_postgres.drop_database(name)
    assert pools[SPANNER_POOL] == (Settings().concurrency, "Bounds concurrent Spanner change stream queries"), pools
    assert pools[MAINTENANCE_POOL] == (1, "Lake maintenance, apart from the extracts"), pools
