"""Change records as query result rows: GoogleSQL ChangeRecord ARRAY<STRUCT<...>> values and PostgreSQL JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from google.cloud.spanner_v1.types import ResultSetMetadata, StructType, Type, TypeAnnotationCode, TypeCode

from spanner_cdc.local_spanner import wire

_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def spanner_type(type_: dict[str, Any]) -> Type:
    """A Spanner JSON type ({"code": ..., "array_element_type" / "struct_type" / "type_annotation"}) as a Type."""
    out = Type(code=getattr(TypeCode, type_["code"]))
    if "array_element_type" in type_:
        out.array_element_type = spanner_type(type_["array_element_type"])
    if "struct_type" in type_:
        out.struct_type = StructType(
            fields=[StructType.Field(name=f["name"], type_=spanner_type(f["type"])) for f in type_["struct_type"]["fields"]]
        )
    if type_.get("type_annotation"):
        out.type_annotation = getattr(TypeAnnotationCode, type_["type_annotation"])
    return out


def metadata(columns: Sequence[tuple[str, dict[str, Any]]], transaction_id: bytes = b"", read_timestamp: datetime | None = None) -> bytes:
    """Encoded ResultSetMetadata for result columns (name, Spanner JSON type), with the transaction begun by the request."""
    message = ResultSetMetadata(row_type=StructType(fields=[StructType.Field(name=n, type_=spanner_type(t)) for n, t in columns]))
    if transaction_id:
        message.transaction.id = transaction_id
    if read_timestamp is not None:
        message.transaction.read_timestamp = read_timestamp
    return ResultSetMetadata.serialize(message)


def _struct(*fields: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"code": "STRUCT", "struct_type": {"fields": [{"name": n, "type": t} for n, t in fields]}}


def _array(element: dict[str, Any]) -> dict[str, Any]:
    return {"code": "ARRAY", "array_element_type": element}


_S, _B, _I, _T, _J = ({"code": c} for c in ("STRING", "BOOL", "INT64", "TIMESTAMP", "JSON"))
DATA_CHANGE_RECORD = _struct(
    ("commit_timestamp", _T),
    ("record_sequence", _S),
    ("server_transaction_id", _S),
    ("is_last_record_in_transaction_in_partition", _B),
    ("table_name", _S),
    ("column_types", _array(_struct(("name", _S), ("type", _J), ("is_primary_key", _B), ("ordinal_position", _I)))),
    ("mods", _array(_struct(("keys", _J), ("new_values", _J), ("old_values", _J)))),
    ("mod_type", _S),
    ("value_capture_type", _S),
    ("number_of_records_in_transaction", _I),
    ("number_of_partitions_in_transaction", _I),
    ("transaction_tag", _S),
    ("is_system_transaction", _B),
)
HEARTBEAT_RECORD = _struct(("timestamp", _T))
CHILD_PARTITIONS_RECORD = _struct(
    ("start_timestamp", _T),
    ("record_sequence", _S),
    ("child_partitions", _array(_struct(("token", _S), ("parent_partition_tokens", _array(_S))))),
)
CHANGE_RECORD_TYPE = _array(
    _struct(
        ("data_change_record", _array(DATA_CHANGE_RECORD)),
        ("heartbeat_record", _array(HEARTBEAT_RECORD)),
        ("child_partitions_record", _array(CHILD_PARTITIONS_RECORD)),
    )
)
GOOGLESQL_METADATA = metadata([("ChangeRecord", CHANGE_RECORD_TYPE)])
PG_JSONB = {"code": "JSON", "type_annotation": "PG_JSONB"}


def pg_metadata(stream: str) -> bytes:
    return metadata([(f"read_json_{stream}", PG_JSONB)])


class RecordEncoder:
    """Encodes engine records (dicts) as value trees for one query; caches what repeats between records."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        self._ts_cache: tuple[datetime | None, str] = (None, "")
        self._by_list: dict[tuple[Any, int], tuple[Any, Any]] = {}  # (build, id(list)) -> (the list, its form)
        self._by_key: dict[tuple[Any, ...], Any] = {}
        self._alive: list[Any] = []  # type dicts whose id is part of a key

    def timestamp(self, value: datetime | str) -> str:
        if value.__class__ is str:
            return value  # type: ignore[return-value]
        cached, text = self._ts_cache
        if value == cached:
            return text
        assert isinstance(value, datetime)
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        text = aware.astimezone(UTC).isoformat()[:-6] + "Z"
        self._ts_cache = (value, text)
        return text

    def cached_column_types(self, column_types: list[dict[str, Any]], build: Any) -> Any:
        """build(column_types), computed once per distinct column set. Records of one table usually share the
        list object; otherwise they share the column names, positions and (scalar) types, which form the key.
        Non-scalar type dicts are keyed by identity and kept alive by the cache, so an id is never reused."""
        entry = self._by_list.get((build, id(column_types)))
        if entry is not None and entry[0] is column_types:
            return entry[1]
        key = (build, *[
            (c["name"], t["code"] if len(t) == 1 else id(t), c["is_primary_key"], c["ordinal_position"])
            for c in column_types
            for t in (c["type"],)
        ])
        value = self._by_key.get(key)
        if value is None:
            if len(self._by_key) > 1024:
                self._by_key.clear()
                self._alive.clear()
            value = self._by_key[key] = build(column_types)
            self._alive.extend(c["type"] for c in column_types if len(c["type"]) != 1)
        if len(self._by_list) > 4096:
            self._by_list.clear()
        self._by_list[(build, id(column_types))] = (column_types, value)
        return value

    @staticmethod
    def _column_types_tree(column_types: list[dict[str, Any]]) -> wire.Raw:
        return wire.Raw(wire.encode([[c["name"], _json(c["type"]), c["is_primary_key"], str(c["ordinal_position"])] for c in column_types]))

    def tree(self, record: dict[str, Any]) -> Any:
        """The GoogleSQL row value (one ChangeRecord column) as a value tree."""
        if "data_change_record" in record:
            r = record["data_change_record"]
            mods = [[_json(m["keys"]), _json(m["new_values"]), _json(m["old_values"])] for m in r["mods"]]
            fields = [
                self.timestamp(r["commit_timestamp"]),
                r["record_sequence"],
                r["server_transaction_id"],
                r["is_last_record_in_transaction_in_partition"],
                r["table_name"],
                self.cached_column_types(r["column_types"], self._column_types_tree),
                mods,
                r["mod_type"],
                r["value_capture_type"],
                str(r["number_of_records_in_transaction"]),
                str(r["number_of_partitions_in_transaction"]),
                r["transaction_tag"],
                r["is_system_transaction"],
            ]
            return [[[fields], [], []]]
        if "heartbeat_record" in record:
            return [[[], [[self.timestamp(record["heartbeat_record"]["timestamp"])]], []]]
        r = record["child_partitions_record"]
        children = [[c["token"], list(c["parent_partition_tokens"])] for c in r["child_partitions"]]
        return [[[], [], [[self.timestamp(r["start_timestamp"]), r["record_sequence"], children]]]]

    def json_text(self, record: dict[str, Any]) -> str:
        """The PostgreSQL row value: one JSON object with exactly one record key, timestamps as strings."""
        return json.dumps(record, separators=(",", ":"), ensure_ascii=False, default=self._json_default)

    def _json_default(self, value: Any) -> Any:
        if isinstance(value, datetime):
            return self.timestamp(value)
        raise TypeError(f"cannot encode {value!r} in a change record")

    def row(self, record: dict[str, Any]) -> Any:
        """The row's single value as a value tree (PostgreSQL: a JSON string)."""
        return self.json_text(record) if self.postgres else self.tree(record)

    def encode(self, record: dict[str, Any]) -> bytes:
        """The row's single value as protobuf Value bytes (record_bytes.FastRecordEncoder does this faster)."""
        return wire.encode(self.row(record))
