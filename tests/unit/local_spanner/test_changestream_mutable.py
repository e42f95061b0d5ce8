"""MUTABLE_KEY_RANGE streams of the engine: long-lived partitions, paired move events, start / end records, query rules."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine, PartitionPolicy
from spanner_cdc.local_spanner.model import QueryError, StreamDef
from spanner_cdc.local_spanner.record_proto import to_proto
from tests.unit.local_spanner.changestream_fakes import DB, SINGERS, TABLES, ManualClock, Writer, drain

pytestmark = pytest.mark.timeout(60)

POLICY = PartitionPolicy(initial_partitions=2, event_every=None, merge_idle=None, split_records=10**9, max_partitions=8)
MUTABLE = {"partition_mode": "MUTABLE_KEY_RANGE"}


def setup(policy: PartitionPolicy = POLICY) -> tuple[ChangeStreamEngine, ManualClock, Writer, datetime]:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=policy)
    engine.create_stream(DB, StreamDef("s", None, options=MUTABLE), TABLES)
    created = engine.streams(DB)[0].created_at
    assert created is not None
    clock.advance(timedelta(milliseconds=1))
    return engine, clock, Writer(engine, clock), created


def kind(record: dict[str, Any]) -> str:
    return next(iter(record))


def read_all(engine: ChangeStreamEngine, start: datetime, end: datetime) -> dict[str, list[dict[str, Any]]]:
    """Every partition's records in [start, end], following partition start records (each token read once)."""
    (root,) = drain(engine, None, start, end)
    queue = [(t, start) for t in root["partition_start_record"]["partition_tokens"]]
    out: dict[str, list[dict[str, Any]]] = {}
    while queue:
        token, begin = queue.pop(0)
        if token in out:
            continue
        out[token] = drain(engine, token, begin, end)
        for record in out[token]:
            started = record.get("partition_start_record")
            if started is not None:
                queue += [(t, started["start_timestamp"]) for t in started["partition_tokens"]]
    return out


def test_root_query_returns_one_partition_start_record() -> None:
    engine, clock, writer, created = setup()
    (root,) = drain(engine, None, created, created + timedelta(seconds=1))
    body = root["partition_start_record"]
    assert body["start_timestamp"] == created and body["record_sequence"] == "00000000"
    assert len(body["partition_tokens"]) == 2


def test_split_move_and_merge_keep_tokens_and_pair_move_events() -> None:
    engine, clock, writer, created = setup()
    (a, b) = drain(engine, None, created, created)[0]["partition_start_record"]["partition_tokens"]
    written = [writer.insert(SINGERS, {"SingerId": str(i)}, {"FirstName": f"n{i}"}) for i in range(20)]
    a_and_new = engine.split(DB, "s", a)
    assert a_and_new[0] == a and len(a_and_new) == 2
    new = a_and_new[1]
    written += [writer.insert(SINGERS, {"SingerId": str(i)}, {"LastName": "x"}) for i in range(20, 40)]
    clock.advance(timedelta(milliseconds=1))
    # the new partition is a's right neighbour, b is new's right neighbour
    assert engine.move(DB, "s", [b, new]) == [new, b]
    written += [writer.insert(SINGERS, {"SingerId": str(i)}, {"LastName": "y"}) for i in range(40, 60)]
    clock.advance(timedelta(milliseconds=1))
    assert engine.merge(DB, "s", [new, b]) == new
    written += [writer.insert(SINGERS, {"SingerId": str(i)}, {"LastName": "z"}) for i in range(60, 80)]
    clock.advance(timedelta(seconds=1))
    end = clock.now() - timedelta(milliseconds=500)

    by_token = read_all(engine, created, end)
    assert set(by_token) == {a, b, new}
    # every change exactly once across the long-lived partitions
    data = [r["data_change_record"] for records in by_token.values() for r in records if kind(r) == "data_change_record"]
    assert sorted(r["commit_timestamp"] for r in data) == written
    # a announced new and moved keys out to it; new's first record is the paired move-in
    a_kinds = [kind(r) for r in by_token[a] if kind(r) != "data_change_record"]
    assert a_kinds[:2] == ["partition_start_record", "partition_event_record"]
    split_at = by_token[a][[kind(r) for r in by_token[a]].index("partition_start_record")]["partition_start_record"]["start_timestamp"]
    first_of_new = by_token[new][0]["partition_event_record"]
    assert first_of_new["commit_timestamp"] == split_at
    assert first_of_new["move_in_events"] == [{"source_partition_token": a}]
    # moves pair up: every (source -> destination, time) seen as a move-out and as a move-in
    outs, ins = Counter(), Counter()
    for token, records in by_token.items():
        for r in records:
            event = r.get("partition_event_record")
            if event is None:
                continue
            assert event["partition_token"] == token
            outs.update((token, m["destination_partition_token"], event["commit_timestamp"]) for m in event["move_out_events"])
            ins.update((m["source_partition_token"], token, event["commit_timestamp"]) for m in event["move_in_events"])
    assert outs == ins and len(outs) == 3
    # b merged into new: b's last record is its end, right after its move-out; the others stay alive
    assert kind(by_token[b][-1]) == "partition_end_record" and kind(by_token[b][-2]) == "partition_event_record"
    assert by_token[b][-1]["partition_end_record"]["partition_token"] == b
    assert all(kind(r) != "partition_end_record" for t in (a, new) for r in by_token[t])


def test_records_of_one_timestamp_have_increasing_sequences_and_serialize() -> None:
    engine, clock, writer, created = setup()
    (a, b) = drain(engine, None, created, created)[0]["partition_start_record"]["partition_tokens"]
    engine.merge(DB, "s", [a, b])
    clock.advance(timedelta(seconds=2))
    records = drain(engine, b, created, clock.now() - timedelta(seconds=1))
    event, end = records[-2:]
    assert (event["partition_event_record"]["record_sequence"], end["partition_end_record"]["record_sequence"]) == ("00000000", "00000001")
    message = to_proto(end)
    assert message.WhichOneof("record") == "partition_end_record" and message.partition_end_record.partition_token == b


@pytest.mark.parametrize(
    ("end_offset", "code"),
    [(None, "INVALID_ARGUMENT"), (timedelta(minutes=30, microseconds=1), "INVALID_ARGUMENT")],
    ids=["no end", "more than 30 minutes"],
)
def test_query_rules_of_the_mode(end_offset: timedelta | None, code: str) -> None:
    engine, clock, writer, created = setup()
    end = None if end_offset is None else created + end_offset
    with pytest.raises(QueryError) as raised:
        drain(engine, None, created, end)
    assert raised.value.code == code and "MUTABLE_KEY_RANGE" in str(raised.value)


def test_a_partition_is_read_from_its_start_only_and_moves_need_this_mode() -> None:
    engine, clock, writer, created = setup()
    (a, _b) = drain(engine, None, created, created)[0]["partition_start_record"]["partition_tokens"]
    clock.advance(timedelta(seconds=1))
    _, new = engine.split(DB, "s", a)
    with pytest.raises(QueryError) as raised:
        drain(engine, new, created, created + timedelta(minutes=1))
    assert raised.value.code == "OUT_OF_RANGE"

    immutable = ChangeStreamEngine(ManualClock(), policy=POLICY)
    immutable.create_stream(DB, StreamDef("s", None), TABLES)
    with pytest.raises(QueryError) as refused:
        immutable.move(DB, "s")
    assert refused.value.code == "FAILED_PRECONDITION"


def test_time_policy_cycles_split_move_merge() -> None:
    policy = PartitionPolicy(initial_partitions=2, event_every=timedelta(minutes=1), merge_idle=None, split_records=10**9, seed=3)
    engine, clock, writer, created = setup(policy)
    for minute in range(1, 4):
        clock.advance(timedelta(minutes=1))
        writer.insert(SINGERS, {"SingerId": str(minute)}, {"FirstName": "x"})
    clock.advance(timedelta(seconds=1))
    by_token = read_all(engine, created, clock.now() - timedelta(milliseconds=500))
    events = sorted(
        (r["partition_event_record"]["commit_timestamp"], bool(r["partition_event_record"]["move_in_events"]))
        for records in by_token.values() for r in records if "partition_event_record" in r
    )
    # a split (1 pair), a move (1 pair), a merge (1 pair): three distinct times, each with a move-out and a move-in
    assert len({at for at, _ in events}) == 3 and len(events) == 6
    assert sum(1 for records in by_token.values() for r in records if "partition_end_record" in r) == 1


def test_a_restarted_engine_serves_the_same_long_lived_partitions(tmp_path: Any) -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, data_dir=tmp_path, policy=POLICY)
    engine.create_stream(DB, StreamDef("s", None, options=MUTABLE), TABLES)
    created = engine.streams(DB)[0].created_at
    assert created is not None
    clock.advance(timedelta(milliseconds=1))
    writer = Writer(engine, clock)
    (a, b) = drain(engine, None, created, created)[0]["partition_start_record"]["partition_tokens"]
    for i in range(10):
        writer.insert(SINGERS, {"SingerId": str(i)}, {"FirstName": "x"})
    _, new = engine.split(DB, "s", a)
    engine.move(DB, "s", [b, new])
    engine.merge(DB, "s", [a, new])
    for i in range(10, 20):
        writer.insert(SINGERS, {"SingerId": str(i)}, {"FirstName": "y"})
    end = clock.now()
    clock.advance(timedelta(seconds=1))
    before = read_all(engine, created, end)
    engine.close()

    restarted = ChangeStreamEngine(ManualClock(start=clock.now()), data_dir=tmp_path, policy=POLICY)
    assert restarted.streams(DB)[0].mutable_key_range
    assert read_all(restarted, created, end) == before
    assert set(before) == {a, b, new} and any(kind(r) == "partition_end_record" for r in before[new])
