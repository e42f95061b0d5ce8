"""Client result rows -> typed change records, by field name, for both SQL dialects."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from json import loads as _json_loads
from typing import Any

from google.cloud.spanner_v1 import TypeCode
from google.cloud.spanner_v1.data_types import JsonObject
from google.protobuf.struct_pb2 import Value as _WireValue

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import (
    MOD_TYPES,
    VALUE_CAPTURE_TYPES,
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
)
from spanner_cdc.names import POSTGRESQL
from spanner_cdc.source.queries import validate_dialect

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
_SHAPE_ERRORS = (IndexError, KeyError, TypeError, ValueError, AttributeError)
_dict_items = dict.items
_dict_len = dict.__len__


class _Malformed(Exception):
    """Raised inside the hot path; carries what was wrong, the caller adds the raw row."""


def row_mapper(dialect: str, fields: Sequence[Any], decode_row: Callable[[Any], list[Any]] | None = None) -> RowMapper:
    """A function row -> records for one result set; field positions are looked up once, here.

    Rows may also be undecoded (`lazy_decode=True`, lists of protobuf Values): PostgreSQL's JSON text is
    parsed here, once, instead of through the client's JsonObject wrapper (a data change record by msgspec
    straight into typed structs, decode_json.py; other kinds and unusual rows by json, with the checks below); GoogleSQL's ChangeRecord is read
    straight from the protobuf values (decode_wire.py) when the metadata has the documented shape, and
    otherwise decoded by the client (`decode_row`, the result set's own decode_row)."""
    dialect = validate_dialect(dialect)
    if dialect == POSTGRESQL:
        return _postgresql_mapper(fields)
    from spanner_cdc.source.decode_wire import wire_mapper  # it builds on this module's checks

    decoded = _googlesql_mapper(fields)
    wire = wire_mapper(fields)

    def map_row(row: Sequence[Any]) -> list[ChangeRecord]:
        if not row or type(row[0]) is not _WireValue:
            return decoded(row)
        if wire is not None:
            return wire(row)
        if decode_row is None:
            raise SourceError("an undecoded GoogleSQL row of an unexpected shape, and no decoder for it", raw=row)
        return decoded(decode_row(row))

    return map_row


def lazy_decode(dialect: str) -> bool:
    """Whether the reader should ask the client for undecoded rows: yes, for both dialects (row_mapper reads
    them faster than the client's per-value decoding)."""
    validate_dialect(dialect)
    return True


# ---- shared field checks and record construction -------------------------------------------


def _text(value: Any, name: str) -> str:
    if type(value) is not str:
        raise _Malformed(f"{name} is not a string")
    return value


def _int(value: Any, name: str) -> int:
    if type(value) is int:
        return value
    if type(value) is str and value.isdigit():  # INT64 inside JSON may be text
        return int(value)
    raise _Malformed(f"{name} is not an integer")


def _bool(value: Any, name: str) -> bool:
    if value is None:
        return False
    if type(value) is not bool:
        raise _Malformed(f"{name} is not a boolean")
    return value


def _sequence(value: Any, name: str) -> str:
    if type(value) is str:
        return value
    if type(value) is int:  # the spec's own examples show record_sequence as a number, too
        return str(value)
    raise _Malformed(f"{name} is not a string")


def _json_object(value: Any, name: str, null_is_empty: bool) -> dict[str, Any]:
    """A JSON object as a plain dict; the client decodes JSON to JsonObject, which also models
    arrays, scalars and null as (empty) dicts, so those are told apart here."""
    if type(value) is dict:
        return value
    if isinstance(value, JsonObject):
        if value._is_array or value._is_scalar_value:
            raise _Malformed(f"{name} is not a JSON object")
        if value._is_null:
            if null_is_empty:
                return {}
            raise _Malformed(f"{name} is null")
        # through dict's own items view: JsonObject overrides __iter__, keys() and __getitem__ in Python
        return dict(_dict_items(value))
    if value is None and null_is_empty:
        return {}
    raise _Malformed(f"{name} is not a JSON object")


def _list(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if type(value) is not list:
        raise _Malformed(f"{name} is not an array")
    return value


def _timestamp(value: Any, name: str) -> datetime:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    raise _Malformed(f"{name} is not a timestamp")


def _parse_timestamp(value: Any, name: str) -> datetime:
    """RFC 3339 text (PostgreSQL dialect) -> aware UTC datetime; nanoseconds are truncated to µs."""
    if type(value) is not str or len(value) < 20 or value[10] != "T":
        raise _Malformed(f"{name} is not an RFC 3339 timestamp")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _Malformed(f"{name} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        raise _Malformed(f"{name} has no time zone")
    return parsed if value[-1] == "Z" else parsed.astimezone(UTC)


def _data_change(
    commit_timestamp: datetime, record_sequence: Any, server_transaction_id: Any, is_last: Any, table_name: Any,
    column_types: tuple[ColumnType, ...], mods: tuple[Mod, ...], mod_type: Any, value_capture_type: Any,
    records_in_transaction: Any, partitions_in_transaction: Any, transaction_tag: Any, is_system_transaction: Any,
) -> DataChangeRecord:  # fmt: skip
    if mod_type not in _MOD_TYPES:
        raise _Malformed(f"unknown mod_type {mod_type!r}")
    if value_capture_type not in _VALUE_CAPTURE_TYPES:
        raise _Malformed(f"unknown value_capture_type {value_capture_type!r}")
    if not mods:
        raise _Malformed("data change record without mods")
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
        record_sequence = _sequence(record_sequence, "record_sequence")
        server_transaction_id = _text(server_transaction_id, "server_transaction_id")
        is_last = _bool(is_last, "is_last_record_in_transaction_in_partition")
        table_name = _text(table_name, "table_name")
        records_in_transaction = _int(records_in_transaction, "number_of_records_in_transaction")
        partitions_in_transaction = _int(partitions_in_transaction, "number_of_partitions_in_transaction")
        transaction_tag = "" if transaction_tag is None else _text(transaction_tag, "transaction_tag")
        is_system_transaction = _bool(is_system_transaction, "is_system_transaction")
    return DataChangeRecord(
        commit_timestamp, record_sequence, server_transaction_id, is_last, table_name, column_types, mods,
        mod_type, value_capture_type, records_in_transaction, partitions_in_transaction, transaction_tag,
        is_system_transaction,
    )  # fmt: skip


def _column_type(name: Any, type_: Any, is_primary_key: Any, ordinal_position: Any) -> ColumnType:
    return ColumnType(
        _text(name, "column_types.name"),
        _json_object(type_, "column_types.type", False),
        _bool(is_primary_key, "column_types.is_primary_key"),
        _int(ordinal_position, "column_types.ordinal_position"),
    )


def _mod(keys: Any, new_values: Any, old_values: Any) -> Mod:
    if type(keys) is dict and type(new_values) is dict and type(old_values) is dict:
        return Mod(keys, new_values, old_values)
    return Mod(
        _json_object(keys, "mods.keys", False),
        _json_object(new_values, "mods.new_values", True),
        _json_object(old_values, "mods.old_values", True),
    )


class _ColumnTypesCache:
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


def _parent_tokens(value: Any) -> tuple[str, ...]:
    # root partitions list no parent, or (in the spec's example) a single NULL parent
    return tuple(_text(token, "parent_partition_tokens[]") for token in _list(value, "parent_partition_tokens") if token is not None)


# ---- GoogleSQL: STRUCTs arrive as positional lists, names only in the result metadata --------


def _struct_of(field_type: Any, what: str) -> dict[str, Any]:
    """An ARRAY<STRUCT<...>> type's struct fields: name -> (position, type)."""
    if field_type.code != TypeCode.ARRAY or field_type.array_element_type.code != TypeCode.STRUCT:
        raise SourceError(f"unexpected result metadata: {what} is not an ARRAY<STRUCT>", raw=str(field_type))
    return {f.name: (i, f.type_) for i, f in enumerate(field_type.array_element_type.struct_type.fields)}


def _positions(struct: dict[str, Any], wanted: Sequence[str], what: str) -> list[int]:
    missing = [name for name in wanted if name not in struct]
    if missing:
        raise SourceError(f"unexpected result metadata: {what} lacks {', '.join(missing)}", raw=str(list(struct)))
    return [struct[name][0] for name in wanted]


def _googlesql_layout(fields: Sequence[Any]) -> tuple[int, dict[str, tuple[int, Any]], list[list[int]]]:
    """Where things are in the result metadata: the ChangeRecord column, its record kinds, and each struct's fields
    (positions of data change, column type, mod, heartbeat, child partitions and child partition fields)."""
    names = [f.name for f in fields]
    column = names.index("ChangeRecord") if "ChangeRecord" in names else (0 if len(names) == 1 else -1)
    if column < 0:
        raise SourceError("unexpected result metadata: no ChangeRecord column", raw=str(list(fields)))
    outer = _struct_of(fields[column].type_, "ChangeRecord")
    if not set(outer) & set(RECORD_KINDS):
        raise SourceError("unexpected result metadata: ChangeRecord holds no known record kind", raw=str(list(outer)))
    dcr, ct, md = list(range(13)), list(range(4)), list(range(3))  # unused unless the kind is in the metadata
    hb, cp, ch = [0], list(range(3)), list(range(2))
    if "data_change_record" in outer:
        dcr_struct = _struct_of(outer["data_change_record"][1], "data_change_record")
        dcr = _positions(dcr_struct, DATA_CHANGE_FIELDS, "data_change_record")
        ct = _positions(_struct_of(dcr_struct["column_types"][1], "column_types"), COLUMN_TYPE_FIELDS, "column_types")
        md = _positions(_struct_of(dcr_struct["mods"][1], "mods"), MOD_FIELDS, "mods")
    if "heartbeat_record" in outer:
        hb = _positions(_struct_of(outer["heartbeat_record"][1], "heartbeat_record"), HEARTBEAT_FIELDS, "heartbeat_record")
    if "child_partitions_record" in outer:
        cp_struct = _struct_of(outer["child_partitions_record"][1], "child_partitions_record")
        cp = _positions(cp_struct, CHILD_PARTITIONS_FIELDS, "child_partitions_record")
        ch = _positions(_struct_of(cp_struct["child_partitions"][1], "child_partitions"), CHILD_PARTITION_FIELDS, "child_partitions")
    return column, outer, [dcr, ct, md, hb, cp, ch]


def _googlesql_mapper(fields: Sequence[Any]) -> RowMapper:
    column, outer, (dcr, ct, md, (hb_ts,), cp, ch) = _googlesql_layout(fields)
    unknown = [i for name, (i, _) in outer.items() if name not in RECORD_KINDS]
    dcr_at, hb_at, cp_at = (outer[kind][0] if kind in outer else -1 for kind in RECORD_KINDS)

    i_name, i_type, i_pk, i_pos = ct
    i_keys, i_new, i_old = md
    (i_commit, i_seq, i_txn, i_last, i_table, i_columns, i_mods, i_mod_type, i_capture, i_records, i_partitions,
     i_tag, i_system) = dcr  # fmt: skip
    columns_cache = _ColumnTypesCache()

    def column_types(raw: Any) -> tuple[ColumnType, ...]:
        return tuple(_column_type(c[i_name], c[i_type], c[i_pk], c[i_pos]) for c in _list(raw, "column_types"))

    def data_change(s: list[Any]) -> DataChangeRecord:
        mods = tuple([_mod(m[i_keys], m[i_new], m[i_old]) for m in _list(s[i_mods], "mods")])
        return _data_change(
            _timestamp(s[i_commit], "commit_timestamp"), s[i_seq], s[i_txn], s[i_last], s[i_table],
            columns_cache.get(s[i_table], s[i_columns], column_types), mods, s[i_mod_type], s[i_capture],
            s[i_records], s[i_partitions], s[i_tag], s[i_system],
        )  # fmt: skip

    def child_partitions(s: list[Any]) -> ChildPartitionsRecord:
        i_token, i_parents = ch
        return ChildPartitionsRecord(
            start_timestamp=_timestamp(s[cp[0]], "start_timestamp"),
            record_sequence=_sequence(s[cp[1]], "record_sequence"),
            child_partitions=tuple(
                ChildPartition(_text(c[i_token], "child_partitions.token"), _parent_tokens(c[i_parents]))
                for c in _list(s[cp[2]], "child_partitions")
            ),
        )

    def map_row(row: Sequence[Any]) -> list[ChangeRecord]:
        out: list[ChangeRecord] = []
        try:
            for element in _list(row[column], "ChangeRecord"):
                produced = len(out)
                if dcr_at >= 0 and element[dcr_at]:
                    out.extend(data_change(s) for s in element[dcr_at])
                if hb_at >= 0 and element[hb_at]:
                    out.extend(HeartbeatRecord(_timestamp(s[hb_ts], "timestamp")) for s in element[hb_at])
                if cp_at >= 0 and element[cp_at]:
                    out.extend(child_partitions(s) for s in element[cp_at])
                if len(out) == produced:
                    if any(element[i] for i in unknown):
                        raise _Malformed("unknown record kind")
                    raise _Malformed("change record element holds no record")
        except _Malformed as exc:
            raise SourceError(f"malformed change record: {exc}", raw=row) from None
        except _SHAPE_ERRORS as exc:
            raise SourceError(f"malformed change record ({type(exc).__name__}: {exc})", raw=row) from None
        if not out:
            raise SourceError("malformed change record: empty ChangeRecord array", raw=row)
        return out

    return map_row


# ---- PostgreSQL: one JSON object per row with exactly one key ------------------------------


def _pg_column_types(raw: Any) -> tuple[ColumnType, ...]:
    return tuple(
        _column_type(c["name"], c["type"], c["is_primary_key"], c["ordinal_position"])
        for c in _list(raw, "column_types")
    )


def _pg_data_change(d: dict[str, Any], columns_cache: _ColumnTypesCache) -> DataChangeRecord:
    mods = tuple([_mod(m["keys"], m.get("new_values"), m.get("old_values")) for m in _list(d["mods"], "mods")])
    table = d["table_name"]
    return _data_change(
        _parse_timestamp(d["commit_timestamp"], "commit_timestamp"), d["record_sequence"], d["server_transaction_id"],
        d.get("is_last_record_in_transaction_in_partition"), table,
        columns_cache.get(table, d["column_types"], _pg_column_types), mods, d["mod_type"],
        d["value_capture_type"], d["number_of_records_in_transaction"], d["number_of_partitions_in_transaction"],
        d.get("transaction_tag", ""), d.get("is_system_transaction"),
    )  # fmt: skip


def _pg_heartbeat(d: dict[str, Any]) -> HeartbeatRecord:
    return HeartbeatRecord(_parse_timestamp(d["timestamp"], "timestamp"))


def _pg_child_partitions(d: dict[str, Any]) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(
        start_timestamp=_parse_timestamp(d["start_timestamp"], "start_timestamp"),
        record_sequence=_sequence(d["record_sequence"], "record_sequence"),
        child_partitions=tuple(
            ChildPartition(_text(c["token"], "child_partitions.token"), _parent_tokens(c.get("parent_partition_tokens")))
            for c in _list(d["child_partitions"], "child_partitions")
        ),
    )


class _PostgresqlRecords:
    """Maps the JSON objects of one result set; holds that result set's column types cache."""

    def __init__(self) -> None:
        from spanner_cdc.source.decode_json import FastDataChanges  # it builds on this module's checks

        self._columns = _ColumnTypesCache()
        self._fast = FastDataChanges()

    def __call__(self, value: Any) -> ChangeRecord:
        try:
            if type(value) is _WireValue:  # execute_sql(lazy_decode=True): the JSON text as sent
                fast = self._fast(value.string_value)
                if fast is not None:
                    return fast
                if value.HasField("null_value"):
                    raise _Malformed("the row is null")
                try:
                    value = _json_loads(value.string_value)
                except ValueError:
                    raise _Malformed("the row is not JSON") from None
            if type(value) is JsonObject:
                if value._is_array or value._is_scalar_value or value._is_null:
                    raise _Malformed("the row is not a JSON object")
            elif type(value) is not dict:
                raise _Malformed("the row is not a JSON object")
            # dict's own methods: JsonObject overrides len() and items() in Python
            if _dict_len(value) != 1:
                raise _Malformed(f"expected exactly one of {', '.join(RECORD_KINDS)}, got keys {sorted(value)}")
            ((kind, body),) = _dict_items(value)
            if type(body) is not dict:
                raise _Malformed(f"{kind} is not a JSON object" if kind in RECORD_KINDS else f"unknown record kind {kind!r}")
            if kind == "data_change_record":
                return _pg_data_change(body, self._columns)
            if kind == "heartbeat_record":
                return _pg_heartbeat(body)
            if kind == "child_partitions_record":
                return _pg_child_partitions(body)
            raise _Malformed(f"unknown record kind {kind!r}")
        except _Malformed as exc:
            raise SourceError(f"malformed change record: {exc}", raw=value) from None
        except _SHAPE_ERRORS as exc:
            raise SourceError(f"malformed change record ({type(exc).__name__}: {exc})", raw=value) from None


def _postgresql_mapper(fields: Sequence[Any]) -> RowMapper:
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
            _postgresql_mapper(ResultSetMetadata.wrap(message.metadata).row_type.fields)  # checks: one JSON column
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


__all__ = ["RowMapper", "lazy_decode", "postgresql_records", "row_mapper"]
