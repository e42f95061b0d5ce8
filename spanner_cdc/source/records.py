"""Immutable model of the three change stream record kinds, independent of SQL dialect."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from spanner_cdc.names import VALUE_CAPTURE_TYPES as VALUE_CAPTURE_TYPES  # re-exported with the records

ModType = Literal["INSERT", "UPDATE", "DELETE"]
MOD_TYPES: tuple[str, ...] = ("INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True, slots=True)
class ColumnType:
    """One column of a data change record: `type` is Spanner's JSON type, e.g. {"code": "INT64"}."""

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int


@dataclass(frozen=True, slots=True)
class Mod:
    """One changed row: key columns, and the non-key new / old values the capture type provides."""

    keys: dict[str, Any]
    new_values: dict[str, Any]
    old_values: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DataChangeRecord:
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


@dataclass(frozen=True, slots=True)
class HeartbeatRecord:
    timestamp: datetime

    kind = "heartbeat"


@dataclass(frozen=True, slots=True)
class ChildPartition:
    token: str
    parent_partition_tokens: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChildPartitionsRecord:
    start_timestamp: datetime
    record_sequence: str
    child_partitions: tuple[ChildPartition, ...]

    kind = "child_partitions"

    @property
    def timestamp(self) -> datetime:
        return self.start_timestamp


ChangeRecord = DataChangeRecord | HeartbeatRecord | ChildPartitionsRecord

T_co = TypeVar("T_co", covariant=True)


class RecordHandler(Protocol[T_co]):
    """One method per record kind. A new kind is added here and in `dispatch`; mypy then names every handler that lacks it."""

    def data_change(self, record: DataChangeRecord) -> T_co: ...

    def heartbeat(self, record: HeartbeatRecord) -> T_co: ...

    def child_partitions(self, record: ChildPartitionsRecord) -> T_co: ...


def dispatch(record: ChangeRecord, handler: RecordHandler[T_co]) -> T_co:
    """The one place that tells record kinds apart: the handler's method for the record's kind."""
    match record:
        case DataChangeRecord():
            return handler.data_change(record)
        case HeartbeatRecord():
            return handler.heartbeat(record)
        case ChildPartitionsRecord():
            return handler.child_partitions(record)
    raise TypeError(f"not a change record: {type(record).__name__}")
