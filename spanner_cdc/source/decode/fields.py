"""What the decoders share: field names, value checks, record construction, timestamps and malformed-row errors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from json import loads as _json_loads
from typing import Any

from google.cloud.spanner_v1.data_types import JsonObject

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import (
    MOD_TYPES,
    VALUE_CAPTURE_TYPES,
    ChangeRecord,
    ColumnType,
    DataChangeRecord,
    Mod,
)
from spanner_cdc.times import parse_rfc3339

RowMapper = Callable[[Sequence[Any]], list[ChangeRecord]]

RECORD_KINDS = ("data_change_record", "heartbeat_record", "child_partitions_record")
DATA_CHANGE_FIELDS = (
    "commit_timestamp", "record_sequence", "server_transaction_id", "is_last_record_in_transaction_in_partition",
    "table_name", "column_types", "mods", "mod_type", "value_capture_type", "number_of_records_in_transaction",
    "number_of_partitions_in_transaction", "transaction_tag", "is_system_transaction",
)  # fmt: skip
COLUMN_TYPE_FIELDS = ("name", "type", "is_primary_key", "ordinal_position")
MOD_FIELDS = ("keys", "new_values", "old_values")
HEARTBEAT_FIELDS = ("timestamp",)
CHILD_PARTITIONS_FIELDS = ("start_timestamp", "record_sequence", "child_partitions")
CHILD_PARTITION_FIELDS = ("token", "parent_partition_tokens")
_MOD_TYPES = frozenset(MOD_TYPES)
_VALUE_CAPTURE_TYPES = frozenset(VALUE_CAPTURE_TYPES)
# what a malformed row makes the mapping code raise; turned into SourceError with the raw row
SHAPE_ERRORS = (IndexError, KeyError, TypeError, ValueError, AttributeError)


class Malformed(Exception):
    """Raised inside the hot path; carries what was wrong, the caller adds the raw row."""


def row_error(exc: Exception, row: Any) -> SourceError:
    """The error of a row a mapper could not map: `Malformed` says what was wrong, a shape error (SHAPE_ERRORS) names
    the exception; both carry the raw row."""
    if isinstance(exc, Malformed):
        return SourceError(f"malformed change record: {exc}", raw=row)
    return SourceError(f"malformed change record ({type(exc).__name__}: {exc})", raw=row)


def empty_array(row: Any) -> SourceError:
    """The error of a GoogleSQL row whose ChangeRecord array holds no element."""
    return SourceError("malformed change record: empty ChangeRecord array", raw=row)


def as_text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise Malformed(f"{name} is not a string")
    return value


def as_int(value: Any, name: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str and value.isdigit():  # INT64 inside JSON may be text
        return int(value)
    raise Malformed(f"{name} is not an integer")


def as_bool(value: Any, name: str) -> bool:
    if value is None:
        return False
    if type(value) is not bool:
        raise Malformed(f"{name} is not a boolean")
    return value


def as_sequence(value: Any, name: str) -> str:
    if type(value) is str:
        return value
    if type(value) is int:  # the spec's own examples show record_sequence as a number, too
        return str(value)
    raise Malformed(f"{name} is not a string")


def plain_json(value: JsonObject) -> Any:
    """The client's JsonObject (a dict subclass that also stands for arrays, scalars and null) as the plain JSON value
    it holds, through its public serialization: a dict, list, scalar, or None for JSON null."""
    text = value.serialize()
    return None if text is None else _json_loads(text)


def as_json_object(value: Any, name: str, null_is_empty: bool) -> dict[str, Any]:
    """A JSON object as a plain dict; the client decodes JSON to JsonObject, which also models arrays, scalars and
    null, so those are told apart here."""
    if type(value) is dict:
        return value
    if isinstance(value, JsonObject):
        value = plain_json(value)
        if type(value) is dict:
            return value
        if value is not None:
            raise Malformed(f"{name} is not a JSON object")
    if value is None and null_is_empty:
        return {}
    if value is None:
        raise Malformed(f"{name} is null")
    raise Malformed(f"{name} is not a JSON object")


def as_list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise Malformed(f"{name} is not an array")
    return value


def as_timestamp(value: Any, name: str) -> datetime:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    raise Malformed(f"{name} is not a timestamp")


def parse_timestamp(value: Any, name: str) -> datetime:
    """RFC 3339 text (PostgreSQL dialect) -> aware UTC datetime (times.parse_rfc3339); nanoseconds are truncated to µs."""
    try:
        return parse_rfc3339(value)
    except ValueError:
        raise Malformed(f"{name} is not an RFC 3339 timestamp") from None


def build_data_change(
    commit_timestamp: datetime, record_sequence: Any, server_transaction_id: Any, is_last: Any, table_name: Any,
    column_types: tuple[ColumnType, ...], mods: tuple[Mod, ...], mod_type: Any, value_capture_type: Any,
    records_in_transaction: Any, partitions_in_transaction: Any, transaction_tag: Any, is_system_transaction: Any,
) -> DataChangeRecord:  # fmt: skip
    if mod_type not in _MOD_TYPES:
        raise Malformed(f"unknown mod_type {mod_type!r}")
    if value_capture_type not in _VALUE_CAPTURE_TYPES:
        raise Malformed(f"unknown value_capture_type {value_capture_type!r}")
    if not mods:
        raise Malformed("data change record without mods")
    str_, int_, bool_ = str, int, bool
    if not (  # the well-formed case in one test, then the per-field checks that explain a failure
        type(record_sequence) is str_
        and type(server_transaction_id) is str_
        and type(is_last) is bool_
        and type(table_name) is str_
        and type(records_in_transaction) is int_
        and type(partitions_in_transaction) is int_
        and type(transaction_tag) is str_
        and type(is_system_transaction) is bool_
    ):
        record_sequence = as_sequence(record_sequence, "record_sequence")
        server_transaction_id = as_text(server_transaction_id, "server_transaction_id")
        is_last = as_bool(is_last, "is_last_record_in_transaction_in_partition")
        table_name = as_text(table_name, "table_name")
        records_in_transaction = as_int(records_in_transaction, "number_of_records_in_transaction")
        partitions_in_transaction = as_int(partitions_in_transaction, "number_of_partitions_in_transaction")
        transaction_tag = "" if transaction_tag is None else as_text(transaction_tag, "transaction_tag")
        is_system_transaction = as_bool(is_system_transaction, "is_system_transaction")
    return DataChangeRecord(
        commit_timestamp, record_sequence, server_transaction_id, is_last, table_name, column_types, mods,
        mod_type, value_capture_type, records_in_transaction, partitions_in_transaction, transaction_tag,
        is_system_transaction,
    )  # fmt: skip


def build_column_type(name: Any, type_: Any, is_primary_key: Any, ordinal_position: Any) -> ColumnType:
    return ColumnType(
        as_text(name, "column_types.name"),
        as_json_object(type_, "column_types.type", False),
        as_bool(is_primary_key, "column_types.is_primary_key"),
        as_int(ordinal_position, "column_types.ordinal_position"),
    )


def build_mod(keys: Any, new_values: Any, old_values: Any) -> Mod:
    if type(keys) is dict and type(new_values) is dict and type(old_values) is dict:
        return Mod(keys, new_values, old_values)
    return Mod(
        as_json_object(keys, "mods.keys", False),
        as_json_object(new_values, "mods.new_values", True),
        as_json_object(old_values, "mods.old_values", True),
    )


class ColumnTypesCache:
    """The column types of a table repeat in every record: map them once per result set and table,
    and reuse the (immutable) result while the raw value is equal. The raw value is kept as the
    client decoded it; nothing mutates decoded rows."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, tuple[ColumnType, ...]]] = {}

    def get(self, table: Any, raw: Any, build: Callable[[Any], tuple[ColumnType, ...]]) -> tuple[ColumnType, ...]:
        entry = self._entries.get(table)
        if entry is not None and entry[0] == raw:
            return entry[1]
        built = build(raw)
        if len(self._entries) < 1024 and type(table) is str:
            self._entries[table] = (raw, built)
        return built


def as_parent_tokens(value: Any) -> tuple[str, ...]:
    # root partitions list no parent, or (in the spec's example) a single NULL parent
    return tuple(as_text(token, "parent_partition_tokens[]") for token in as_list(value, "parent_partition_tokens") if token is not None)



def pg_column_types(raw: Any) -> tuple[ColumnType, ...]:
    return tuple(
        build_column_type(c["name"], c["type"], c["is_primary_key"], c["ordinal_position"])
        for c in as_list(raw, "column_types")
    )

