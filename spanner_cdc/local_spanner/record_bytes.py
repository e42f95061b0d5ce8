"""The hot path: data change records straight to protobuf Value bytes (GoogleSQL) or JSON text (PostgreSQL).

Produces exactly what record_encoding.RecordEncoder.encode() produces (a unit test holds them equal),
several times faster: repeated strings and column types are encoded once, JSON goes through the C
encoder (msgspec's for tables whose values cannot be floats), and the nested ARRAY<STRUCT<...>> framing is
written as byte strings. EncodedRecords keeps the rows for later reads of the same records.
"""

from __future__ import annotations

import json
from json import encoder as json_encoder
from typing import Any

from spanner_cdc.json_text import float_free_text, may_hold_floats
from spanner_cdc.local_spanner import wire
from spanner_cdc.local_spanner.record_encoding import RecordEncoder

_c_json = getattr(json_encoder, "c_make_encoder", None)  # the C accelerator; typeshed does not declare it
_json_chunks = (
    _c_json(None, None, json_encoder.encode_basestring, None, ":", ",", False, False, True)
    if _c_json is not None
    else None
)
_quote = json_encoder.encode_basestring
_varint = wire.varint
_V = wire.VARINTS
_VN = len(_V)
_TRUE_ITEM = b"\n\x02\x20\x01"  # ListValue item: Value{bool_value: true}
_FALSE_ITEM = b"\n\x02\x20\x00"
_EMPTY_LIST_ITEM = b"\n\x02\x32\x00"  # ListValue item: Value{list_value: []}
_EMPTY_LISTS = _EMPTY_LIST_ITEM + _EMPTY_LIST_ITEM


_plain_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _json(value: Any) -> str:
    if _json_chunks is None:  # a Python without the C accelerator
        return _plain_json(value)
    return "".join(_json_chunks(value, 0))


def _no_floats(column_types: list[dict[str, Any]]) -> bool:
    # records of tables with a column that may hold a float keep json (json_text says why)
    return not may_hold_floats(c["type"] for c in column_types)


def _item(value: bytes) -> bytes:
    """A Value framed as an item of a ListValue."""
    n = len(value)
    return b"\n" + (_V[n] if n < _VN else _varint(n)) + value


def _string_item(text: str) -> bytes:
    return _bytes_item(text.encode())


def _bytes_item(data: bytes) -> bytes:
    """A string Value of UTF-8 `data` framed as an item of a ListValue."""
    n = len(data)
    value = b"\x1a" + (_V[n] if n < _VN else _varint(n)) + data
    n = len(value)
    return b"\n" + (_V[n] if n < _VN else _varint(n)) + value


class FastRecordEncoder(RecordEncoder):
    """RecordEncoder with encode() specialised for data change records, the bulk of every stream."""

    def __init__(self, postgres: bool) -> None:
        super().__init__(postgres)
        self._items: dict[str, bytes] = {}  # string item bytes of texts that repeat (tables, ids, sequences)

    def _repeated(self, text: str) -> bytes:
        found = self._items.get(text)
        if found is None:
            if len(self._items) > 8192:
                self._items.clear()
            found = self._items[text] = _string_item(text)
        return found

    def encode(self, record: dict[str, Any]) -> bytes:
        r = record.get("data_change_record")
        if r is None:
            return super().encode(record)
        return self._pg_data(r) if self.postgres else self._googlesql_data(r)

    @staticmethod
    def _column_types_items(column_types: list[dict[str, Any]]) -> bytes:
        return _item(wire.encode([[c["name"], _json(c["type"]), c["is_primary_key"], str(c["ordinal_position"])] for c in column_types]))

    def _googlesql_data(self, r: dict[str, Any]) -> bytes:
        items = self._items
        repeated = self._repeated
        mods = []
        no_floats = self.cached_column_types(r["column_types"], _no_floats)
        for mod in r["mods"]:
            old = mod["old_values"]
            if no_floats:
                body = (_bytes_item(float_free_text(mod["keys"])) + _bytes_item(float_free_text(mod["new_values"]))
                        + (_bytes_item(float_free_text(old)) if old else _EMPTY_JSON_ITEM))
            else:
                body = (_string_item(_json(mod["keys"])) + _string_item(_json(mod["new_values"]))
                        + (_string_item(_json(old)) if old else _EMPTY_JSON_ITEM))
            n = len(body)
            value = b"\x32" + (_V[n] if n < _VN else _varint(n)) + body
            n = len(value)
            mods.append(b"\n" + (_V[n] if n < _VN else _varint(n)) + value)
        body = b"".join(mods)
        n = len(body)
        mods_value = b"\x32" + (_V[n] if n < _VN else _varint(n)) + body
        n = len(mods_value)
        timestamp = self.timestamp(r["commit_timestamp"])
        fields = b"".join((
            items.get(timestamp) or repeated(timestamp),
            items.get(r["record_sequence"]) or repeated(r["record_sequence"]),
            items.get(r["server_transaction_id"]) or repeated(r["server_transaction_id"]),
            _TRUE_ITEM if r["is_last_record_in_transaction_in_partition"] else _FALSE_ITEM,
            items.get(r["table_name"]) or repeated(r["table_name"]),
            self.cached_column_types(r["column_types"], self._column_types_items),
            b"\n" + (_V[n] if n < _VN else _varint(n)) + mods_value,
            items.get(r["mod_type"]) or repeated(r["mod_type"]),
            items.get(r["value_capture_type"]) or repeated(r["value_capture_type"]),
            repeated(str(r["number_of_records_in_transaction"])),
            repeated(str(r["number_of_partitions_in_transaction"])),
            items.get(r["transaction_tag"]) or repeated(r["transaction_tag"]),
            _TRUE_ITEM if r["is_system_transaction"] else _FALSE_ITEM,
        ))
        # ChangeRecord = [ STRUCT( data_change_record = [ STRUCT(fields) ], heartbeat_record = [], child_partitions_record = [] ) ]
        n = len(fields)
        value = b"\x32" + (_V[n] if n < _VN else _varint(n)) + fields
        n = len(value)
        value = b"\n" + (_V[n] if n < _VN else _varint(n)) + value
        n = len(value)
        value = b"\x32" + (_V[n] if n < _VN else _varint(n)) + value
        n = len(value)
        value = b"\n" + (_V[n] if n < _VN else _varint(n)) + value + _EMPTY_LISTS
        n = len(value)
        value = b"\x32" + (_V[n] if n < _VN else _varint(n)) + value
        n = len(value)
        value = b"\n" + (_V[n] if n < _VN else _varint(n)) + value
        n = len(value)
        return b"\x32" + (_V[n] if n < _VN else _varint(n)) + value

    @staticmethod
    def _column_types_json(column_types: list[dict[str, Any]]) -> str:
        return _json(column_types)

    def _pg_data(self, r: dict[str, Any]) -> bytes:
        if self.cached_column_types(r["column_types"], _no_floats):
            mods = b",".join([
                b'{"keys":' + float_free_text(m["keys"]) + b',"new_values":' + float_free_text(m["new_values"])
                + b',"old_values":' + (float_free_text(m["old_values"]) if m["old_values"] else b"{}") + b"}"
                for m in r["mods"]
            ]).decode()
        else:
            mods = ",".join([
                f'{{"keys":{_json(m["keys"])},"new_values":{_json(m["new_values"])},"old_values":{_json(m["old_values"]) if m["old_values"] else "{}"}}}'
                for m in r["mods"]
            ])
        text = (
            f'{{"data_change_record":{{"commit_timestamp":"{self.timestamp(r["commit_timestamp"])}"'
            f',"record_sequence":{_quote(r["record_sequence"])}'
            f',"server_transaction_id":{_quote(r["server_transaction_id"])}'
            f',"is_last_record_in_transaction_in_partition":{"true" if r["is_last_record_in_transaction_in_partition"] else "false"}'
            f',"table_name":{_quote(r["table_name"])}'
            f',"column_types":{self.cached_column_types(r["column_types"], self._column_types_json)}'
            f',"mods":[{mods}]'
            f',"mod_type":{_quote(r["mod_type"])}'
            f',"value_capture_type":{_quote(r["value_capture_type"])}'
            f',"number_of_records_in_transaction":{int(r["number_of_records_in_transaction"])}'
            f',"number_of_partitions_in_transaction":{int(r["number_of_partitions_in_transaction"])}'
            f',"transaction_tag":{_quote(r["transaction_tag"])}'
            f',"is_system_transaction":{"true" if r["is_system_transaction"] else "false"}}}}}'
        )
        return wire.string(text)


_EMPTY_JSON_ITEM = _string_item("{}")


class EncodedRecords:
    """Data change records' encoded rows kept across queries of one dialect, so a partition read again (a retry, a
    resumed or repeated query, a benchmark's rounds) is not encoded again. Keyed by the engine's record object,
    which no one changes once committed; each entry holds its record, so its id cannot be reused while cached.
    At most `budget` bytes of rows: past it the cache starts over."""

    def __init__(self, budget: int = 32 << 20) -> None:
        self._rows: dict[int, tuple[dict[str, Any], bytes]] = {}
        self._budget = budget
        self._size = 0

    def get(self, body: dict[str, Any]) -> bytes | None:
        hit = self._rows.get(id(body))
        return hit[1] if hit is not None and hit[0] is body else None

    def put(self, body: dict[str, Any], row: bytes) -> bytes:
        # concurrent queries may race here: the worst case is a row encoded twice or a size counted off by one row
        if self._size + len(row) > self._budget:
            self._rows.clear()
            self._size = 0
        self._rows[id(body)] = (body, row)
        self._size += len(row)
        return row
