"""PostgreSQL data change records decoded by msgspec into typed structs: the fast path for well-formed JSON rows."""

from __future__ import annotations

from datetime import datetime
from json import loads as _json_loads
from typing import Any, Literal

import msgspec

from spanner_cdc.model.records import ColumnType, DataChangeRecord, Mod
from spanner_cdc.source.decode.fields import pg_column_types
from spanner_cdc.times import parse_rfc3339

_UNSET: Any = msgspec.UNSET


class _DataChange(msgspec.Struct, gc=False):  # never in a cycle: no need for the GC to walk it
    """The fields postgresql.py reads, with its defaults for the optional ones, and the values it accepts for the two
    enumerations: anything else fails validation and goes the slow way, which explains it (or accepts it: INT64 as
    text, a numeric record_sequence). What validates needs no more checks than a record with mods."""

    commit_timestamp: str
    record_sequence: str
    server_transaction_id: str
    table_name: str
    column_types: msgspec.Raw  # kept as text: a table's column types repeat, so they are mapped once per table and text
    mods: tuple[Mod, ...]  # built by msgspec itself; a NULL new_values or old_values fails here and goes the slow way
    mod_type: Literal["INSERT", "UPDATE", "DELETE"]  # records.MOD_TYPES
    value_capture_type: Literal["OLD_AND_NEW_VALUES", "NEW_ROW", "NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"]
    number_of_records_in_transaction: int
    number_of_partitions_in_transaction: int
    is_last_record_in_transaction_in_partition: bool | None = None
    transaction_tag: str | None = ""
    is_system_transaction: bool | None = None


class _Row(msgspec.Struct, forbid_unknown_fields=True):
    """Exactly one record kind per row: other kinds are only noticed (UNSET or not), so a row with two keys,
    or a null one, never takes the fast path."""

    data_change_record: _DataChange | msgspec.UnsetType = _UNSET
    heartbeat_record: msgspec.Raw | msgspec.UnsetType = _UNSET
    child_partitions_record: msgspec.Raw | msgspec.UnsetType = _UNSET


_decoder = msgspec.json.Decoder(_Row)
_FAILED = (msgspec.DecodeError, msgspec.ValidationError)


class FastDataChanges:
    """One result set's fast path: its column types and timestamp caches."""

    __slots__ = ("_columns", "_stamp_text", "_stamp")

    def __init__(self) -> None:
        # by table: the text of its last column types and their mapping (compared as they come, not copied to bytes
        # to be looked up: the copy cost a third of what the fast path adds to msgspec's decode)
        self._columns: dict[str, tuple[msgspec.Raw, tuple[ColumnType, ...]]] = {}
        self._stamp_text = ""
        self._stamp: datetime | None = None

    def __call__(self, text: str) -> DataChangeRecord | None:
        """The record of a well-formed data change row, else None (the caller's slow path decides)."""
        try:
            row = _decoder.decode(text)
        except _FAILED:
            return None
        d = row.data_change_record
        if not isinstance(d, _DataChange) or row.heartbeat_record is not _UNSET or row.child_partitions_record is not _UNSET:
            return None
        if not d.mods:
            return None
        # a transaction's records share their commit timestamp, a table's records their column types: each mapped once
        if d.commit_timestamp != self._stamp_text or self._stamp is None:
            try:
                self._stamp = parse_rfc3339(d.commit_timestamp)  # not fields.parse_timestamp: its message is not needed
            except Exception:  # any doubt: the slow path maps the same text and raises its own, explained error
                return None
            self._stamp_text = d.commit_timestamp
        cached = self._columns.get(d.table_name)
        if cached is not None and cached[0] == d.column_types:
            columns = cached[1]
        else:
            try:
                columns = pg_column_types(_json_loads(bytes(d.column_types)))
            except Exception:
                return None
            if len(self._columns) < 1024 or d.table_name in self._columns:
                # a copy: the decoded Raw refers to the whole row's text
                self._columns[d.table_name] = (d.column_types.copy(), columns)
        return DataChangeRecord(
            self._stamp, d.record_sequence, d.server_transaction_id, d.is_last_record_in_transaction_in_partition or False,
            d.table_name, columns, d.mods, d.mod_type, d.value_capture_type, d.number_of_records_in_transaction,
            d.number_of_partitions_in_transaction, d.transaction_tag or "", d.is_system_transaction or False,
        )  # fmt: skip


__all__ = ["FastDataChanges"]
