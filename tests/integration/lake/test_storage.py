"""The lake's storage layer against a real S3 server and a real GCS server: whole writes, listing, deletion."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack import demo_summary
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


def test_the_demo_summary_reads_a_lake_in_a_bucket_as_on_a_local_path(
    object_store: ObjectStore, tmp_path: Path
) -> None:
    changes = pa.table({
        "uuid": ["u1", "u2", "u3"], "object": ["Singers", "Singers", "Albums"], "keys": ['{"id": 1}', '{"id": 2}', '{"id": 9}'],
        "commit_timestamp": pa.array([datetime(2026, 1, 1, 5, m, tzinfo=UTC) for m in (1, 2, 3)], pa.timestamp("us", "UTC")),
        "change_type": ["INSERT", "UPDATE", "DELETE"], "new_values": ['{"n": "a"}', '{"n": "b"}', "{}"],
        "old_values": ["{}", '{"n": "a"}', '{"t": "x"}'],
    })  # fmt: skip
    sink = pa.BufferOutputStream()
    pq.write_table(changes, sink)
    data = sink.getvalue().to_pybytes()
    read = {}
    for root in (str(tmp_path / "lake"), object_store.root(f"demo-{uuid.uuid4().hex[:8]}")):
        lake = storage.join(root, "demo_stream", "live")
        for name in ("table=Singers/window_start=w/part-000.parquet", "_staging/t/part-000.parquet", "_windows/m.json"):
            storage.write_bytes(storage.join(lake, name), data)
        files = demo_summary.published_files(lake)
        assert files == [storage.join(lake, "table=Singers/window_start=w/part-000.parquet")]
        read[root] = (demo_summary.lake_identities(files), demo_summary.lake_uuids(files))
    local, bucket = read.values()
    assert local == bucket and bucket[1] == ["u1", "u2", "u3"]
    assert [(table, change) for table, _, _, change, _, _ in bucket[0]] == [
        ("Singers", "INSERT"),
        ("Singers", "UPDATE"),
        ("Albums", "DELETE"),
    ]
