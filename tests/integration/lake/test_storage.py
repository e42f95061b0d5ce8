"""The lake's storage layer against a real S3 server and a real GCS server: whole writes, listing, deletion."""

from __future__ import annotations

import uuid

import pytest

from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import published_locations
from tests.fixtures.object_store import ObjectStore

pytestmark = pytest.mark.integration


def test_objects_are_written_listed_and_removed(object_store: ObjectStore) -> None:
    root = object_store.root(f"t-{uuid.uuid4().hex[:8]}")
    assert storage.find(root) == [] and storage.read_bytes(storage.join(root, "none.json")) is None
    storage.write_bytes(storage.join(root, "a", "x.parquet"), b"one")
    storage.write_bytes(storage.join(root, "a", "x.parquet"), b"two")  # replaced whole
    storage.write_bytes(storage.join(root, "_windows", "m.json"), b"{}")
    storage.write_bytes(storage.join(root, "b", "y.parquet"), b"three")
    assert storage.read_bytes(storage.join(root, "a", "x.parquet")) == b"two"
    assert storage.find(root) == [f"{root}/_windows/m.json", f"{root}/a/x.parquet", f"{root}/b/y.parquet"]
    assert storage.glob(f"{root}/*/x*") == [f"{root}/a/x.parquet"]
    assert published_locations(root) == [f"{root}/a/x.parquet", f"{root}/b/y.parquet"]
    assert storage.size_of(f"{root}/b/y.parquet") == 5
    assert storage.remove([f"{root}/a/x.parquet", f"{root}/a/gone.parquet"]) == [f"{root}/a/x.parquet"]
    assert not storage.exists(f"{root}/a/x.parquet") and storage.exists(f"{root}/b/y.parquet")
