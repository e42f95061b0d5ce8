"""PostgreSQL rows -> typed records: one JSON object per row with exactly one key."""

from __future__ import annotations

from collections.abc import Sequence
from json import loads as _json_loads
from typing import Any

from google.cloud.spanner_v1 import TypeCode
from google.cloud.spanner_v1.data_types import JsonObject
from google.protobuf.struct_pb2 import Value as _WireValue

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
)
from spanner_cdc.source.decode.fields import (
    RECORD_KINDS,
    SHAPE_ERRORS,
    ColumnTypesCache,
    Malformed,
    RowMapper,
    as_list,
    as_parent_tokens,
    as_sequence,
    as_text,
    build_data_change,
    build_mod,
    parse_timestamp,
    pg_column_types,
    plain_json,
    row_error,
)
from spanner_cdc.source.decode.pg_json import FastDataChanges


def _pg_data_change(d: dict[str, Any], columns_cache: ColumnTypesCache) -> DataChangeRecord:
    mods = tuple([build_mod(m["keys"], m.get("new_values"), m.get("old_values")) for m in as_list(d["mods"], "mods")])
    table = d["table_name"]
    return build_data_change(
        parse_timestamp(d["commit_timestamp"], "commit_timestamp"), d["record_sequence"], d["server_transaction_id"],
        d.get("is_last_record_in_transaction_in_partition"), table,
        columns_cache.get(table, d["column_types"], pg_column_types), mods, d["mod_type"],
        d["value_capture_type"], d["number_of_records_in_transaction"], d["number_of_partitions_in_transaction"],
        d.get("transaction_tag", ""), d.get("is_system_transaction"),
    )  # fmt: skip


def _pg_heartbeat(d: dict[str, Any]) -> HeartbeatRecord:
    return HeartbeatRecord(parse_timestamp(d["timestamp"], "timestamp"))


def _pg_child_partitions(d: dict[str, Any]) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(
        start_timestamp=parse_timestamp(d["start_timestamp"], "start_timestamp"),
        record_sequence=as_sequence(d["record_sequence"], "record_sequence"),
        child_partitions=tuple(
            ChildPartition(as_text(c["token"], "child_partitions.token"), as_parent_tokens(c.get("parent_partition_tokens")))
            for c in as_list(d["child_partitions"], "child_partitions")
        ),
    )


class _PostgresqlRecords:
    """Maps the JSON objects of one result set; holds that result set's column types cache."""

    def __init__(self) -> None:
        self._columns = ColumnTypesCache()
        self._fast = FastDataChanges()

    def __call__(self, value: Any) -> ChangeRecord:
        try:
            if type(value) is _WireValue:  # execute_sql(lazy_decode=True): the JSON text as sent
                fast = self._fast(value.string_value)
                if fast is not None:
                    return fast
                if value.HasField("null_value"):
                    raise Malformed("the row is null")
                try:
                    value = _json_loads(value.string_value)
                except ValueError:
                    raise Malformed("the row is not JSON") from None
            if isinstance(value, JsonObject):
                value = plain_json(value)
            if type(value) is not dict:
                raise Malformed("the row is not a JSON object")
            if len(value) != 1:
                raise Malformed(f"expected exactly one of {', '.join(RECORD_KINDS)}, got keys {sorted(value)}")
            ((kind, body),) = value.items()
            if type(body) is not dict:
                raise Malformed(f"{kind} is not a JSON object" if kind in RECORD_KINDS else f"unknown record kind {kind!r}")
            if kind == "data_change_record":
                return _pg_data_change(body, self._columns)
            if kind == "heartbeat_record":
                return _pg_heartbeat(body)
            if kind == "child_partitions_record":
                return _pg_child_partitions(body)
            raise Malformed(f"unknown record kind {kind!r}")
        except (Malformed, *SHAPE_ERRORS) as exc:
            raise row_error(exc, value) from None


def postgresql_mapper(fields: Sequence[Any]) -> RowMapper:
    if len(fields) != 1 or fields[0].type_.code != TypeCode.JSON:
        raise SourceError("unexpected result metadata: expected one JSON column", raw=str(list(fields)))
    records = _PostgresqlRecords()

    def map_row(row: Sequence[Any]) -> list[ChangeRecord]:
        if len(row) != 1:
            raise SourceError("malformed change record: expected one column", raw=row)
        return [records(row[0])]

    return map_row


__all__ = ["postgresql_mapper"]

