"""The rename-free commit protocol on a local root: journaled names, orphans of crashed attempts, the marker last."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.lake.markers import write_marker
from spanner_cdc.lake.publish import begin_attempt, read_journal, remove_orphans
from spanner_cdc.store.models import ManifestFile
from tests.unit.lake.records import T0

E = T0 + timedelta(hours=1)
LAST = E - timedelta(microseconds=1)
LATER = T0 + timedelta(minutes=20)


def put(layout: LakeLayout, *, token: str = "tok", start=T0, table: str = "Users", lineage: int = 3) -> str:  # type: ignore[no-untyped-def]
    location = layout.published_location(lineage_id=lineage, token=token, range_start=start, range_end=LAST, table=table, window_start=T0)
    storage.write_bytes(location, b"parquet bytes")
    return location


def manifest_of(location: str, token: str = "tok") -> ManifestFile:
    return ManifestFile(location, token, T0, LAST, T0, E, rows=2, bytes=13, table_name="Users")


def test_a_retry_removes_what_the_crashed_attempt_journaled_and_keeps_the_rest(tmp_path: Path) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    begin_attempt(layout, "tok", lineage_id=3, range_start=T0, range_end=LAST, window_start=T0, window_end=E)
    crashed = [put(layout, table="Users"), put(layout, table="Orders")]  # the attempt died before its commit
    committed = put(layout, token="tok", start=LATER)  # the same token's earlier, committed range
    other = put(layout, token="other")  # another token's attempt in the same window
    assert read_journal(layout, "tok")["pattern"] == layout.window_objects_pattern(3, T0, layout.file_stem(3, "tok", T0, LAST))  # type: ignore[index]
    assert sorted(remove_orphans(layout, "tok", committed=[committed])) == sorted(crashed)
    assert published_locations(layout.location) == sorted([committed, other])
    assert read_journal(layout, "tok") is None  # cleared: a second retry has nothing to remove
    assert remove_orphans(layout, "tok", committed=[]) == []


def test_a_committed_file_in_another_spelling_is_never_taken_for_an_orphan(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    relative = LakeLayout(Path("lake"), "cs", "live")
    begin_attempt(relative, "tok", lineage_id=3, range_start=T0, range_end=LAST, window_start=T0, window_end=E)
    location = put(relative)
    assert remove_orphans(relative, "tok", committed=[str(tmp_path / location)]) == []
    assert storage.exists(location)


def test_the_marker_is_written_after_the_windows_unlisted_objects_are_removed(tmp_path: Path) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    listed = put(layout)
    orphan = put(layout, token="crashed", start=LATER)  # an attempt over another range, never committed
    other_lineage = put(layout, token="crashed", lineage=4)
    marker = write_marker(layout, lineage_id=3, window_start=T0, window_end=E, files=[manifest_of(listed)], check={"ok": True},
                          completeness={"rows": 2})  # fmt: skip
    assert isinstance(marker, Path) and str(marker) == layout.marker_location(T0, E)
    assert not storage.exists(orphan) and storage.exists(other_lineage)
    content = json.loads(marker.read_text())
    assert [f["path"] for f in content["files"]] == [listed[len(layout.location) + 1 :]]
    assert content["rows"] == 2 and content["complete"] is True
    window_objects = storage.glob(layout.window_objects_pattern(3, T0))
    assert window_objects == [listed]  # once the marker exists, the window holds exactly what it lists


def test_a_tasks_files_are_deleted_by_a_retry_only_once_none_of_its_tokens_is_running_in_it(tmp_path: Path) -> None:
    """A wave task's files hold several tokens' rows: a retry of one of them deletes what that task published and
    never committed only once no token of the task is still RUNNING in that attempt (it could still commit them)."""
    from spanner_cdc.lake.layout import task_object_name
    from spanner_cdc.lake.publish import prepare_attempt

    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    task = [("tok", 1), ("other", 4)]
    for token, _ in task:
        begin_attempt(layout, token, lineage_id=3, range_start=T0, range_end=LAST, window_start=T0, window_end=E,
                      stem="part-L3-tTASK", task=task)  # fmt: skip
    shared = task_object_name(layout.location, stem="part-L3-tTASK", content="c", table="Users", window_start=T0, sequence=0)
    storage.write_bytes(shared, b"parquet bytes")
    asked: list[list[tuple[str, int]]] = []

    def running(pairs: list[tuple[str, int]]) -> bool:
        asked.append(list(pairs))
        return True  # "other" still runs in attempt 4: its commit may name the file yet

    prepare_attempt(layout, "tok", committed=lambda s, e: set(), running=running, journal=None)  # type: ignore[arg-type]
    assert asked == [task] and storage.exists(shared) and read_journal(layout, "tok") is None
    prepare_attempt(layout, "other", committed=lambda s, e: set(), running=lambda pairs: False, journal=None)
    assert not storage.exists(shared)  # no token of the task can commit it any more: the retry deletes it
