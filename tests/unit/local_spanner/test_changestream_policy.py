"""The partition policy: default lineage changes within an hour, load splits, cold merges, bounds, seeds."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import pytest

from spanner_cdc.local_spanner.changestream import ChangeStreamEngine, PartitionPolicy
from spanner_cdc.local_spanner.model import RowChange, StreamDef
from tests.unit.local_spanner.changestream_fakes import (
    ALBUMS,
    DB,
    SINGERS,
    TABLES,
    ManualClock,
    Writer,
    data_records,
    drain,
    read_all,
)

pytestmark = pytest.mark.timeout(120)


def random_transaction(writer: Writer, rng: random.Random) -> list[RowChange]:
    changes = []
    for _ in range(rng.randint(1, 4)):
        table = rng.choice([SINGERS, ALBUMS])
        keys = {"SingerId": str(rng.randrange(200))}
        if table is ALBUMS:
            keys["AlbumId"] = str(rng.randrange(3))
        key = (table.name, tuple(keys[k] for k in table.key_columns))
        if any(c.table == table.name and c.keys == keys for c in changes):
            continue
        if key not in writer.rows:
            values = {"FirstName": "f", "Info": '{"a":1}'} if table is SINGERS else {"Title": "t", "Tags": ["x"]}
            changes.append(writer.change(table, "INSERT", keys, values))
        elif rng.random() < 0.3:
            changes.append(writer.change(table, "DELETE", keys))
        else:
            column = "LastName" if table is SINGERS else "Title"
            changes.append(writer.change(table, "UPDATE", keys, {column: str(rng.random())}))
    return changes


def run(
    policy: PartitionPolicy, transactions: int, spacing: timedelta, seed: int = 1
) -> tuple[ChangeStreamEngine, list[tuple[Any, ...]], datetime, datetime]:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=policy)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    writer = Writer(engine, clock)
    rng = random.Random(seed)
    expected = []
    for _ in range(transactions):
        changes = random_transaction(writer, rng)
        ts = writer.commit(changes)
        expected += [(ts, c.table, tuple(c.keys.values()), c.mod_type) for c in changes]
        clock.advance(spacing)
    end = clock.now()
    clock.advance(timedelta(seconds=1))
    created = engine.streams(DB)[0].created_at
    assert created is not None
    return engine, expected, created, end


def lineage(out: dict[str, list[dict[str, Any]]]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(splits as parent + children, merges as parents) seen in the child partitions records."""
    splits, merges = set(), set()
    for token, records in out.items():
        for record in records:
            children = record.get("child_partitions_record", {}).get("child_partitions", [])
            if len(children) >= 2:
                splits.add((token, *sorted(c["token"] for c in children)))
            for child in children:
                if len(child["parent_partition_tokens"]) >= 2:
                    merges.add(tuple(child["parent_partition_tokens"]))
    return sorted(splits), sorted(merges)


def recorded(out: dict[str, list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["commit_timestamp"], r["table_name"], tuple(m["keys"].values()), r["mod_type"])
        for records in out.values()
        for r in data_records(records)
        for m in r["mods"]
    )


def test_default_policy_splits_and_merges_within_an_hour_of_a_few_thousand_transactions() -> None:
    engine, expected, created, end = run(PartitionPolicy(), transactions=3000, spacing=timedelta(seconds=1.2))

    out = read_all(engine, created, end)

    splits, merges = lineage(out)
    assert len(splits) >= 1 and len(merges) >= 1
    assert recorded(out) == sorted(expected)


def test_load_splits_hot_partitions_up_to_the_maximum() -> None:
    policy = PartitionPolicy(
        initial_partitions=1, max_partitions=4, split_records=20, event_every=None, merge_idle=None
    )
    engine, expected, created, end = run(policy, transactions=400, spacing=timedelta(milliseconds=10))

    out = read_all(engine, created, end)

    (roots,) = drain(engine, None, end, None)
    assert len(roots["child_partitions_record"]["child_partitions"]) == 4
    assert len(lineage(out)[0]) == 3
    assert recorded(out) == sorted(expected)


def test_cold_adjacent_partitions_merge_down_to_the_minimum() -> None:
    policy = PartitionPolicy(initial_partitions=4, min_partitions=2, merge_idle=timedelta(minutes=5), event_every=None)
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=policy)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    created = engine.streams(DB)[0].created_at
    for _ in range(3):
        clock.advance(timedelta(minutes=6))
        Writer(engine, clock).commit([])  # time passing is noticed on commits (and by readers)
    end = clock.now()
    clock.advance(timedelta(seconds=1))
    assert created is not None

    out = read_all(engine, created, end)

    (roots,) = drain(engine, None, end, None)
    assert len(roots["child_partitions_record"]["child_partitions"]) == 2
    assert len(lineage(out)[1]) == 2


def test_time_events_alternate_split_and_merge() -> None:
    policy = PartitionPolicy(initial_partitions=2, event_every=timedelta(minutes=10), merge_idle=None)
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=policy)
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    created = engine.streams(DB)[0].created_at
    assert created is not None
    for _ in range(25):
        clock.advance(timedelta(minutes=1))
        Writer(engine, clock).commit([])
    end = clock.now()
    clock.advance(timedelta(seconds=1))

    splits, merges = lineage(read_all(engine, created, end))

    assert (len(splits), len(merges)) == (1, 1)


def test_the_same_seed_and_workload_give_the_same_lineage() -> None:
    policy = PartitionPolicy(seed=7, event_every=timedelta(minutes=5))
    first = run(policy, transactions=400, spacing=timedelta(seconds=2))
    second = run(policy, transactions=400, spacing=timedelta(seconds=2))

    lineage_first = lineage(read_all(first[0], first[2], first[3]))
    lineage_second = lineage(read_all(second[0], second[2], second[3]))

    assert lineage_first == lineage_second
    assert lineage_first[0] and lineage_first[1]


def test_bad_policy_values_are_refused() -> None:
    with pytest.raises(ValueError, match="split_ways"):
        PartitionPolicy(split_ways=1)
    with pytest.raises(ValueError, match="min_partitions"):
        PartitionPolicy(min_partitions=3, max_partitions=2)
    with pytest.raises(ValueError, match="event_every"):
        PartitionPolicy(event_every=timedelta(0))
