"""Group commit: the journals of a group are fsynced once when it ends, each entry on its own outside a group."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.local_spanner.changestream.journal import Journal as ChangeJournal
from spanner_cdc.local_spanner.group_commit import group_commit
from spanner_cdc.local_spanner.persistence import Journal


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_one_fsync_per_journal_per_group(tmp_path: Path, fsyncs: list[int]) -> None:
    catalog, changes = Journal(tmp_path / "a", fsync=True), ChangeJournal(tmp_path / "b", fsync=True)
    with group_commit():
        for n in range(5):
            catalog.append({"op": "commit", "n": n})
            changes.write({"n": n})
            with group_commit():  # nested: the outer group syncs
                changes.write({"n": n, "nested": True})
        assert fsyncs == []
    assert len(fsyncs) == 2
    assert [e["n"] for e in catalog.entries()] == list(range(5))
    assert len(list(ChangeJournal(tmp_path / "b").replay())) == 10


def test_a_groups_journals_are_flushed_in_order_then_fsynced_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog, changes = Journal(tmp_path / "a", fsync=True), ChangeJournal(tmp_path / "b", fsync=True)
    both_in_fsync = threading.Barrier(2, timeout=30)  # broken (and the group fails) if the fsyncs ran one after the other
    events: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        events.append("fsync " + Path(os.readlink(f"/proc/self/fd/{fd}")).name)
        both_in_fsync.wait()
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for journal, name in ((catalog, "catalog.jsonl"), (changes, "journal.jsonl")):
        monkeypatch.setattr(journal, "flush", lambda j=journal, n=name: (events.append("flush " + n), type(j).flush(j))[0])
    with group_commit():
        catalog.append({"op": "commit"})
        changes.write({"op": "commit"})
    assert events[:2] == ["flush catalog.jsonl", "flush journal.jsonl"]
    assert sorted(events[2:]) == ["fsync catalog.jsonl", "fsync journal.jsonl"]
    assert [e["op"] for e in Journal(tmp_path / "a").entries()] == ["commit"]


def test_outside_a_group_every_entry_is_synced_before_the_call_returns(tmp_path: Path, fsyncs: list[int]) -> None:
    catalog = Journal(tmp_path, fsync=True)
    catalog.append({"op": "a"})
    catalog.append({"op": "b"})
    assert len(fsyncs) == 2
    assert [e["op"] for e in Journal(tmp_path).entries()] == ["a", "b"]


def test_a_failing_group_still_syncs_what_it_wrote(tmp_path: Path, fsyncs: list[int]) -> None:
    catalog = Journal(tmp_path, fsync=True)
    with pytest.raises(RuntimeError), group_commit():
        catalog.append({"op": "a"})
        raise RuntimeError("refused after the write")
    assert len(fsyncs) == 1 and [e["op"] for e in Journal(tmp_path).entries()] == ["a"]


DB = "projects/p/instances/i/databases/d"


def fsync_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """A `--data-dir --fsync` server holding DB (a table t and a stream on it), and the files each fsync synced."""
    from spanner_cdc.local_spanner.catalog import Instance
    from spanner_cdc.local_spanner.server import LocalSpannerServer, ServerOptions

    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd))[1])
    server = LocalSpannerServer(ServerOptions(data_dir=tmp_path, fsync=True))
    server.catalog.create_instance(Instance("projects/p/instances/i"))
    server.catalog.create_database(DB, 1, ["CREATE TABLE t (k INT64 NOT NULL) PRIMARY KEY (k)", "CREATE CHANGE STREAM s FOR ALL"])
    return server, synced


def test_a_server_with_fsync_syncs_the_change_records_too_once_per_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud.spanner_v1.types import Mutation

    server, synced = fsync_server(tmp_path, monkeypatch)
    catalog, db = server.catalog, DB
    groups = [[Mutation.pb()(insert={"table": "t", "columns": ["k"], "values": [{"values": [{"string_value": str(k)}]}]})]
              for k in range(5)]
    synced.clear()

    outcomes = catalog.commit_groups(db, groups)

    assert len(outcomes) == 5 and sorted(outcomes) == outcomes and len(set(outcomes)) == 5  # type: ignore[type-var]
    assert sorted(Path(p).name for p in synced) == ["catalog.jsonl", "journal.jsonl"]
    server.engine.close()
    assert catalog.journal is not None
    catalog.journal.close()


def test_commits_that_queue_up_meanwhile_share_one_group_and_return_after_its_fsyncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from google.cloud.spanner_v1.types import Mutation

    from spanner_cdc.local_spanner.model import QueryError

    server, synced = fsync_server(tmp_path, monkeypatch)
    catalog, db = server.catalog, DB

    def insert(k: int) -> list[Any]:
        return [Mutation.pb()(insert={"table": "t", "columns": ["k"], "values": [{"values": [{"string_value": str(k)}]}]})]

    def commit(k: int) -> tuple[Any, int]:
        outcome: Any = catalog.commit_groups(db, [insert(k), insert(k + 100)]) if k == 4 else catalog.commit(db, insert(k))
        return outcome, len(synced)  # the fsyncs done when this caller got its answer

    synced.clear()
    with ThreadPoolExecutor(max_workers=6) as callers:
        with catalog.lock:  # a group in progress: every commit arriving now queues up behind it
            answers = [callers.submit(commit, k) for k in range(5)]
            answers.append(callers.submit(commit, 1))  # one of the two k=1 inserts is refused: only its caller sees it
            while len(catalog._commit_queue._queued) < 6:
                time.sleep(0.01)  # waiting for the callers to queue, not measuring them
        errors = [answer.exception() for answer in answers]
        done = [answer.result() for answer in answers if answer.exception() is None]

    assert sorted(Path(p).name for p in synced) == ["catalog.jsonl", "journal.jsonl"]  # one group for all six
    assert all(count == 2 for _, count in done)
    refused = [e for e in errors if e is not None]
    assert len(refused) == 1 and isinstance(refused[0], QueryError) and refused[0].code == "ALREADY_EXISTS"
    assert errors[0] is errors[2] is errors[3] is errors[4] is None
    stamps = [t for outcome, _ in done for t in (outcome if isinstance(outcome, list) else [outcome])]
    assert len(set(stamps)) == 6
    assert sorted(catalog.database(db).data["t"]) == sorted((str(k),) for k in (0, 1, 2, 3, 4, 104))
    server.engine.close()
    assert catalog.journal is not None
    catalog.journal.close()
