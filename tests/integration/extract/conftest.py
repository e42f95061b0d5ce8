"""Extract fixtures: an upgraded metadata store per module, Settings pointing at the run's services."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.settings import Settings
from spanner_cdc.store import MetadataStore
from tests.fixtures.spanner import INSTANCE, PROJECT
from tests.fixtures.spark import LOCAL_MASTER


@pytest.fixture(scope="module")
def store(pg_url: str) -> Iterator[MetadataStore]:
    metadata = MetadataStore.connect(pg_url)
    metadata.upgrade()
    yield metadata
    metadata.close()


@pytest.fixture
def extract_settings(store: MetadataStore, pg_url: str, spanner_env: str, tmp_path: Path) -> Callable[..., Settings]:
    """settings(database_id, stream, **changes) for the pipeline against the run's Spanner, Postgres and Spark.

    The module shares one metadata store, so each database gets its own lineage namespace.
    """

    def make(database: str, stream: str, **changes: Any) -> Settings:
        values: dict[str, Any] = dict(
            project=PROJECT, instance=INSTANCE, database=database, stream=stream, metadata_url=pg_url,
            output_root=tmp_path / "lake", spark_master=LOCAL_MASTER, emulator_host=spanner_env,
            heartbeat_ms=1000, concurrency=2, home=tmp_path / "home", namespace=f"ns_{database}",
        )  # fmt: skip
        values.update(changes)
        return Settings(**values)

    return make
