"""GoogleSQL change records straight from the query's protobuf values (rows left undecoded by the client)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from json import JSONDecoder
from json import loads as _json_loads
from json.scanner import make_scanner
from typing import Any

import msgspec
from google.cloud.spanner_v1 import TypeCode

from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
    Mod,
)
from spanner_cdc.source.decode.fields import (
    CHILD_PARTITION_FIELDS,
    CHILD_PARTITIONS_FIELDS,
    COLUMN_TYPE_FIELDS,
    DATA_CHANGE_FIELDS,
    HEARTBEAT_FIELDS,
    MOD_FIELDS,
    RECORD_KINDS,
    SHAPE_ERRORS,
    Malformed,
    RowMapper,
    build_data_change,
    empty_array,
    parse_timestamp,
    row_error,
)
from spanner_cdc.source.decode.googlesql_bytes import BytesRecords

_S, _B, _I, _T, _J = TypeCode.STRING, TypeCode.BOOL, TypeCode.INT64, TypeCode.TIMESTAMP, TypeCode.JSON
# the documented types of every field read (spec: "Data change records" etc.); any other shape of the
# metadata is left to the client's own decoding (googlesql.py), which maps whatever types it finds
_SCALARS: dict[str, dict[str, Any]] = {
    "data_change_record": dict(zip(DATA_CHANGE_FIELDS, (_T, _S, _S, _B, _S, None, None, _S, _S, _I, _I, _S, _B), strict=True)),
    "column_types": dict(zip(COLUMN_TYPE_FIELDS, (_S, _J, _B, _I), strict=True)),
    "mods": dict(zip(MOD_FIELDS, (_J, _J, _J), strict=True)),
    "heartbeat_record": dict(zip(HEARTBEAT_FIELDS, (_T,), strict=True)),
    "child_partitions_record": dict(zip(CHILD_PARTITIONS_FIELDS, (_T, _S, None), strict=True)),
    "child_partitions": dict(zip(CHILD_PARTITION_FIELDS, (_S, None), strict=True)),
}


_scan = make_scanner(JSONDecoder())  # type: ignore[arg-type]  # the C scanner json.loads ends in
# a JSON object exactly as json.loads reads it; what msgspec refuses (NaN, 1e400, lone surrogates, not an object,
# empty text) goes json's way
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_NOT_AN_OBJECT_OR_SHAPE = (msgspec.DecodeError, msgspec.ValidationError, ValueError)
_FALSE_KINDS = frozenset(("bool_value", "null_value"))  # NULL reads as false, as in fields.py


def _kind(value: Any) -> str | None:
    return value.WhichOneof("kind")  # type: ignore[no-any-return]


def _text(value: Any, name: str) -> str:
    text: str = value.string_value
    if not text and _kind(value) != "string_value":  # "" is also what a NULL or another kind reads as
        raise Malformed(f"{name} is not a string")
    return text


def _tag(value: Any) -> str:
    tag: str = value.string_value
    if not tag and _kind(value) not in ("string_value", "null_value"):  # NULL: untagged, as in fields.py
        raise Malformed("transaction_tag is not a string")
    return tag


def _bool(value: Any, name: str) -> bool:
    if value.bool_value:
        return True
    if _kind(value) not in ("bool_value", "null_value"):
        raise Malformed(f"{name} is not a boolean")
    return False  # NULL reads as false, as in fields.py


def _int(value: Any, name: str) -> int:
    text = value.string_value  # INT64 travels as decimal text
    if not text.isdigit():
        raise Malformed(f"{name} is not an integer")
    return int(text)


def _object(text: str) -> dict[str, Any] | None:
    """The JSON object in `text` by the C scanner alone (no Python frames of json.loads); None for anything
    else (empty, whitespace around it, not an object, not JSON), which _json_object then explains or accepts."""
    if text[:1] != "{":
        return None
    try:
        parsed, end = _scan(text, 0)
    except (StopIteration, ValueError):
        return None
    return parsed if end == len(text) and parsed else None  # {} goes the slow way too: falsy, as `or` needs


def _json_object(value: Any, name: str, null_is_empty: bool) -> dict[str, Any]:
    text = value.string_value
    if not text:
        if null_is_empty and _kind(value) == "null_value":
            return {}
        raise Malformed(f"{name} is null" if _kind(value) == "null_value" else f"{name} is not JSON text")
    try:
        parsed = _json_loads(text)
    except ValueError:
        raise Malformed(f"{name} is not JSON") from None
    if type(parsed) is not dict:
        raise Malformed(f"{name} is not a JSON object")
    return parsed


def _list(value: Any, name: str) -> Any:
    values = value.list_value.values
    if not values and _kind(value) not in ("list_value", "null_value"):
        raise Malformed(f"{name} is not an array")
    return values


def _array(value: Any, name: str) -> Any:
    """A record kind's array: most are empty in each element, and asking the kind first reads them in one access."""
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        return value.list_value.values
    if kind == "null_value":
        return ()
    raise Malformed(f"{name} is not an array")


class _Timestamps:
    """Records of one transaction (and heartbeats) repeat their timestamp: parse each text once."""

    __slots__ = ("_text", "_parsed")

    def __init__(self) -> None:
        self._text = ""
        self._parsed: datetime | None = None

    def __call__(self, value: Any, name: str) -> datetime:
        text = value.string_value
        if text != self._text or self._parsed is None:
            if not text:
                raise Malformed(f"{name} is not a timestamp")
            self._parsed = parse_timestamp(text, name)
            self._text = text
        return self._parsed


def _struct_fields(field_type: Any) -> dict[str, tuple[int, Any]] | None:
    """name -> (position, type) of an ARRAY<STRUCT<...>> type; None for any other type."""
    if field_type.code != TypeCode.ARRAY or field_type.array_element_type.code != TypeCode.STRUCT:
        return None
    return {f.name: (i, f.type_) for i, f in enumerate(field_type.array_element_type.struct_type.fields)}


def _layout(struct: dict[str, tuple[int, Any]] | None, what: str) -> list[int] | None:
    """Positions of the fields read from `what`, or None unless each has its documented type."""
    if struct is None:
        return None
    wanted = _SCALARS[what]
    for name, code in wanted.items():
        if name not in struct or (code is not None and struct[name][1].code != code):
            return None
    return [struct[name][0] for name in wanted]


def wire_mapper(fields: Sequence[Any], from_bytes: bool = True) -> RowMapper | None:
    """A mapper of undecoded GoogleSQL rows (lists of protobuf Values, lazy_decode=True) into typed records,
    or None when the result metadata is not the documented ChangeRecord shape. With the fields in their documented
    order and `from_bytes`, data change rows are read from their serialized bytes (googlesql_bytes.py)."""
    names = [f.name for f in fields]
    column = names.index("ChangeRecord") if "ChangeRecord" in names else (0 if len(names) == 1 else -1)
    outer = _struct_fields(fields[column].type_) if column >= 0 else None
    if outer is None or set(outer) - set(RECORD_KINDS) or not set(outer) & set(RECORD_KINDS):
        return None
    layouts: dict[str, list[int]] = {}
    nested: dict[str, tuple[str, ...]] = {
        "data_change_record": ("column_types", "mods"), "heartbeat_record": (), "child_partitions_record": ("child_partitions",)
    }
    for kind, parts in nested.items():
        if kind not in outer:
            continue
        struct = _struct_fields(outer[kind][1])
        found = _layout(struct, kind)
        if found is None or struct is None:
            return None
        layouts[kind] = found
        for part in parts:
            inner = _layout(_struct_fields(struct[part][1]), part) if part in struct else None
            if inner is None:
                return None
            layouts[part] = inner
    mods = _struct_fields(outer["data_change_record"][1]) if "data_change_record" in outer else None
    plain = layouts.get("mods") == [0, 1, 2] and mods is not None and len(_struct_fields(mods["mods"][1]) or ()) == 3
    kinds = {kind: outer[kind][0] for kind in RECORD_KINDS if kind in outer}
    records = _WireRecords(column, kinds, layouts, plain)
    if from_bytes and plain and list(kinds.values()) == [0, 1, 2] and layouts["data_change_record"] == list(range(len(DATA_CHANGE_FIELDS))):
        return BytesRecords(column, records)
    return records


class _WireRecords:
    """Maps the rows of one result set; holds its column types and timestamp caches."""

    def __init__(self, column: int, kinds: dict[str, int], layouts: dict[str, list[int]], plain_mods: bool = False) -> None:
        self._column = column
        self._plain_mods = plain_mods  # a mod is STRUCT<keys, new_values, old_values>, in that order, as documented
        self._dcr_at, self._hb_at, self._cp_at = (kinds.get(kind, -1) for kind in RECORD_KINDS)
        self._layouts = layouts
        self._columns: dict[bytes, tuple[ColumnType, ...]] = {}  # serialized column_types -> mapped
        self._timestamps = _Timestamps()

    def __call__(self, row: Sequence[Any]) -> list[ChangeRecord]:
        out: list[ChangeRecord] = []
        try:
            for element in _list(row[self._column], "ChangeRecord"):
                parts = element.list_value.values
                produced = len(out)
                if self._dcr_at >= 0:
                    for s in _array(parts[self._dcr_at], "data_change_record"):
                        out.append(self._data_change(s.list_value.values))
                if self._hb_at >= 0:
                    (i_ts,) = self._layouts["heartbeat_record"]
                    for s in _array(parts[self._hb_at], "heartbeat_record"):
                        out.append(HeartbeatRecord(self._timestamps(s.list_value.values[i_ts], "timestamp")))
                if self._cp_at >= 0:
                    for s in _array(parts[self._cp_at], "child_partitions_record"):
                        out.append(self._child_partitions(s.list_value.values))
                if len(out) == produced:
                    raise Malformed("change record element holds no record")
        except (Malformed, *SHAPE_ERRORS) as exc:
            raise row_error(exc, row) from None
        if not out:  # inline: a call per row costs more on this path than the check
            raise empty_array(row)
        return out

    def _data_change(self, s: Any) -> DataChangeRecord:
        # the hot path: each protobuf access costs about half a microsecond, so every field is read once, and the
        # checks that explain a bad value run only when the value is empty (NULL, or another kind of value)
        (i_commit, i_seq, i_txn, i_last, i_table, i_columns, i_mods, i_mod_type, i_capture, i_records, i_partitions,
         i_tag, i_system) = self._layouts["data_change_record"]  # fmt: skip
        table = s[i_table].string_value or _text(s[i_table], "table_name")
        records, partitions = s[i_records].string_value, s[i_partitions].string_value
        last, system = s[i_last], s[i_system]
        return build_data_change(
            self._timestamps(s[i_commit], "commit_timestamp"),
            s[i_seq].string_value or _text(s[i_seq], "record_sequence"),
            s[i_txn].string_value or _text(s[i_txn], "server_transaction_id"),
            last.bool_value or (last.WhichOneof("kind") not in _FALSE_KINDS and _bool(last, "is_last_record_in_transaction_in_partition")),
            table, self._column_types(s[i_columns]), self._mods(s[i_mods]),
            s[i_mod_type].string_value or _text(s[i_mod_type], "mod_type"),
            s[i_capture].string_value or _text(s[i_capture], "value_capture_type"),
            int(records) if records.isdigit() else _int(s[i_records], "number_of_records_in_transaction"),
            int(partitions) if partitions.isdigit() else _int(s[i_partitions], "number_of_partitions_in_transaction"),
            s[i_tag].string_value or _tag(s[i_tag]),
            system.bool_value or (system.WhichOneof("kind") not in _FALSE_KINDS and _bool(system, "is_system_transaction")),
        )  # fmt: skip

    def _mods(self, raw: Any) -> tuple[Mod, ...]:
        i_keys, i_new, i_old = self._layouts["mods"]
        values = _list(raw, "mods")
        decode = _decode_object
        mods = []
        try:  # msgspec parses a small JSON object in about half the time of json's C scanner
            if self._plain_mods:  # unpacking a mod's three values costs less than indexing them
                for mod in values:
                    keys, new, old = mod.list_value.values
                    mods.append(Mod(decode(keys.string_value), decode(new.string_value), decode(old.string_value)))
            else:
                for mod in values:
                    m = mod.list_value.values
                    mods.append(Mod(decode(m[i_keys].string_value), decode(m[i_new].string_value), decode(m[i_old].string_value)))
        except _NOT_AN_OBJECT_OR_SHAPE:  # NULL, not one JSON object, a malformed mod: the way that explains it
            mods = []
            for mod in values:
                m = mod.list_value.values
                keys, new, old = m[i_keys], m[i_new], m[i_old]
                mods.append(Mod(
                    _object(keys.string_value) or _json_object(keys, "mods.keys", False),
                    _object(new.string_value) or _json_object(new, "mods.new_values", True),
                    _object(old.string_value) or _json_object(old, "mods.old_values", True),
                ))  # fmt: skip
        return tuple(mods)

    def _column_types(self, raw: Any) -> tuple[ColumnType, ...]:
        # a table's column types repeat in each of its records: their bytes are the cheapest key to compare
        key = raw.SerializeToString()
        found = self._columns.get(key)
        if found is None:
            found = self._map_column_types(raw)
            if len(self._columns) < 1024:
                self._columns[key] = found
        return found

    def _map_column_types(self, raw: Any) -> tuple[ColumnType, ...]:
        i_name, i_type, i_pk, i_pos = self._layouts["column_types"]
        return tuple(
            ColumnType(_text(c[i_name], "column_types.name"), _json_object(c[i_type], "column_types.type", False),
                       _bool(c[i_pk], "column_types.is_primary_key"), _int(c[i_pos], "column_types.ordinal_position"))
            for c in (column.list_value.values for column in _list(raw, "column_types"))
        )  # fmt: skip

    def _child_partitions(self, s: Any) -> ChildPartitionsRecord:
        i_start, i_seq, i_children = self._layouts["child_partitions_record"]
        i_token, i_parents = self._layouts["child_partitions"]
        children = []
        for child in _list(s[i_children], "child_partitions"):
            c = child.list_value.values
            parents = tuple(  # root partitions list no parent, or (in the spec's example) a single NULL parent
                _text(p, "parent_partition_tokens[]") for p in _list(c[i_parents], "parent_partition_tokens") if _kind(p) != "null_value"
            )
            children.append(ChildPartition(_text(c[i_token], "child_partitions.token"), parents))
        return ChildPartitionsRecord(
            start_timestamp=self._timestamps(s[i_start], "start_timestamp"),
            record_sequence=_text(s[i_seq], "record_sequence"),
            child_partitions=tuple(children),
        )


__all__ = ["wire_mapper"]
