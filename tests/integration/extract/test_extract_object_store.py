"""The extract into a bucket on a real S3 server and a real GCS server: exact after a crash, marker written last."""

from __future__ import annotations

import io
import json
import signal
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.store import MetadataStore
from tests.fixtures.object_store import ObjectStore
from tests.fixtures.spark import LOCAL_MASTER
from tests.integration.extract.lake_reading import change_of
from tests.integration.extract.test_extract_crash import committed_paths, extract
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(35)]


def rows_of(locations: list[str]) -> list[dict[str, Any]]:
    rows = []
    for location in locations:
        table = pq.read_table(io.BytesIO(storage.read_bytes(location) or b""))
        assert table.schema.names == LAKE_SCHEMA.names, location
        rows += table.to_pylist()
    return rows


def task_journals(layout: LakeLayout) -> list[str]:
    return [p for p in storage.find(layout.staging_area) if "/_tasks/" in p]


def test_a_window_lands_in_the_bucket_exactly_after_a_crash(
    object_store: ObjectStore, make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any,
    store: MetadataStore, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    root = object_store.root(f"lake-{database.database_id}")
    # S3 behind a driver of the extract's own (the default), GCS behind the run's Spark Connect server: both kinds
    # of driver land in a bucket, without a second driver JVM per store
    master = LOCAL_MASTER if object_store.scheme == "s3" else request.getfixturevalue("spark_connect_server").url
    # each close also commits the window to the Iceberg change log, metadata and all in the bucket
    settings = extract_settings(database.database_id, STREAM, output_root=root, spark_master=master, iceberg_catalog="store")
    work = SmallWorkload(database)
    start = datetime.now(UTC)
    work.phase(range(0, 6))
    local_spanner.control.split(database.name, STREAM)
    work.phase(range(6, 12))
    end = datetime.now(UTC)
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    # killed after its files are in the bucket, before the commit: objects the manifest does not know
    assert extract(settings, start, end, **object_store.env, **{FAILPOINT_ENV: "after_publish:1"}) == -signal.SIGKILL
    written = published_locations(layout.location)
    assert written and not set(written) & committed_paths(store, settings)
    assert not storage.exists(layout.marker_location(start, end))
    assert task_journals(layout), "the killed run's wave tasks should have journaled their files' names in the bucket"
    # what an attempt over another range would have left under the window (a token re-read further)
    orphan = written[0].replace("-000.parquet", "-001.parquet")
    storage.write_bytes(orphan, storage.read_bytes(written[0]) or b"")
    assert extract(settings, start, end, **object_store.env) == 0
    published = published_locations(layout.location)
    assert set(published) == committed_paths(store, settings) and orphan not in published
    assert task_journals(layout) == []  # the killed run's swept by the re-run, the re-run's own cleared once committed
    marker = json.loads(storage.read_bytes(layout.marker_location(start, end)) or b"{}")
    assert sorted(f"{layout.location}/{f['path']}" for f in marker["files"]) == published
    assert marker["rows"] == len(work.expected) and marker["transaction_check"]["ok"]
    assert marker["transaction_check"]["transactions"] == 4
    assert Counter(change_of(r) for r in rows_of(published)) == Counter(work.expected)
    assert_iceberg_holds(settings, layout, published, work.expected, start)


def assert_iceberg_holds(settings: Any, layout: LakeLayout, published: list[str], expected: list[Any], start: datetime) -> None:
    """The window is one snapshot of the change log, holding exactly the marker's files and the workload's changes
    (this process has the bucket's endpoint in its environment, from the object_store fixture)."""
    from spanner_cdc.lake import iceberg

    props = iceberg.catalog_properties("store", metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    table = iceberg.changelog_table(iceberg.open_catalog(props), layout)
    assert [s["window_start"] for s in iceberg.window_snapshots(table)] == [start.isoformat()]
    assert sorted(task.file.file_path for task in table.scan().plan_files()) == published
    assert Counter(change_of(r) for r in table.scan().to_arrow().to_pylist()) == Counter(expected)
