"""A window applied to a current-state table many times larger than the memory its apply tasks may take: the Spark
tasks, each bounded by the kernel to MEMORY beyond its imports (state_task_memory: a process of its own under
RLIMIT_DATA), give the exact state; a task that would hold a bucket's rows fails at the same bound."""

from __future__ import annotations

import base64
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.extract.current_state import _apply_tasks, _commit
from spanner_cdc.lake.current_state import Column
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import (
    BUCKETS,
    SNAPSHOT_AT,
    commit_row_delta,
    ensure_state_table,
    live_rows,
    window_properties,
)
from spanner_cdc.spark.state_job import Candidate, StateTask, _partition, run_state_job, run_task, write_data
from spanner_cdc.spark.task_memory import TaskMemoryError
from spanner_cdc.store.models import WindowRow

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(32)]
SEED = 30
MEMORY = 64 << 20  # what each apply task may take beyond its imports
ROWS_PER_BUCKET, FILES_PER_BUCKET = 256, 2
BLOB = 256 << 10  # random bytes: the table's Parquet is about as large as its rows in memory
T0 = datetime(2026, 1, 1, tzinfo=UTC)
END = T0 + timedelta(hours=1)
TYPES = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Qty", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 2},
    {"name": "Blob", "type": {"code": "BYTES"}, "is_primary_key": False, "ordinal_position": 3},
]
CHANGE_SCHEMA = pa.schema([
    ("object", pa.string()), ("commit_timestamp", pa.timestamp("us", tz="UTC")), ("server_transaction_id", pa.string()),
    ("record_sequence", pa.string()), ("mod_index", pa.int64()), ("change_type", pa.string()), ("keys", pa.string()),
    ("new_values", pa.string()), ("column_types", pa.string()), ("value_capture_type", pa.string()),
])  # fmt: skip


def blob(key: int, version: int, size: int = BLOB) -> bytes:
    return random.Random(f"{key}:{version}").randbytes(size)


def seed(handle: Any) -> tuple[dict[int, tuple[int, bytes | tuple[int, int]]], int, int]:
    """ROWS_PER_BUCKET keys in each bucket, written bucket by bucket with the state's own writer (as the seed's tasks
    write them): key -> (Qty, (key, version) of its Blob), and the table's Parquet bytes and in-memory Arrow bytes."""
    bucket_of = handle.spec().fields[0].transform.transform(handle.schema().find_field("Id").field_type)
    keys: dict[int, list[int]] = {}
    key = 0
    while len(keys) < BUCKETS or min(len(k) for k in keys.values()) < ROWS_PER_BUCKET:
        keys.setdefault(bucket_of(key), []).append(key)
        key += 1
    state: dict[int, Any] = {}
    files, arrow_bytes = [], 0
    plain = pa.schema([("Id", pa.int64(), False), ("Qty", pa.int64()), ("Blob", pa.binary())])
    for bucket in range(BUCKETS):
        ids = keys[bucket][:ROWS_PER_BUCKET]
        for part in range(FILES_PER_BUCKET):
            chunk = sorted(ids[part::FILES_PER_BUCKET])
            data = pa.table([pa.array(chunk, pa.int64()), pa.array(chunk, pa.int64()), pa.array([blob(k, 0) for k in chunk], pa.binary())],
                            schema=plain)  # fmt: skip
            arrow_bytes += data.nbytes
            files.append(write_data(handle, data, _partition(handle, "Id", bucket)))
            state.update({k: (k, (k, 0)) for k in chunk})
    commit_row_delta(handle, files, [], {SNAPSHOT_AT: T0.isoformat()})
    return state, sum(f.file_size_in_bytes for f in files), arrow_bytes


def window(path: Path, state: dict[int, Any], rng: random.Random) -> dict[int, Any]:
    """A window of NEW_VALUES changes over random keys of every bucket: partial updates of Qty (the apply reads the
    row's Blob from the table), updates of the Blob, deletes, inserts of new keys, a key deleted and inserted again
    and one updated then deleted; the state it leads to."""
    types = json.dumps(TYPES)
    expected = dict(state)
    changes: list[tuple[str, int, dict[str, str]]] = []
    picked = rng.sample(sorted(state), 360)
    for key in picked[:200]:
        changes.append(("UPDATE", key, {"Qty": str(-key)}))
        expected[key] = (-key, expected[key][1])
    for key in picked[200:240]:
        changes.append(("UPDATE", key, {"Blob": base64.b64encode(blob(key, 1, 4096)).decode()}))
        expected[key] = (expected[key][0], (key, 1))
    for key in picked[240:330]:
        changes.append(("DELETE", key, {}))
        del expected[key]
    for key in picked[330:345]:  # deleted, then inserted again with a new Blob
        changes += [("DELETE", key, {}), ("INSERT", key, {"Qty": "7", "Blob": base64.b64encode(blob(key, 2, 4096)).decode()})]
        expected[key] = (7, (key, 2))
    for key in picked[345:360]:  # a partial update, then a delete
        changes += [("UPDATE", key, {"Qty": "1"}), ("DELETE", key, {})]
        del expected[key]
    for key in range(10**6, 10**6 + 60):
        changes.append(("INSERT", key, {"Qty": str(key), "Blob": base64.b64encode(blob(key, 3, 4096)).decode()}))
        expected[key] = (key, (key, 3))
    rows = [
        {"object": "Wide", "commit_timestamp": T0 + timedelta(microseconds=i + 1), "server_transaction_id": f"t{i}", "record_sequence": "0",
         "mod_index": 0, "change_type": kind, "keys": json.dumps({"Id": str(key)}), "new_values": json.dumps(values),
         "column_types": types, "value_capture_type": "NEW_VALUES"}
        for i, (kind, key, values) in enumerate(changes)
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=CHANGE_SCHEMA), path)
    return expected


def expected_blob(version: tuple[int, int]) -> bytes:
    key, n = version
    return blob(key, n, BLOB if n == 0 else 4096)


def test_a_window_applied_to_a_table_ten_times_its_tasks_memory_gives_the_exact_state(spark: Any, tmp_path: Path) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("memory", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    layout = LakeLayout(str(tmp_path / "lake"), "s", "ns")
    handle = ensure_state_table(catalog, layout, "Wide", [Column(**c) for c in TYPES])
    state, parquet_bytes, arrow_bytes = seed(handle)
    # the table, as its rows take memory and as its files take storage, is over 10x what a task may take
    assert arrow_bytes >= 10 * MEMORY and parquet_bytes >= 10 * MEMORY, (arrow_bytes, parquet_bytes)
    expected = window(tmp_path / "window.parquet", state, random.Random(SEED))

    handle.refresh()
    row = WindowRow(0, T0, END, "COMPLETE", None, None, None, None, T0, END)
    tasks = _apply_tasks(handle, "Wide", {}, [str(tmp_path / "window.parquet")], row, MEMORY)
    assert len(tasks) == BUCKETS and all(t.memory == MEMORY and len(t.candidates) == FILES_PER_BUCKET for t in tasks)
    snapshot_id = _commit(handle, run_state_job(spark, tasks), window_properties(T0, END))

    # the window's snapshot, row for row and value for value (read a batch at a time)
    assert live_rows(handle, snapshot_id) == len(expected)
    seen = set()
    for batch in handle.scan(snapshot_id=snapshot_id).to_arrow_batch_reader():
        for got in batch.to_pylist():
            key = got["Id"]
            assert key not in seen and key in expected, key
            seen.add(key)
            qty, version = expected[key]
            assert got["Qty"] == qty and got["Blob"] == expected_blob(version), key
    assert seen == set(expected)

    # the bound is real: a task that holds a bucket's rows (maintenance's fold of its files) fails at it
    planned = [p for p in handle.scan(snapshot_id=snapshot_id).plan_files() if p.file.partition[0] == 0]
    fold = StateTask("compact", "Wide", handle.metadata_location, {}, [], 0,
                     [Candidate(p.file.file_path, sorted(d.file_path for d in p.delete_files)) for p in planned], memory=MEMORY)  # fmt: skip
    with pytest.raises(TaskMemoryError, match="compact task of table Wide, bucket 0 needed more than state_task_memory"):
        run_task(fold)
