"""Data change records of the engine: value capture types, tracked columns, sequences and counts."""

from __future__ import annotations

from datetime import timedelta

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
    data_records,
    read_all,
)

FIELDS = [
    "commit_timestamp",
    "record_sequence",
    "server_transaction_id",
    "is_last_record_in_transaction_in_partition",
    "table_name",
    "column_types",
    "mods",
    "mod_type",
    "value_capture_type",
    "number_of_records_in_transaction",
    "number_of_partitions_in_transaction",
    "transaction_tag",
    "is_system_transaction",
]
INFO = '{"genre":"jazz"}'
FULL_OLD = {"FirstName": "Ann", "LastName": "Lee", "Info": INFO}
FULL_NEW = {"FirstName": "Bea", "LastName": "Lee", "Info": INFO}
EXPECTED = {
    "OLD_AND_NEW_VALUES": [
        ("INSERT", FULL_OLD, {}),
        ("UPDATE", {"FirstName": "Bea"}, {"FirstName": "Ann"}),
        ("DELETE", {}, FULL_NEW),
    ],
    "NEW_VALUES": [("INSERT", FULL_OLD, {}), ("UPDATE", {"FirstName": "Bea"}, {}), ("DELETE", {}, {})],
    "NEW_ROW": [("INSERT", FULL_OLD, {}), ("UPDATE", FULL_NEW, {}), ("DELETE", {}, {})],
    "NEW_ROW_AND_OLD_VALUES": [
        ("INSERT", FULL_OLD, {}),
        ("UPDATE", FULL_NEW, {"FirstName": "Ann"}),
        ("DELETE", {}, FULL_NEW),
    ],
}


def quiet_policy(initial: int = 1) -> PartitionPolicy:
    return PartitionPolicy(initial_partitions=initial, event_every=None, merge_idle=None, split_records=10**9)


def all_records(engine: ChangeStreamEngine, clock: ManualClock, stream: str = "s") -> list[dict]:
    created = (
        engine.streams(DB)[0].created_at
        if stream == "s"
        else next(s for s in engine.streams(DB) if s.name == stream).created_at
    )
    end = clock.now()
    clock.advance(timedelta(seconds=1))  # the end must be in the past for the queries to finish
    records = [r for rs in read_all(engine, created, end, stream=stream).values() for r in data_records(rs)]
    return sorted(records, key=lambda r: (r["commit_timestamp"], r["record_sequence"]))


@pytest.mark.parametrize("capture", list(EXPECTED))
def test_value_capture_types_give_the_documented_old_and_new_values(capture: str) -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=quiet_policy())
    engine.create_stream(DB, StreamDef("s", None, value_capture_type=capture), TABLES)
    writer = Writer(engine, clock)
    writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "Ann", "LastName": "Lee", "Info": INFO})
    writer.commit([writer.change(SINGERS, "UPDATE", {"SingerId": "1"}, {"FirstName": "Bea"})])
    writer.commit([writer.change(SINGERS, "DELETE", {"SingerId": "1"})])

    records = all_records(engine, clock)

    got = [(r["mod_type"], r["mods"][0]["new_values"], r["mods"][0]["old_values"]) for r in records]
    assert got == EXPECTED[capture]
    assert all(list(r) == FIELDS for r in records)
    assert {r["value_capture_type"] for r in records} == {capture}
    for record in records:
        mod = record["mods"][0]
        assert mod["keys"] == {"SingerId": "1"}
        present = {"SingerId", *mod["new_values"], *mod["old_values"]}
        assert [c["name"] for c in record["column_types"]] == [c.name for c in SINGERS.columns if c.name in present]
        assert record["column_types"][0] == {
            "name": "SingerId",
            "type": {"code": "INT64"},
            "is_primary_key": True,
            "ordinal_position": 1,
        }


def test_only_tracked_tables_and_columns_are_recorded() -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=quiet_policy())
    engine.create_stream(DB, StreamDef("s", {"Singers": ("LastName",)}), TABLES)
    writer = Writer(engine, clock)
    writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "Ann", "LastName": "Lee"})
    writer.insert(ALBUMS, {"SingerId": "1", "AlbumId": "2"}, {"Title": "T"})
    writer.commit([writer.change(SINGERS, "UPDATE", {"SingerId": "1"}, {"FirstName": "Bea"})])
    writer.commit([writer.change(SINGERS, "UPDATE", {"SingerId": "1"}, {"LastName": "Kim", "Info": INFO})])

    records = all_records(engine, clock)

    assert [(r["table_name"], r["mod_type"]) for r in records] == [("Singers", "INSERT"), ("Singers", "UPDATE")]
    assert records[0]["mods"][0]["new_values"] == {"LastName": "Lee"}
    assert records[1]["mods"][0] == {
        "keys": {"SingerId": "1"},
        "new_values": {"LastName": "Kim"},
        "old_values": {"LastName": "Lee"},
    }
    assert [c["name"] for c in records[1]["column_types"]] == ["SingerId", "LastName"]


def test_a_transaction_across_partitions_counts_its_records_and_partitions() -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=quiet_policy(initial=4))
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    writer = Writer(engine, clock)
    changes = []
    for i in range(20):
        changes.append(writer.change(SINGERS, "INSERT", {"SingerId": str(i)}, {"FirstName": f"f{i}"}))
        changes.append(
            writer.change(ALBUMS, "INSERT", {"SingerId": str(i), "AlbumId": "1"}, {"Title": f"t{i}", "Tags": ["a"]})
        )
    ts = writer.commit(changes, tag="app=test")
    clock.advance(timedelta(seconds=1))

    created = engine.streams(DB)[0].created_at
    by_partition = {token: data_records(records) for token, records in read_all(engine, created, ts).items()}

    records = [r for rs in by_partition.values() for r in rs]
    touched = [token for token, rs in by_partition.items() if rs]
    assert len(touched) == 4
    assert sum(len(r["mods"]) for r in records) == 40
    assert {r["number_of_records_in_transaction"] for r in records} == {len(records)}
    assert {r["number_of_partitions_in_transaction"] for r in records} == {4}
    assert len({r["server_transaction_id"] for r in records}) == 1
    assert {r["transaction_tag"] for r in records} == {"app=test"}
    assert {r["commit_timestamp"] for r in records} == {ts}
    assert {r["is_system_transaction"] for r in records} == {False}
    assert len({r["record_sequence"] for r in records}) == len(records)
    for token in touched:
        sequences = [r["record_sequence"] for r in by_partition[token]]
        assert sequences == sorted(sequences)
        assert [r["is_last_record_in_transaction_in_partition"] for r in by_partition[token]] == [False] * (
            len(sequences) - 1
        ) + [True]
    inserted = sorted((r["table_name"], tuple(m["keys"].values())) for r in records for m in r["mods"])
    assert inserted == sorted(
        [("Singers", (str(i),)) for i in range(20)] + [("Albums", (str(i), "1")) for i in range(20)]
    )


def test_changes_of_one_key_keep_their_order_within_a_transaction() -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=quiet_policy())
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    writer = Writer(engine, clock)
    writer.commit(
        [
            writer.change(SINGERS, "INSERT", {"SingerId": "1"}, {"FirstName": "a"}),
            writer.change(SINGERS, "INSERT", {"SingerId": "2"}, {"FirstName": "b"}),
            writer.change(SINGERS, "UPDATE", {"SingerId": "1"}, {"FirstName": "c"}),
            writer.change(SINGERS, "DELETE", {"SingerId": "2"}),
        ]
    )

    records = all_records(engine, clock)

    assert [(r["mod_type"], [m["keys"]["SingerId"] for m in r["mods"]]) for r in records] == [
        ("INSERT", ["1", "2"]),
        ("UPDATE", ["1"]),
        ("DELETE", ["2"]),
    ]
    assert [r["record_sequence"] for r in records] == ["00000000", "00000001", "00000002"]
    assert {r["number_of_records_in_transaction"] for r in records} == {3}


def test_commits_before_the_stream_existed_are_not_recorded() -> None:
    clock = ManualClock()
    engine = ChangeStreamEngine(clock, policy=quiet_policy())
    engine.update_tables(DB, TABLES)
    writer = Writer(engine, clock)
    writer.insert(SINGERS, {"SingerId": "1"}, {"FirstName": "early"})
    engine.create_stream(DB, StreamDef("s", None), TABLES)
    writer.insert(SINGERS, {"SingerId": "2"}, {"FirstName": "late"})

    records = all_records(engine, clock)

    assert [r["mods"][0]["keys"] for r in records] == [{"SingerId": "2"}]
