"""Partition queries of the engine: heartbeats, inclusive and future ends, cancellation and errors."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine, PartitionPolicy
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.model import QueryError, StreamDef
from tests.unit.local_spanner.changestream_fakes import (
    DB,
    SINGERS,
    TABLES,
    ManualClock,
    Reader,
    Writer,
    data_records,
    drain,
)

pytestmark = pytest.mark.timeout(60)

ONE = PartitionPolicy(initial_partitions=1, event_every=None, merge_idle=None, split_records=10**9)
US = timedelta(microseconds=1)


def setup(
    clock: ServerClock | None = None, retention: timedelta = timedelta(days=1)
) -> tuple[ChangeStreamEngine, ServerClock, Writer, datetime, str]:
    clock = clock or ManualClock()
    engine = ChangeStreamEngine(clock, policy=ONE)
    engine.create_stream(DB, StreamDef("s", None, retention=retention), TABLES)
    created = engine.streams(DB)[0].created_at
    assert created is not None
    if isinstance(clock, ManualClock):
        clock.advance(timedelta(milliseconds=1))
    (root,) = drain(engine, None, created, None)
    return (
        engine,
        clock,
        Writer(engine, clock),
        created,
        root["child_partitions_record"]["child_partitions"][0]["token"],
    )


def is_data(record: dict) -> bool:
    return "data_change_record" in record


def test_end_timestamp_is_inclusive() -> None:
    engine, clock, writer, created, token = setup()
    first = writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})
    second = writer.insert(SINGERS, {"SingerId": "2"}, {"FirstName": "b"})
    clock.advance(timedelta(seconds=1))

    upto_second = data_records(drain(engine, token, created, second))
    before_second = data_records(drain(engine, token, created, second - US))
    only_second = data_records(drain(engine, token, second, second))

    assert [r["commit_timestamp"] for r in upto_second] == [first, second]
    assert [r["commit_timestamp"] for r in before_second] == [first]
    assert [r["commit_timestamp"] for r in only_second] == [second]


def test_idle_partition_sends_heartbeats_in_server_time() -> None:
    engine, clock, writer, created, token = setup()
    reader = Reader(engine, token, created, None, heartbeat_ms=2000)
    try:
        clock.advance(timedelta(milliseconds=1500))
        ts = writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})
        assert is_data(reader.until(is_data)[-1])
        clock.advance(timedelta(milliseconds=2500))
        heartbeat = reader.until(lambda r: "heartbeat_record" in r)[-1]["heartbeat_record"]
    finally:
        reader.close()

    assert ts < heartbeat["timestamp"] < clock.now()


def test_accelerated_clock_brings_heartbeats_faster() -> None:
    clock = ServerClock(start=datetime.now(UTC) - timedelta(hours=1), rate=200.0)
    engine, clock, _, created, token = setup(clock)
    reader = Reader(engine, token, created, None, heartbeat_ms=10_000)
    try:
        beats = [reader.until(lambda r: "heartbeat_record" in r)[-1]["heartbeat_record"]["timestamp"] for _ in range(3)]
    finally:
        reader.close()

    assert beats == sorted(beats) and len(set(beats)) == 3
    assert all(b - a >= timedelta(seconds=10) for a, b in zip(beats, beats[1:], strict=False))


def test_no_heartbeat_passes_a_commit_that_holds_its_timestamp() -> None:
    engine, clock, writer, created, token = setup()
    reader = Reader(engine, token, created, None, heartbeat_ms=1000)
    try:
        change = writer.change(SINGERS, "INSERT", {"SingerId": "1"}, {"FirstName": "a"})
        clock.advance(timedelta(milliseconds=1))
        ts = clock.next_commit_timestamp()
        clock.advance(timedelta(seconds=30))
        threading.Event().wait(0.3)  # give a wrong reader the chance to run ahead
        engine.commit(DB, ts, "", "", [change])
        seen = reader.until(is_data)
    finally:
        reader.close()

    assert seen[-1]["data_change_record"]["commit_timestamp"] == ts
    assert all(r["heartbeat_record"]["timestamp"] < ts for r in seen[:-1])


def test_query_with_end_in_the_future_waits_for_it() -> None:
    engine, clock, writer, created, token = setup()
    end = clock.now() + timedelta(seconds=10)
    reader = Reader(engine, token, created, end, heartbeat_ms=300_000)
    try:
        clock.advance(timedelta(seconds=5))
        ts = writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})
        assert reader.until(is_data)[-1]["data_change_record"]["commit_timestamp"] == ts
        reader.thread.join(timeout=0.3)
        assert reader.thread.is_alive(), "the query ended before its end timestamp was reached"
        clock.advance(timedelta(seconds=6))
        assert reader.rest() == []
    finally:
        reader.close()
    assert reader.error is None


def test_stop_ends_an_open_query_and_drop_fails_it() -> None:
    engine, clock, _, created, token = setup()
    stopped = Reader(engine, token, created, None)
    dropped = Reader(engine, token, created, None)
    stopped.stop.set()
    assert stopped.rest() == []
    engine.drop_stream(DB, "s")
    dropped.rest()

    assert isinstance(dropped.error, QueryError) and dropped.error.code == "NOT_FOUND"
    with pytest.raises(QueryError) as gone:
        drain(engine, token, created, None)
    assert gone.value.code == "NOT_FOUND"


@pytest.mark.parametrize("heartbeat_ms", [999, 300_001, 0])
def test_heartbeat_out_of_range_is_out_of_range_as_the_emulator_answers(heartbeat_ms: int) -> None:
    engine, clock, _, created, token = setup()
    with pytest.raises(QueryError) as error:
        engine.query(DB, "s", token, created, None, heartbeat_ms, threading.Event())
    assert error.value.code == "OUT_OF_RANGE"
    assert str(heartbeat_ms) in str(error.value) and "1000" in str(error.value)


def test_end_before_start_is_invalid_argument() -> None:
    engine, clock, _, created, token = setup()
    with pytest.raises(QueryError) as error:
        engine.query(DB, "s", token, created + US, created, 1000, threading.Event())
    assert error.value.code == "INVALID_ARGUMENT" and "end_timestamp" in str(error.value)


def test_start_before_the_stream_existed_is_out_of_range_naming_the_earliest() -> None:
    engine, clock, _, created, token = setup()
    with pytest.raises(QueryError) as error:
        engine.query(DB, "s", None, created - US, None, 1000, threading.Event())
    assert error.value.code == "OUT_OF_RANGE"
    assert "created" in str(error.value) and created.isoformat() in str(error.value)


def test_start_before_retention_is_out_of_range_naming_the_earliest() -> None:
    engine, clock, _, created, token = setup(retention=timedelta(hours=1))
    assert isinstance(clock, ManualClock)
    now = clock.advance(timedelta(hours=2))
    with pytest.raises(QueryError) as error:
        engine.query(DB, "s", token, created, None, 1000, threading.Event())
    assert error.value.code == "OUT_OF_RANGE"
    assert "retention" in str(error.value) and (now - timedelta(hours=1)).isoformat() in str(error.value)


def test_unknown_stream_is_not_found_and_unknown_token_invalid_naming_them() -> None:
    engine, clock, _, created, token = setup()
    with pytest.raises(QueryError) as stream:
        engine.query(DB, "Nope", None, created, None, 1000, threading.Event())
    with pytest.raises(QueryError) as bad_token:
        engine.query(DB, "s", "no-such-token", created, None, 1000, threading.Event())
    assert (stream.value.code, bad_token.value.code) == ("NOT_FOUND", "INVALID_ARGUMENT")  # the token: as Spanner says
    assert "Nope" in str(stream.value) and "no-such-token" in str(bad_token.value)


def test_history_gets_a_heartbeat_for_each_stretch_longer_than_the_interval_without_commits() -> None:
    engine, clock, writer, created, token = setup()
    clock.advance(timedelta(seconds=5))
    first = writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "a"})
    clock.advance(timedelta(milliseconds=300))
    second = writer.insert(SINGERS, {"SingerId": "2"}, {"FirstName": "b"})
    clock.advance(timedelta(seconds=3))
    third = writer.insert(SINGERS, {"SingerId": "3"}, {"FirstName": "c"})
    clock.advance(timedelta(seconds=10))

    records = drain(engine, token, created, third + timedelta(seconds=5), heartbeat_ms=1000)
    kinds = [("heartbeat", r["heartbeat_record"]["timestamp"]) if "heartbeat_record" in r else ("data", r["data_change_record"]["commit_timestamp"])
             for r in records]
    # like Cloud Spanner, whose heartbeats say "nothing committed here since": they mark quiet stretches of history
    # (5 s before the first commit, 3 s before the third), none between commits 0.3 s apart, none past the end
    assert kinds == [("heartbeat", first - US), ("data", first), ("data", second), ("heartbeat", third - US), ("data", third)]
