"""Record factories for the lake and pipeline unit tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spanner_cdc.model.records import (
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
)

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
COLUMNS = (
    ColumnType("name", {"code": "STRING"}, False, 3),
    ColumnType("id", {"code": "INT64"}, True, 1),
    ColumnType("region", {"code": "STRING"}, True, 2),
)


def data_record(
    offset_us: int = 0,
    *,
    tx: str = "tx-1",
    seq: str = "00000001",
    table: str = "Users",
    mod_type: str = "INSERT",
    mods: int = 1,
    records_in_tx: int = 1,
) -> DataChangeRecord:
    return DataChangeRecord(
        commit_timestamp=T0 + timedelta(microseconds=offset_us),
        record_sequence=seq,
        server_transaction_id=tx,
        is_last_record_in_transaction_in_partition=True,
        table_name=table,
        column_types=COLUMNS,
        mods=tuple(
            Mod(
                keys={"id": str(i), "region": "eu"},
                new_values={} if mod_type == "DELETE" else {"name": f"n{i}"},
                old_values={} if mod_type == "INSERT" else {"name": f"o{i}"},
            )
            for i in range(mods)
        ),
        mod_type=mod_type,
        value_capture_type="OLD_AND_NEW_VALUES",
        number_of_records_in_transaction=records_in_tx,
        number_of_partitions_in_transaction=1,
        transaction_tag="tag",
        is_system_transaction=False,
    )


def heartbeat(offset_us: int) -> HeartbeatRecord:
    return HeartbeatRecord(T0 + timedelta(microseconds=offset_us))


def children(offset_us: int, parent: str, *tokens: str) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(
        start_timestamp=T0 + timedelta(microseconds=offset_us),
        record_sequence="00000001",
        child_partitions=tuple(ChildPartition(token, (parent,)) for token in tokens),
    )
