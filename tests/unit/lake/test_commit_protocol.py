"""The rename-free commit protocol on a local root: journaled names, orphans of crashed attempts, the marker last."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout, published_locations, task_object_name
from spanner_cdc.lake.markers import write_marker
from spanner_cdc.lake.publish import (
    begin_task,
    clear_tasks,
    prepare_attempt,
    read_journal,
    remove_orphans,
    sweep_crashed,
)
from spanner_cdc.store.models import ManifestFile
from tests.unit.lake.records import T0

E = T0 + timedelta(hours=1)
LAST = E - timedelta(microseconds=1)
LATER = T0 + timedelta(minutes=20)


def put(layout: LakeLayout, *, token: str = "tok", start=T0, table: str = "Users", lineage: int = 3) -> str:  # type: ignore[no-untyped-def]
    location = layout.published_location(lineage_id=lineage, token=token, range_start=start, range_end=LAST, table=table, window_start=T0)
    storage.write_bytes(location, b"parquet bytes")
    return location


def begin_attempt(
    layout: LakeLayout, token: str, *, lineage_id: int, range_start: datetime, range_end: datetime, window_start: datetime,
    window_end: datetime, stem: str | None = None, task: Sequence[tuple[str, int]] = (),
) -> None:  # fmt: skip
    """A token's own journal as an earlier release's wave attempt wrote it (a retry still honours those): the glob
    of its files' names (by default the token's own stem) and the (token, attempt)s whose rows they may hold."""
    stem = stem or layout.file_stem(lineage_id, token, range_start, range_end)
    journal = {
        "lineage_id": lineage_id, "window_start": window_start.isoformat(), "window_end": window_end.isoformat(),
        "range_start": range_start.isoformat(), "range_end": range_end.isoformat(),
        "pattern": layout.window_objects_pattern(lineage_id, window_start, stem), "task": [list(pair) for pair in task],
    }  # fmt: skip
    storage.write_bytes(layout.journal_location(token), json.dumps(journal).encode())


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

    prepare_attempt(layout, "tok", committed=lambda s, e: set(), running=running)  # type: ignore[arg-type]
    assert asked == [task] and storage.exists(shared) and read_journal(layout, "tok") is None
    prepare_attempt(layout, "other", committed=lambda s, e: set(), running=lambda pairs: False)
    assert not storage.exists(shared)  # no token of the task can commit it any more: the retry deletes it


def task_file(layout: LakeLayout, stem: str, table: str = "Users") -> str:
    location = task_object_name(layout.location, stem=stem, content="c0ffee", table=table, window_start=T0, sequence=0)
    storage.write_bytes(location, b"parquet bytes")
    return location


def journal_task(layout: LakeLayout, stem: str, task: list[tuple[str, int]]) -> None:
    begin_task(layout, stem, lineage_id=3, window_start=T0, window_end=E, task=task)


def journals(layout: LakeLayout) -> list[str]:
    return [p for p in storage.find(layout.staging_area) if "/_tasks/" in p]


def test_a_sweep_deletes_what_a_crashed_task_published_and_never_committed_and_keeps_the_rest(tmp_path: Path) -> None:
    """A wave task journals its files' names once for all its tokens; the next wave's sweep deletes the files of a
    task none of whose attempts is RUNNING any more, unless the manifest lists them, then the journal."""
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    journal_task(layout, "part-L3-tCRASHED", [("a", 1), ("b", 1)])
    crashed = [task_file(layout, "part-L3-tCRASHED"), task_file(layout, "part-L3-tCRASHED", "Orders")]
    journal_task(layout, "part-L3-tHALF", [("c", 1)])  # committed, then killed before its journal was cleared
    committed = task_file(layout, "part-L3-tHALF")
    untouched = task_file(layout, "part-L3-tOTHER")  # no journal names it: only a window's close may delete it
    asked: list[list[tuple[str, int]]] = []

    def running(pairs: Sequence[tuple[str, int]]) -> bool:
        asked.append(list(pairs))
        return False

    failures = sweep_crashed(layout, ["a", "z"], committed=lambda s, e: {committed} if (s, e) == (T0, E) else set(), running=running)
    assert failures == {}
    assert sorted(asked) == [[("a", 1), ("b", 1)], [("c", 1)]]
    assert not any(storage.exists(p) for p in crashed)
    assert storage.exists(committed) and storage.exists(untouched)
    assert journals(layout) == []  # both swept: the one naming none of the wave's tokens too, as nobody runs it


def test_a_task_with_an_attempt_still_running_is_left_with_its_files(tmp_path: Path) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    journal_task(layout, "part-L3-tLIVE", [("a", 1), ("b", 2)])
    shared = task_file(layout, "part-L3-tLIVE")
    # "b" still runs in attempt 2 (another run's, or a late commit): it may still name the file in its commit
    assert sweep_crashed(layout, ["a"], committed=lambda s, e: set(), running=lambda pairs: ("b", 2) in pairs) == {}
    assert storage.exists(shared) and len(journals(layout)) == 1
    assert sweep_crashed(layout, ["a"], committed=lambda s, e: set(), running=lambda pairs: False) == {}
    assert not storage.exists(shared) and journals(layout) == []


def test_a_failed_sweep_fails_only_the_tokens_the_task_names(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    journal_task(layout, "part-L3-tMINE", [("a", 1), ("b", 1)])
    journal_task(layout, "part-L3-tTHEIRS", [("x", 1)])
    storage.write_bytes(layout.task_journal_location("part-L3-tJUNK"), b"not json")

    def running(pairs: Sequence[tuple[str, int]]) -> bool:
        raise ConnectionError("the store is down")

    failures = sweep_crashed(layout, ["a", "c"], committed=lambda s, e: set(), running=running)
    assert {token: str(exc) for token, exc in failures.items()} == {"a": "the store is down"}
    assert len(journals(layout)) == 3  # all left for a later sweep
    assert "could not sweep a wave task's journal" in caplog.text and "not a wave task's journal" in caplog.text


def test_a_sweep_reads_no_token_of_the_wave_on_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One listing of the staging area per wave, not a request per token: with nothing left by crashes, a wave of
    many tokens reads, finds and deletes nothing else; a token whose own staging the listing shows is prepared."""
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    begin_attempt(layout, "t7", lineage_id=3, range_start=T0, range_end=LAST, window_start=T0, window_end=E)
    crashed = put(layout, token="t7")  # a spark-writer attempt of t7 published this and died
    calls: list[str] = []
    for name in ("read_bytes", "find", "glob", "remove"):
        real = getattr(storage, name)
        monkeypatch.setattr(storage, name, lambda *a, _real=real, _name=name, **k: (calls.append(_name), _real(*a, **k))[1])
    tokens = [f"t{n}" for n in range(500)]
    assert sweep_crashed(layout, tokens, committed=lambda s, e: set(), running=lambda pairs: False) == {}
    assert calls.count("find") == 2  # the staging area, then t7's own staging (clear_old_attempts)
    assert calls.count("read_bytes") == 2  # t7's journal, read by prepare_attempt and by remove_orphans
    assert not storage.exists(crashed) and read_journal(layout, "t7") is None
    calls.clear()
    assert sweep_crashed(layout, tokens, committed=lambda s, e: set(), running=lambda pairs: False) == {}
    assert calls == ["find"]


def test_a_committed_tasks_journal_is_cleared(tmp_path: Path) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    journal_task(layout, "part-L3-tDONE", [("a", 1)])
    journal_task(layout, "part-L3-tKEPT", [("b", 1)])
    journal = json.loads(storage.read_bytes(layout.task_journal_location("part-L3-tDONE")) or b"{}")
    assert journal["pattern"] == layout.window_objects_pattern(3, T0, "part-L3-tDONE") and journal["task"] == [["a", 1]]
    clear_tasks(layout, ["part-L3-tDONE"])
    assert journals(layout) == [layout.task_journal_location("part-L3-tKEPT")]
