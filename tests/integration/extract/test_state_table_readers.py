"""Every snapshot of a state table written by compat.pyiceberg's producers (a window's row delta with position
deletes, a fold of every delete file, then an expiry) reads the same with Daft's own Iceberg reader as with pyiceberg,
and its summary's totals are those of the files its manifests list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.extract.current_state import _commit
from spanner_cdc.lake.iceberg import expire_snapshots
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import commit_fold, live_rows, read_state, state_identifier, window_properties
from spanner_cdc.spark.state_job import Candidate, StateTask, decode_entry, run_task
from tests.integration.extract.test_state_table_commits import END, T0, rows, table, written

pytestmark = [pytest.mark.integration]


def files_of(handle: Any, snapshot_id: int) -> dict[str, list[Any]]:
    """The live files of a snapshot by content, from its manifests (pyiceberg's public manifest reading)."""
    from pyiceberg.manifest import DataFileContent

    found: dict[str, list[Any]] = {"data": [], "deletes": []}
    for manifest in handle.snapshot_by_id(snapshot_id).manifests(handle.io):
        for entry in manifest.fetch_manifest_entry(handle.io, discard_deleted=True):
            kind = "data" if entry.data_file.content == DataFileContent.DATA else "deletes"
            found[kind].append(entry.data_file)
    return found


def check_snapshot(handle: Any, snapshot_id: int, state: dict[int, int]) -> dict[str, list[Any]]:
    """Daft and pyiceberg read `state` at the snapshot; its summary's totals match its files; the files by content."""
    import daft

    files = files_of(handle, snapshot_id)
    summary = handle.snapshot_by_id(snapshot_id).summary.additional_properties
    assert int(summary["total-data-files"]) == len(files["data"]), summary
    assert int(summary["total-delete-files"]) == len(files["deletes"]), summary
    assert int(summary["total-records"]) == sum(f.record_count for f in files["data"]), summary
    assert int(summary["total-position-deletes"]) == sum(f.record_count for f in files["deletes"]), summary
    assert int(summary["total-files-size"]) == sum(f.file_size_in_bytes for f in files["data"] + files["deletes"]), summary
    assert live_rows(handle, snapshot_id) == len(state)
    assert rows(handle, snapshot_id) == state
    other = daft.read_iceberg(handle, snapshot_id=snapshot_id).to_arrow()
    assert {r["Id"]: r["Qty"] for r in other.to_pylist()} == state
    assert other.num_rows == len(state) and read_state(handle, snapshot_id).num_rows == len(state)
    return files


def test_state_snapshots_after_a_window_a_fold_and_an_expiry_read_the_same_with_daft(tmp_path: Path) -> None:
    catalog, path, state = table(tmp_path)
    handle = catalog.load_table(state_identifier(LakeLayout(str(tmp_path / "lake"), "s", "ns"), "T"))
    seed = handle.current_snapshot().snapshot_id
    seeded = check_snapshot(handle, seed, {k: k for k in range(200)})
    assert seeded["deletes"] == []

    window = _commit(handle, written(handle, path), window_properties(T0, END))  # the row delta: data and deletes
    handle.refresh()
    assert check_snapshot(handle, window, state)["deletes"], "the window deleted and updated rows: position deletes"

    planned = list(handle.scan().plan_files())  # the fold: every data file rewritten without its deleted rows
    by_bucket: dict[int, list[Any]] = {}
    for p in planned:
        by_bucket.setdefault(p.file.partition[0], []).append(p)
    rewritten = []
    for bucket, group in sorted(by_bucket.items()):
        candidates = [Candidate(p.file.file_path, sorted(d.file_path for d in p.delete_files)) for p in group]
        task = StateTask("compact", "T", handle.metadata_location, {}, [], bucket, candidates)
        rewritten += [decode_entry(r["entry"]) for r in run_task(task)]
    for f in rewritten:
        f.spec_id = handle.metadata.default_spec_id
    folded = commit_fold(handle, [p.file for p in planned], rewritten, {"spanner-cdc.maintenance": "fold-deletes"})
    handle.refresh()
    assert check_snapshot(handle, folded, state)["deletes"] == []
    summary = handle.snapshot_by_id(folded).summary.additional_properties
    assert int(summary["removed-delete-files"]) > 0 and int(summary["removed-position-deletes"]) > 0, summary

    assert expire_snapshots(handle, datetime.now(UTC) + timedelta(days=1)) == 2  # the seed's and the window's
    handle.refresh()
    assert [s.snapshot_id for s in handle.snapshots()] == [folded]
    check_snapshot(handle, folded, state)
