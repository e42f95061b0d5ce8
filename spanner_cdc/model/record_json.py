"""A change record as a JSON-able dict: `kind`, `partition_token` and the spec's field names."""

from __future__ import annotations

from typing import Any

from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    dispatch,
)
from spanner_cdc.times import rfc3339


def record_to_json(record: ChangeRecord, token: str | None) -> dict[str, Any]:
    """Pure: the record read from partition `token` (None for the first, root query)."""
    return dispatch(record, _JsonForm(token))


class _JsonForm:
    """The JSON form of each record kind, with the partition it was read from."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def data_change(self, record: DataChangeRecord) -> dict[str, Any]:
        return {
            "kind": "data_change",
            "partition_token": self.token,
            "commit_timestamp": rfc3339(record.commit_timestamp),
            "record_sequence": record.record_sequence,
            "server_transaction_id": record.server_transaction_id,
            "is_last_record_in_transaction_in_partition": record.is_last_record_in_transaction_in_partition,
            "table_name": record.table_name,
            "column_types": [
                {
                    "name": c.name,
                    "type": c.type,
                    "is_primary_key": c.is_primary_key,
                    "ordinal_position": c.ordinal_position,
                }
                for c in record.column_types
            ],
            "mods": [{"keys": m.keys, "new_values": m.new_values, "old_values": m.old_values} for m in record.mods],
            "mod_type": record.mod_type,
            "value_capture_type": record.value_capture_type,
            "number_of_records_in_transaction": record.number_of_records_in_transaction,
            "number_of_partitions_in_transaction": record.number_of_partitions_in_transaction,
            "transaction_tag": record.transaction_tag,
            "is_system_transaction": record.is_system_transaction,
        }

    def heartbeat(self, record: HeartbeatRecord) -> dict[str, Any]:
        return {"kind": "heartbeat", "partition_token": self.token, "timestamp": rfc3339(record.timestamp)}

    def child_partitions(self, record: ChildPartitionsRecord) -> dict[str, Any]:
        return {
            "kind": "child_partitions",
            "partition_token": self.token,
            "start_timestamp": rfc3339(record.start_timestamp),
            "record_sequence": record.record_sequence,
            "child_partitions": [
                {"token": c.token, "parent_partition_tokens": list(c.parent_partition_tokens)}
                for c in record.child_partitions
            ],
        }

    def partition_start(self, record: PartitionStartRecord) -> dict[str, Any]:
        return {
            "kind": "partition_start",
            "partition_token": self.token,
            "start_timestamp": rfc3339(record.start_timestamp),
            "record_sequence": record.record_sequence,
            "partition_tokens": list(record.partition_tokens),
        }

    def partition_end(self, record: PartitionEndRecord) -> dict[str, Any]:
        return {
            "kind": "partition_end",
            "partition_token": self.token,
            "end_timestamp": rfc3339(record.end_timestamp),
            "record_sequence": record.record_sequence,
        }

    def partition_event(self, record: PartitionEventRecord) -> dict[str, Any]:
        return {
            "kind": "partition_event",
            "partition_token": self.token,
            "commit_timestamp": rfc3339(record.commit_timestamp),
            "record_sequence": record.record_sequence,
            "move_in_events": [{"source_partition_token": t} for t in record.move_in_from],
            "move_out_events": [{"destination_partition_token": t} for t in record.move_out_to],
        }
