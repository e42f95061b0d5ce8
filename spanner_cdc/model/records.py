"""Immutable model of the change stream record kinds of both partition modes, independent of SQL dialect."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from spanner_cdc.names import VALUE_CAPTURE_TYPES as VALUE_CAPTURE_TYPES  # re-exported with the records

ModType = Literal["INSERT", "UPDATE", "DELETE"]
MOD_TYPES: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE")


class _Record(msgspec.Struct, frozen=True, gc=False):
    """Immutable, compared field by field, built by a C constructor: a decoder builds millions of them, and a frozen
    dataclass's __init__ (one object.__setattr__ per field) cost more than reading the record off the wire. Not
    tracked by the cyclic GC (gc=False): a record holds only values decoded for it, so it is never part of a cycle,
    and the collector does not walk millions of them. Copies with changes: msgspec.structs.replace (the dataclasses
    module's helpers do not apply)."""


class ColumnType(_Record, frozen=True):
    """One column of a data change record: `type` is Spanner's JSON type, e.g. {"code": "INT64"}."""

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int


class Mod(_Record, frozen=True):
    """One changed row: key columns, and the non-key new / old values the capture type provides."""

    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]


class DataChangeRecord(_Record, frozen=True):
    commit_timestamp: datetime
    record_sequence: str
    server_transaction_id: str
    is_last_record_in_transaction_in_partition: bool
    table_name: str
    column_types: tuple[ColumnType, ...]
    mods: tuple[Mod, ...]
    mod_type: str
    value_capture_type: str
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    transaction_tag: str
    is_system_transaction: bool

    kind = "data_change"

    @property
    def timestamp(self) -> datetime:
        """The point up to which this record proves the partition complete."""
        return self.commit_timestamp


class HeartbeatRecord(_Record, frozen=True):
    timestamp: datetime

    kind = "heartbeat"


class ChildPartition(_Record, frozen=True):
    token: str
    parent_partition_tokens: tuple[str, ...]


class ChildPartitionsRecord(_Record, frozen=True):
    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]

    kind = "child_partitions"

    @property
    def timestamp(self) -> datetime:
        return self.start_timestamp


class PartitionStartRecord(_Record, frozen=True):
    """MUTABLE_KEY_RANGE: partitions to read from `start_timestamp` on (the root query's, or new ones)."""

    start_timestamp: datetime
    record_sequence: str
    partition_tokens: tuple[str, ...]

    kind = "partition_start"

    @property
    def timestamp(self) -> datetime:
        return self.start_timestamp


class PartitionEndRecord(_Record, frozen=True):
    """MUTABLE_KEY_RANGE: the partition's last record; all its changes are at or before `end_timestamp`."""

    end_timestamp: datetime
    record_sequence: str
    partition_token: str

    kind = "partition_end"

    @property
    def timestamp(self) -> datetime:
        return self.end_timestamp


class PartitionEventRecord(_Record, frozen=True):
    """MUTABLE_KEY_RANGE: key ranges moved into the partition (from `move_in_from`) or out of it (to
    `move_out_to`) at `commit_timestamp`."""

    commit_timestamp: datetime
    record_sequence: str
    partition_token: str
    move_in_from: tuple[str, ...]
    move_out_to: tuple[str, ...]

    kind = "partition_event"

    @property
    def timestamp(self) -> datetime:
        return self.commit_timestamp


ChangeRecord = (
    DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord | PartitionStartRecord | PartitionEndRecord | PartitionEventRecord
)
PartitionRecord = PartitionStartRecord | PartitionEndRecord | PartitionEventRecord

T_co = TypeVar("T_co", covariant=True)


class RecordHandler(Protocol[T_co]):
    """One method per record kind. A new kind is added here and in `dispatch`; mypy then names every handler that lacks it."""

    def data_change(self, record: DataChangeRecord) -> T_co: ...

    def heartbeat(self, record: HeartbeatRecord) -> T_co: ...

    def child_partitions(self, record: ChildPartitionsRecord) -> T_co: ...

    def partition_start(self, record: PartitionStartRecord) -> T_co: ...

    def partition_end(self, record: PartitionEndRecord) -> T_co: ...

    def partition_event(self, record: PartitionEventRecord) -> T_co: ...


def dispatch(record: ChangeRecord, handler: RecordHandler[T_co]) -> T_co:
    """The one place that tells record kinds apart: the handler's method for the record's kind."""
    match record:
        case DataChangeRecord():
            return handler.data_change(record)
        case HeartbeatRecord():
            return handler.heartbeat(record)
        case ChildPartitionsRecord():
            return handler.child_partitions(record)
        case PartitionStartRecord():
            return handler.partition_start(record)
        case PartitionEndRecord():
            return handler.partition_end(record)
        case PartitionEventRecord():
            return handler.partition_event(record)
    raise TypeError(f"not a change record: {type(record).__name__}")
