"""Persistence of the engine: streams, partitions and records survive a restart from the journal."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine, PartitionPolicy
from spanner_cdc.local_spanner.model import StreamDef
from tests.unit.local_spanner.changestream_fakes import (
    ALBUMS,
    DB,
    SINGERS,
    TABLES,
    ManualClock,
    Writer,
    read_all,
)

pytestmark = pytest.mark.timeout(60)

POLICY = PartitionPolicy(initial_partitions=2, event_every=None, merge_idle=None, split_records=10**9)


def history(data_dir: Path) -> tuple[ChangeStreamEngine, ManualClock, Writer]:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, data_dir=data_dir, policy=POLICY)
    engine.create_stream(
        DB, StreamDef("s", {"Singers": None, "Albums": ("Title",)}, value_capture_type="NEW_ROW"), TABLES
    )
    writer = Writer(engine, clock)
    for i in range(30):
        writer.insert(SINGERS, {"SingerId": str(i)}, {"FirstName": f"n{i}", "Info": '{"k":[1,2]}'}, tag=f"t{i}")
    engine.split(DB, "s")
    writer.commit(
        [
            writer.change(ALBUMS, "INSERT", {"SingerId": str(i), "AlbumId": "1"}, {"Title": "x", "Tags": ["a"]})
            for i in range(10)
        ]
    )
    engine.merge(DB, "s")
    for i in range(10):
        writer.commit([writer.change(SINGERS, "UPDATE", {"SingerId": str(i)}, {"LastName": "L"})])
    return engine, clock, writer


def test_a_restarted_engine_serves_the_same_streams_partitions_and_records(tmp_path: Path) -> None:
    engine, clock, _ = history(tmp_path)
    end = clock.now()
    clock.advance(timedelta(seconds=1))
    definition = engine.streams(DB)[0]
    assert definition.created_at is not None
    before = read_all(engine, definition.created_at, end)
    engine.close()

    restarted_clock = ManualClock(start=clock.now())
    restarted = ChangeStreamEngine(restarted_clock, data_dir=tmp_path, policy=POLICY)
    after = read_all(restarted, definition.created_at, end)

    assert restarted.streams(DB) == [definition]
    assert after == before
    assert len(before) == 5  # 2 roots, 2 split children, 1 merge child
    assert restarted.last_commit_timestamp == engine.last_commit_timestamp


def test_commits_after_a_restart_continue_the_same_partitions(tmp_path: Path) -> None:
    engine, clock, old_writer = history(tmp_path)
    engine.close()
    restarted_clock = ManualClock(start=clock.now() + timedelta(seconds=1))
    restarted = ChangeStreamEngine(restarted_clock, data_dir=tmp_path, policy=POLICY)
    writer = Writer(restarted, restarted_clock)
    writer.rows = old_writer.rows
    ts = writer.insert(SINGERS, {"SingerId": "100"}, {"FirstName": "new"})
    end = restarted_clock.now()
    restarted_clock.advance(timedelta(seconds=1))
    created = restarted.streams(DB)[0].created_at
    assert created is not None

    out = read_all(restarted, created, end)

    latest = [
        r["data_change_record"]
        for rs in out.values()
        for r in rs
        if r.get("data_change_record", {}).get("commit_timestamp") == ts
    ]
    assert len(latest) == 1 and latest[0]["mods"][0]["keys"] == {"SingerId": "100"}
    assert (
        sum(len(r["data_change_record"]["mods"]) for rs in out.values() for r in rs if "data_change_record" in r) == 51
    )


def test_a_torn_last_journal_line_is_dropped_on_recovery(tmp_path: Path) -> None:
    engine, clock, _ = history(tmp_path)
    engine.close()
    journal = tmp_path / "changestreams" / "journal.jsonl"
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op":"commit","ts":1')

    restarted = ChangeStreamEngine(
        ManualClock(start=clock.now() + timedelta(seconds=1)), data_dir=tmp_path, policy=POLICY
    )
    restarted.update_tables(DB, TABLES)  # the first write after recovery cuts the torn entry
    restarted.close()

    after = journal.read_bytes()
    assert after.startswith(whole)
    assert [json.loads(line)["op"] for line in after[len(whole) :].splitlines()] == ["tables"]
    assert restarted.last_commit_timestamp == engine.last_commit_timestamp


def test_a_dropped_stream_stays_dropped(tmp_path: Path) -> None:
    engine, clock, _ = history(tmp_path)
    engine.drop_stream(DB, "s")
    engine.close()

    restarted = ChangeStreamEngine(
        ManualClock(start=clock.now() + timedelta(seconds=1)), data_dir=tmp_path, policy=POLICY
    )

    assert restarted.streams(DB) == []


def test_a_clock_behind_the_recovered_log_is_refused(tmp_path: Path) -> None:
    engine, clock, _ = history(tmp_path)
    engine.close()

    with pytest.raises(ValueError, match="not_before"):
        ChangeStreamEngine(ManualClock(start=clock.now() - timedelta(hours=1)), data_dir=tmp_path, policy=POLICY)


def test_without_a_data_dir_nothing_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    engine = ChangeStreamEngine(ManualClock(), policy=POLICY)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    Writer(engine, engine.clock).insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})

    assert list(tmp_path.iterdir()) == []


def test_system_transactions_keep_their_flag_and_exclude_ttl_deletes_across_a_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, data_dir=tmp_path, policy=POLICY)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    engine.create_stream(DB, StreamDef("no_ttl", None, options={"exclude_ttl_deletes": "true"}), TABLES)
    writer = Writer(engine, clock)
    start = writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})
    writer.insert(SINGERS, {"SingerId": "2"}, {"FirstName": "b"})
    clock.advance(timedelta(milliseconds=1))
    engine.commit(DB, clock.next_commit_timestamp(), "", "", [writer.change(SINGERS, "DELETE", {"SingerId": "1"})], system=True)
    writer.commit([writer.change(SINGERS, "DELETE", {"SingerId": "2"})])
    end = clock.now()
    clock.advance(timedelta(seconds=1))
    engine.close()

    restarted = ChangeStreamEngine(ManualClock(start=clock.now()), data_dir=tmp_path, policy=POLICY)

    def seen(stream: str) -> list[tuple[str, str, bool]]:
        by_token = read_all(restarted, start, end, stream=stream)
        records = [r["data_change_record"] for rs in by_token.values() for r in rs if "data_change_record" in r]
        return sorted((r["mod_type"], r["mods"][0]["keys"]["SingerId"], r["is_system_transaction"]) for r in records)

    assert seen("s") == [("DELETE", "1", True), ("DELETE", "2", False), ("INSERT", "1", False), ("INSERT", "2", False)]
    assert seen("no_ttl") == [("DELETE", "2", False), ("INSERT", "1", False), ("INSERT", "2", False)]
    restarted.close()
