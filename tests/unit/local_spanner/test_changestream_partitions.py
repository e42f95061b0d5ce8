"""Partitions of the engine: root query, splits and merges on demand, lineage and key ownership."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine, PartitionPolicy
from spanner_cdc.local_spanner.model import QueryError, StreamDef
from tests.unit.local_spanner.changestream_fakes import (
    DB,
    SINGERS,
    TABLES,
    ManualClock,
    Writer,
    data_records,
    drain,
    read_all,
)

pytestmark = pytest.mark.timeout(60)

QUIET = PartitionPolicy(initial_partitions=3, event_every=None, merge_idle=None, split_records=10**9)


def setup(policy: PartitionPolicy = QUIET) -> tuple[ChangeStreamEngine, ManualClock, Writer, datetime]:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=policy)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    clock.advance(timedelta(milliseconds=1))  # the root query waits until its start is in the past
    return engine, clock, Writer(engine, clock), engine.streams(DB)[0].created_at


def roots(engine: ChangeStreamEngine, at: datetime) -> dict:
    (record,) = drain(engine, None, at, None)
    return record["child_partitions_record"]


def write_singers(writer: Writer, ids: range) -> list[datetime]:
    return [writer.insert(SINGERS, {"SingerId": str(i)}, {"FirstName": f"n{i}"}) for i in ids]


def test_null_token_query_returns_the_partitions_alive_at_start_then_ends() -> None:
    engine, clock, _, created = setup()

    record = roots(engine, created)

    assert record["start_timestamp"] == created
    assert record["record_sequence"] == "00000000"
    assert len(record["child_partitions"]) == 3
    assert all(c["parent_partition_tokens"] == [] for c in record["child_partitions"])
    assert len({c["token"] for c in record["child_partitions"]}) == 3


def test_split_ends_the_parent_and_children_own_its_keys_from_then_on() -> None:
    engine, clock, writer, created = setup()
    before = write_singers(writer, range(0, 60))
    parent = roots(engine, created)["child_partitions"][0]["token"]
    children = engine.split(DB, "s", parent)
    after = write_singers(writer, range(60, 120))
    end = clock.now()
    clock.advance(timedelta(seconds=1))

    out = read_all(engine, created, end)

    parent_records = out[parent]
    (ending,) = [r["child_partitions_record"] for r in parent_records if "child_partitions_record" in r]
    assert parent_records[-1] == {"child_partitions_record": ending}
    split_at = ending["start_timestamp"]
    assert before[-1] < split_at <= after[0]
    assert ending["child_partitions"] == [{"token": c, "parent_partition_tokens": [parent]} for c in children]
    assert all(r["commit_timestamp"] < split_at for r in data_records(parent_records))
    assert all(r["commit_timestamp"] >= split_at for c in children for r in data_records(out[c]))
    assert any(data_records(out[c]) for c in children)
    keys = sorted(int(m["keys"]["SingerId"]) for rs in out.values() for r in data_records(rs) for m in r["mods"])
    assert keys == list(range(120))
    assert {c["token"] for c in roots(engine, split_at)["child_partitions"]} >= set(children)
    assert parent not in {c["token"] for c in roots(engine, split_at)["child_partitions"]}


def test_merge_child_is_announced_by_every_parent_with_all_parent_tokens() -> None:
    engine, clock, writer, created = setup()
    write_singers(writer, range(0, 60))
    tokens = [c["token"] for c in roots(engine, created)["child_partitions"]]
    child = engine.merge(DB, "s", tokens[:2])
    write_singers(writer, range(60, 120))
    end = clock.now()
    clock.advance(timedelta(seconds=1))

    out = read_all(engine, created, end)

    announced = [out[t][-1]["child_partitions_record"] for t in tokens[:2]]
    assert announced[0] == announced[1]
    assert announced[0]["child_partitions"] == [{"token": child, "parent_partition_tokens": tokens[:2]}]
    assert "child_partitions_record" not in out[tokens[2]][-1]
    keys = sorted(int(m["keys"]["SingerId"]) for rs in out.values() for r in data_records(rs) for m in r["mods"])
    assert keys == list(range(120))
    assert data_records(out[child])


def test_on_demand_split_and_merge_without_tokens_pick_partitions_themselves() -> None:
    engine, clock, _, created = setup()
    children = engine.split(DB, "s")
    assert len(children) == 2
    merged = engine.merge(DB, "s")
    clock.advance(timedelta(seconds=1))

    alive = {c["token"] for c in roots(engine, clock.now() - timedelta(microseconds=1))["child_partitions"]}

    assert merged in alive
    assert len(alive) == 3


def test_bad_split_and_merge_requests_are_refused_with_a_clear_status() -> None:
    engine, clock, _, created = setup()
    a, b, c = (p["token"] for p in roots(engine, created)["child_partitions"])

    with pytest.raises(QueryError) as not_adjacent:
        engine.merge(DB, "s", [a, c])
    with pytest.raises(QueryError) as unknown:
        engine.split(DB, "s", "nope")
    engine.split(DB, "s", a)
    with pytest.raises(QueryError) as ended:
        engine.merge(DB, "s", [a, b])
    with pytest.raises(QueryError) as no_stream:
        engine.split(DB, "other")

    assert (not_adjacent.value.code, unknown.value.code, ended.value.code) == (
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "FAILED_PRECONDITION",
    )
    assert "adjacent" in str(not_adjacent.value)
    assert "nope" in str(unknown.value)
    assert no_stream.value.code == "NOT_FOUND" and "other" in str(no_stream.value)


def test_tokens_are_unique_across_streams_and_databases() -> None:
    engine, clock, _, created = setup()
    engine.create_stream(DB, StreamDef("t", None), TABLES)
    engine.create_stream(DB + "x", StreamDef("s", None), TABLES)
    at = clock.advance(timedelta(seconds=1))

    tokens = [
        c["token"]
        for db, name in [(DB, "s"), (DB, "t"), (DB + "x", "s")]
        for c in drain(engine, None, at - timedelta(microseconds=1), None, db=db, stream=name)[0][
            "child_partitions_record"
        ]["child_partitions"]
    ]

    assert len(tokens) == len(set(tokens)) == 9


def test_a_commit_that_got_its_timestamp_before_a_split_is_read_exactly_once() -> None:
    engine, clock, writer, created = setup()
    change = writer.change(SINGERS, "INSERT", {"SingerId": "7"}, {"FirstName": "x"})
    tokens = [c["token"] for c in roots(engine, created)["child_partitions"]]
    clock.advance(timedelta(milliseconds=1))
    ts = clock.next_commit_timestamp()  # the server holds this timestamp while the splits happen
    for token in tokens:
        engine.split(DB, "s", token)
    engine.commit(DB, ts, "", "", [change])
    end = clock.now()
    clock.advance(timedelta(seconds=1))

    out = read_all(engine, created, end)

    found = [(token, r["commit_timestamp"]) for token, rs in out.items() for r in data_records(rs)]
    assert len(found) == 1 and found[0][1] == ts


@pytest.mark.parametrize(
    ("table", "key"),
    [("Singers", ("17",)), ("T", ("a\"b\\c", None)), ("Ü\u2603", ("\u00e9\U0001f600", "\x00\x1f", "")), ("T", ()), ("T", (None,)),
     ("T", ("x", 1)), ("T", (1.5, True, False)), ("T", (b"bytes",))],
)
def test_a_key_hashes_the_json_text_it_always_hashed(table: str, key: tuple) -> None:
    """Text keys are written without json.dumps, to the same text: a key routes to the range it did before (a data
    directory's change log keeps its partitions across a restart)."""
    import json

    from spanner_cdc.local_spanner.changestream.partitions import key_text

    assert key_text(table, key) == json.dumps([table, list(key)], separators=(",", ":"), sort_keys=True, default=str)
