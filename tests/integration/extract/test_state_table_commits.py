"""Two writers of one current-state table: a window's commit that loses the race to the same window's commit keeps the
winner's snapshot (one per window); one that loses to another snapshot (a fold) is a StateConflict, and the window
applied again to the new snapshot gives the exact state."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.extract.current_state import StateConflict, _apply_tasks, _commit
from spanner_cdc.lake.current_state import Column
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import (
    BUCKETS,
    SNAPSHOT_AT,
    applied_ends,
    commit_fold,
    commit_row_delta,
    ensure_state_table,
    read_state,
    state_identifier,
    window_properties,
)
from spanner_cdc.spark.state_job import Candidate, StateTask, _partition, decode_entry, run_task, write_data
from spanner_cdc.store.models import WindowRow

pytestmark = [pytest.mark.integration]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
END = T0 + timedelta(hours=1)
TYPES = [
    {"name": "Id", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1},
    {"name": "Qty", "type": {"code": "INT64"}, "is_primary_key": False, "ordinal_position": 2},
]
CHANGE_SCHEMA = pa.schema([
    ("object", pa.string()), ("commit_timestamp", pa.timestamp("us", tz="UTC")), ("server_transaction_id", pa.string()),
    ("record_sequence", pa.string()), ("mod_index", pa.int64()), ("change_type", pa.string()), ("keys", pa.string()),
    ("new_values", pa.string()), ("column_types", pa.string()), ("value_capture_type", pa.string()),
])  # fmt: skip
WINDOW = WindowRow(0, T0, END, "COMPLETE", None, None, None, None, T0, END)


def table(tmp_path: Path) -> tuple[Any, Any, dict[int, int]]:
    """A state table of 200 rows (Qty = Id) and a window of partial updates, deletes and inserts; (catalog, the
    window's change file, the state at its end)."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("commits", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    handle = ensure_state_table(catalog, LakeLayout(str(tmp_path / "lake"), "s", "ns"), "T", [Column(**c) for c in TYPES])
    bucket_of = handle.spec().fields[0].transform.transform(handle.schema().find_field("Id").field_type)
    plain = pa.schema([("Id", pa.int64(), False), ("Qty", pa.int64())])
    files = []
    for b in range(BUCKETS):
        ids = [k for k in range(200) if bucket_of(k) == b]
        if ids:
            files.append(write_data(handle, pa.table([pa.array(ids, pa.int64())] * 2, schema=plain), _partition(handle, "Id", b)))
    commit_row_delta(handle, files, [], {SNAPSHOT_AT: T0.isoformat()})
    rng, state = random.Random(30), {k: k for k in range(200)}
    changes = []
    for key in rng.sample(range(200), 60):
        if key % 3:
            changes.append(("UPDATE", key, {"Qty": str(-key)}))
            state[key] = -key
        else:
            changes.append(("DELETE", key, {}))
            del state[key]
    for key in range(1000, 1020):
        changes.append(("INSERT", key, {"Qty": "5"}))
        state[key] = 5
    types = json.dumps(TYPES)
    rows = [{"object": "T", "commit_timestamp": T0 + timedelta(microseconds=i + 1), "server_transaction_id": f"t{i}", "record_sequence": "0",
             "mod_index": 0, "change_type": kind, "keys": json.dumps({"Id": str(key)}), "new_values": json.dumps(values),
             "column_types": types, "value_capture_type": "NEW_VALUES"} for i, (kind, key, values) in enumerate(changes)]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows, schema=CHANGE_SCHEMA), tmp_path / "window.parquet")
    return catalog, tmp_path / "window.parquet", state


def written(handle: Any, path: Path) -> list[tuple[str, str, Any]]:
    """The window's files as the apply's tasks write them for the table as `handle` sees it (the tasks in this process)."""
    return [(t.table, r["kind"], decode_entry(r["entry"])) for t in _apply_tasks(handle, "T", {}, [str(path)], WINDOW) for r in run_task(t)]


def rows(handle: Any, snapshot_id: int) -> dict[int, int]:
    return {r["Id"]: r["Qty"] for r in read_state(handle, snapshot_id).to_pylist()}


def test_a_commit_that_loses_to_the_same_window_keeps_the_winners_snapshot(tmp_path: Path) -> None:
    catalog, path, state = table(tmp_path)
    identifier = state_identifier(LakeLayout(str(tmp_path / "lake"), "s", "ns"), "T")
    first, second = catalog.load_table(identifier), catalog.load_table(identifier)  # two runs, from the same snapshot
    files_first, files_second = written(first, path), written(second, path)
    winner = _commit(second, files_second, window_properties(T0, END))
    assert _commit(first, files_first, window_properties(T0, END)) == winner  # lost the race: no second snapshot
    current = catalog.load_table(identifier)
    assert current.current_snapshot().snapshot_id == winner and len(current.snapshots()) == 2  # the seed's and the window's
    assert applied_ends(current)[END.isoformat()] == winner and rows(current, winner) == state


def test_a_commit_that_loses_to_another_snapshot_is_a_conflict_and_applied_again_is_exact(tmp_path: Path) -> None:
    catalog, path, state = table(tmp_path)
    identifier = state_identifier(LakeLayout(str(tmp_path / "lake"), "s", "ns"), "T")
    apply, fold = catalog.load_table(identifier), catalog.load_table(identifier)
    files = written(apply, path)
    # meanwhile maintenance rewrites a bucket's data files: the window's position deletes name rows of files now gone
    planned = [p for p in fold.scan().plan_files() if p.file.partition[0] == 0]
    task = StateTask("compact", "T", fold.metadata_location, {}, [], 0, [Candidate(p.file.file_path) for p in planned])
    rewritten = [decode_entry(r["entry"]) for r in run_task(task)]
    for f in rewritten:
        f.spec_id = fold.metadata.default_spec_id
    folded = commit_fold(fold, [p.file for p in planned], rewritten, {"spanner-cdc.maintenance": "fold-deletes"})
    with pytest.raises(StateConflict, match=r"another snapshot \(\d+\) was committed while the window ending"):
        _commit(apply, files, window_properties(T0, END))
    apply.refresh()
    assert apply.current_snapshot().snapshot_id == folded  # the losing commit changed nothing
    snapshot_id = _commit(apply, written(apply, path), window_properties(T0, END))  # what the run does next
    assert rows(apply, snapshot_id) == state and list(applied_ends(apply)) == [T0.isoformat(), END.isoformat()]
