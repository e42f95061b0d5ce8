"""Envelope rows: one row per mod, the contract's columns and types, deterministic uuids, bounded batches."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pyarrow as pa

from spanner_cdc.lake.columns import LAKE_COLUMNS, LAKE_SCHEMA, PARTITION_COLUMN, SOURCE_SCHEMA, TIMESTAMP, spark_ddl
from spanner_cdc.lake.envelope import EVENT_NAMESPACE, EnvelopeBatcher, EnvelopeContext, event_uuid, from_micros, micros
from tests.unit.lake.records import T0, data_record

CONTRACT = (
    "uuid stream_name read_method object source_timestamp read_timestamp commit_timestamp server_transaction_id "
    "record_sequence mod_index change_type is_deleted primary_keys keys new_values old_values column_types "
    "value_capture_type number_of_records_in_transaction number_of_partitions_in_transaction transaction_tag "
    "is_system_transaction is_last_record_in_transaction_in_partition partition_token window_start window_end"
).split()
CONTEXT = EnvelopeContext("Orders_cs", "spanner-change-stream", "tok-A", T0, T0 + timedelta(hours=1))


def test_schema_has_exactly_the_contract_columns() -> None:
    assert list(LAKE_COLUMNS) == CONTRACT
    assert SOURCE_SCHEMA.names == CONTRACT + [PARTITION_COLUMN]
    for name in ("source_timestamp", "read_timestamp", "commit_timestamp", "window_start", "window_end"):
        assert LAKE_SCHEMA.field(name).type == pa.timestamp("us", tz="UTC")
    assert LAKE_SCHEMA.field("mod_index").type == pa.int32()
    assert LAKE_SCHEMA.field("is_deleted").type == pa.bool_()
    assert LAKE_SCHEMA.field("primary_keys").type == pa.list_(pa.string())
    assert LAKE_SCHEMA.field("record_sequence").type == pa.string()


def test_spark_ddl_names_every_column_in_order() -> None:
    ddl = spark_ddl()
    names = [part.split("`")[1] for part in ddl.split(", ")]
    assert names == CONTRACT + [PARTITION_COLUMN]
    assert "`commit_timestamp` TIMESTAMP" in ddl and "`primary_keys` ARRAY<STRING>" in ddl


def test_one_row_per_mod_with_envelope_values() -> None:
    batcher = EnvelopeBatcher(CONTEXT)
    read_at = T0 + timedelta(minutes=70)
    assert batcher.add(data_record(7, mod_type="UPDATE", mods=3, records_in_tx=2), read_at) == 3
    batch = batcher.take()
    assert batch is not None and batch.schema == SOURCE_SCHEMA
    rows = batch.to_pylist()
    assert [r["mod_index"] for r in rows] == [0, 1, 2]
    first = rows[0]
    assert first["commit_timestamp"] == first["source_timestamp"] == T0 + timedelta(microseconds=7)
    assert first["read_timestamp"] == read_at
    assert first["object"] == first[PARTITION_COLUMN] == "Users"
    assert first["change_type"] == "UPDATE" and first["is_deleted"] is False
    assert first["primary_keys"] == ["id", "region"]  # by ordinal position, keys only
    assert json.loads(rows[2]["keys"]) == {"id": "2", "region": "eu"}
    assert json.loads(rows[2]["new_values"]) == {"name": "n2"}
    assert json.loads(rows[2]["old_values"]) == {"name": "o2"}
    types = json.loads(first["column_types"])
    assert [t["name"] for t in types] == ["name", "id", "region"] and types[1]["type"] == {"code": "INT64"}
    assert first["number_of_records_in_transaction"] == 2
    assert first["partition_token"] == "tok-A" and first["stream_name"] == "Orders_cs"
    assert first["window_start"] == T0 and first["window_end"] == T0 + timedelta(hours=1)
    assert len({r["uuid"] for r in rows}) == 3
    assert batcher.take() is None


def test_delete_rows_are_marked_deleted() -> None:
    batcher = EnvelopeBatcher(CONTEXT, with_partition_column=False)
    batcher.add(data_record(mod_type="DELETE"))
    batch = batcher.take()
    assert batch is not None and batch.schema == LAKE_SCHEMA
    row = batch.to_pylist()[0]
    assert row["is_deleted"] is True and row["change_type"] == "DELETE"
    assert json.loads(row["new_values"]) == {}


def test_uuid_is_deterministic_and_distinguishes_mods() -> None:
    record = data_record(5, tx="tx-9", seq="00000003", mods=2)
    first, second = EnvelopeBatcher(CONTEXT), EnvelopeBatcher(CONTEXT)
    first.add(record, T0)
    second.add(record, T0 + timedelta(days=1))  # read later, on a re-run
    ids_first = first.take().column("uuid").to_pylist()  # type: ignore[union-attr]
    ids_second = second.take().column("uuid").to_pylist()  # type: ignore[union-attr]
    assert ids_first == ids_second and len(set(ids_first)) == 2
    expected = str(uuid.uuid5(EVENT_NAMESPACE, f"Orders_cs|{micros(record.commit_timestamp)}|tx-9|00000003|1"))
    assert ids_first[1] == expected
    assert event_uuid("Orders_cs", record.commit_timestamp, "tx-9", "00000004", 1) != expected


def test_uuid_namespace_never_changes() -> None:
    # Landed data keeps its ids forever: a changed namespace would break dedup across re-runs.
    assert event_uuid("s", T0, "t", "1", 0) == str(uuid.uuid5(uuid.UUID("5d2b8f0e-7c1a-4f6e-9a53-2f8d1c0b7e41"), f"s|{micros(T0)}|t|1|0"))


def test_batches_are_bounded_by_rows_and_bytes() -> None:
    batcher = EnvelopeBatcher(CONTEXT, max_rows=5)
    batches = []
    for i in range(12):
        batcher.add(data_record(i, tx=f"tx{i}"))
        if batcher.full:
            batches.append(batcher.take())
    batches.append(batcher.take())
    assert [b.num_rows for b in batches] == [5, 5, 2]
    small = EnvelopeBatcher(CONTEXT, max_bytes=1000)
    small.add(data_record(0, mods=4))
    assert small.full


def test_micros_round_trip_is_exact() -> None:
    value = T0 + timedelta(microseconds=123_456_789)
    assert from_micros(micros(value)) == value
    assert pa.array([micros(value)], type=TIMESTAMP).to_pylist() == [value]


def test_values_are_jsons_text_whichever_encoder_writes_them() -> None:
    """Tables without float columns are encoded by msgspec, the others by json: the text must be json's either way."""
    from msgspec.structs import replace  # records are msgspec structs

    from spanner_cdc.model.records import ColumnType, Mod

    texts = {"s": "é😀 \x00\x1f\x7f \u2028\u2029 a\"b\\c/", "n": None, "b": True, "i": 2**70, "a": [["x", None], {"k": "v"}]}
    floats = {"f": 1e16, "g": 1e-7, "h": float("nan"), "j": [0.1, {"x": 5e-324}]}
    plain = replace(
        data_record(), mods=(Mod({"id": "1"}, texts, {"s": "plain"}),)
    )
    with_floats = replace(
        data_record(seq="00000002"),
        column_types=(ColumnType("id", {"code": "INT64"}, True, 1), ColumnType("f", {"code": "FLOAT64"}, False, 2)),
        mods=(Mod({"id": "1"}, floats, {"f": {"nested": 1e300}}),),
    )
    batcher = EnvelopeBatcher(CONTEXT)
    for record in (plain, with_floats, plain):
        batcher.add(record)
    batch = batcher.take()
    assert batch is not None
    rows = batch.to_pylist()
    records = (plain, with_floats, plain)
    for row, record in zip(rows, records, strict=True):
        (mod,) = record.mods
        for column, value in (("keys", mod.keys), ("new_values", mod.new_values), ("old_values", mod.old_values)):
            assert row[column] == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    assert '"f":1e+16' in rows[1]["new_values"] and '"h":NaN' in rows[1]["new_values"]


def test_every_row_has_its_own_uuid_and_mod_index_in_a_batch_of_records_of_one_and_many_mods() -> None:
    """take() builds the ids' text and the mods' indexes for the whole batch: each row still gets its own."""
    records = [data_record(1, tx="a"), data_record(2, tx="b", mods=70), data_record(3, tx="c", mods=2), data_record(4, tx="d")]
    batcher = EnvelopeBatcher(CONTEXT)
    for record in records:
        batcher.add(record, T0)
    batch = batcher.take()
    assert batch is not None
    expected = [
        (str(uuid.uuid5(EVENT_NAMESPACE, f"Orders_cs|{micros(r.commit_timestamp)}|{r.server_transaction_id}|{r.record_sequence}|{i}")), i)
        for r in records
        for i in range(len(r.mods))
    ]
    assert list(zip(batch.column("uuid").to_pylist(), batch.column("mod_index").to_pylist(), strict=True)) == expected
    keys = [json.loads(k)["id"] for k in batch.column("keys").to_pylist()]
    assert keys == [str(i) for r in records for i in range(len(r.mods))]
    assert batch.column("server_transaction_id").to_pylist() == [r.server_transaction_id for r in records for _ in r.mods]


def test_joined_batchers_build_the_rows_their_own_takes_would_one_after_another() -> None:
    """A wave task builds its small tokens' rows at once: the same rows, each with its own token, in the same order."""
    from dataclasses import replace

    groups = {
        "tok-A": [data_record(1, tx="a", table="Orders"), data_record(2, tx="b", mods=3)],
        "tok-B": [],
        "tok-C": [data_record(3, tx="c", mods=2, mod_type="DELETE"), data_record(4, tx="d", table="Orders")],
    }

    def gathered() -> list[EnvelopeBatcher]:
        batchers = []
        for token, records in groups.items():
            batcher = EnvelopeBatcher(replace(CONTEXT, partition_token=token))
            for record in records:
                batcher.add(record, T0)
            batchers.append(batcher)
        return batchers

    alone = pa.Table.from_batches([b for b in (batcher.take() for batcher in gathered()) if b is not None])
    batchers = gathered()
    assert [b.table_rows() for b in batchers] == [{"Orders": 1, "Users": 3}, {}, {"Users": 2, "Orders": 1}]
    joined = EnvelopeBatcher.joined(batchers)
    batch = joined.take()
    assert batch is not None and batch.schema == SOURCE_SCHEMA
    assert pa.Table.from_batches([batch]).equals(alone)
    assert batch.column("partition_token").to_pylist() == ["tok-A"] * 4 + ["tok-C"] * 3
    assert joined.take() is None  # taken: empty again
    other_window = EnvelopeBatcher(replace(CONTEXT, partition_token="tok-D", window_end=T0 + timedelta(hours=2)))
    try:
        EnvelopeBatcher.joined([*gathered(), other_window])
    except ValueError as exc:
        assert "window" in str(exc)
    else:
        raise AssertionError("batchers of another window were joined")
