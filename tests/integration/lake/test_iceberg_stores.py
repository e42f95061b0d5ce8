"""The Iceberg change log over a bucket: metadata and data files on an S3 server and a GCS server, endpoints from the environment."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from spanner_cdc.lake import iceberg, storage
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.settings import Settings
from tests.fixtures.object_store import ObjectStore
from tests.integration.lake.test_iceberg import HOUR, land_files, scanned_uuids, uuids_of
from tests.unit.lake.records import T0

pytestmark = pytest.mark.integration


def test_a_window_commits_and_reads_back_on_a_bucket(object_store: ObjectStore, pg_url: str, tmp_path: Path) -> None:
    root = object_store.root(f"ice-{uuid.uuid4().hex[:8]}")
    settings = Settings(metadata_url=pg_url, output_root=root, stream="cs", namespace=f"b_{object_store.scheme}", iceberg_catalog="store")
    local = land_files(LakeLayout(tmp_path / "lake", "cs", settings.namespace), tmp_path, T0, 3)
    layout = LakeLayout(root, "cs", settings.namespace)
    files = []
    for f in local:  # the same files at their bucket names
        remote = layout.location + f.path[len(str(tmp_path / "lake" / "cs" / settings.namespace)):]
        storage.write_bytes(remote, Path(f.path).read_bytes())
        files.append(dataclasses.replace(f, path=remote))
    from pyiceberg.io import pyarrow as pyiceberg_arrow

    pyiceberg_arrow._cached_resolve_s3_region.cache_clear()  # pyiceberg's lookup of a bucket's region at AWS
    done = iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=files)
    assert done is not None and done.added == len(files)
    props = iceberg.catalog_properties("store", metadata_url=pg_url, warehouse=root)
    table = iceberg.changelog_table(iceberg.open_catalog(props), layout)
    if object_store.scheme == "s3":  # the S3 server's region is the environment's: AWS is never asked
        assert table.io.properties["s3.region"] == object_store.env["AWS_DEFAULT_REGION"]
        assert pyiceberg_arrow._cached_resolve_s3_region.cache_info().misses == 0
    assert table.metadata_location.startswith(f"{layout.location}/_iceberg/metadata/")
    assert scanned_uuids(table) == uuids_of(local)
    again = iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=files)
    assert again is not None and again.snapshot_id is None
