"""PostgreSQL rows -> typed records: one JSON object per row with exactly one key, taken from the client's rows or
straight off its stream of messages."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
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
    row_error,
)
from spanner_cdc.source.decode.pg_json import FastDataChanges

_dict_items = dict.items
_dict_len = dict.__len__



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
            if type(value) is JsonObject:
                if value._is_array or value._is_scalar_value or value._is_null:
                    raise Malformed("the row is not a JSON object")
            elif type(value) is not dict:
                raise Malformed("the row is not a JSON object")
            # dict's own methods: JsonObject overrides len() and items() in Python
            if _dict_len(value) != 1:
                raise Malformed(f"expected exactly one of {', '.join(RECORD_KINDS)}, got keys {sorted(value)}")
            ((kind, body),) = _dict_items(value)
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


def postgresql_records(responses: Iterable[Any]) -> Iterator[ChangeRecord]:
    """The records of a PostgreSQL change stream query straight off its PartialResultSets (the client's stream,
    resumed by the client as usual): each row is one JSON value, so the client's row assembly is skipped, a list per
    row held for a whole message, ~0.6 us a record plus the full GC passes those promoted lists set off. A value the
    server split over messages (chunked_value) is joined first, as the client joins a string."""
    from google.cloud.spanner_v1 import PartialResultSet, ResultSetMetadata

    as_pb = PartialResultSet.pb
    records: _PostgresqlRecords | None = None
    pending: Any = None  # the first chunks of a value the next message continues
    for response in responses:
        message = as_pb(response)
        if records is None:  # the metadata arrives with the first message
            postgresql_mapper(ResultSetMetadata.wrap(message.metadata).row_type.fields)  # checks: one JSON column
            records = _PostgresqlRecords()
        values: Any = message.values
        if pending is not None or message.chunked_value:
            values = list(values)
            if pending is not None and values:
                values[0] = _WireValue(string_value=pending.string_value + values[0].string_value)
                pending = None
            if message.chunked_value:
                pending = values.pop()
        for value in values:
            yield records(value)
    if pending is not None:
        raise SourceError("malformed change record: the stream ended inside a chunked value", raw=pending)


__all__ = ["postgresql_mapper", "postgresql_records"]

