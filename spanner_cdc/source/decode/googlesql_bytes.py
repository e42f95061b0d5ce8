"""GoogleSQL data change rows read from their serialized protobuf bytes: the hot path of googlesql_values.py's mapper."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from spanner_cdc.model.records import ChangeRecord, ColumnType, DataChangeRecord, Mod
from spanner_cdc.source.decode.fields import Malformed, parse_timestamp

# The documented row as upb serializes it (fields in order, each once, lengths as shortest varints):
#   Value{list_value: [Value{list_value: [Value{list_value: [Value{list_value: [13 fields]}]},  <- data_change_record
#                                         Value{list_value: []}, Value{list_value: []}]}]}    <- heartbeat, child partitions
# A field is a ListValue item (0x0a, length) holding a Value: string_value (0x1a, length, UTF-8) or bool_value (0x20).
_LIST, _ITEM, _STRING = 0x32, 0x0A, 0x1A
_NO_OTHER_KINDS = b"\n\x022\x00\n\x022\x00"  # the heartbeat_record and child_partitions_record arrays, empty
_FLAGS = {b"\n\x02 \x00": False, b"\n\x02 \x01": True}
_CACHED = 4096  # distinct row sizes kept; distinct (table, column types) and record tails kept per result set
_HEADERS: dict[int, bytes] = {}  # a row's size -> its nested headers, down to the record's fields

_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_MISSES = (IndexError, KeyError, ValueError, Malformed, msgspec.DecodeError, msgspec.ValidationError)

Tail = tuple[str, str, int, int, str, bool]  # mod_type, value_capture_type, the two counts, transaction_tag, is_system


class _Miss(Exception):
    """Not the one shape read here: the protobuf path maps the row (and explains what is wrong with it)."""


class _Unseen(Exception):
    """The row has the shape, but its table and column types or its tail were not seen yet."""

    def __init__(self, head: bytes, tail: bytes) -> None:
        self.head, self.tail = head, tail


def _length(data: bytes, p: int) -> tuple[int, int]:
    """The varint at p (a length) and the position after it."""
    b = data[p]
    if b < 0x80:
        return b, p + 1
    value, shift = b & 0x7F, 7
    while True:
        p += 1
        b = data[p]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, p + 1
        shift += 7
        if shift > 28:
            raise _Miss


def _nested(data: bytes, p: int, tag: int, end: int) -> int:
    """Past the header (tag, length) of a value that must end exactly at `end`."""
    if data[p] != tag:
        raise _Miss
    size, p = _length(data, p + 1)
    if p + size != end:
        raise _Miss
    return p


def _item(data: bytes, p: int) -> tuple[int, int]:
    """(start, end) of the Value in the ListValue item at p."""
    if data[p] != _ITEM:
        raise _Miss
    size = data[p + 1]
    if size < 0x80:  # lengths of one and two bytes inline: nearly every item
        return p + 2, p + 2 + size
    high = data[p + 2]
    if high < 0x80:
        size = (size & 0x7F) | high << 7
        return p + 3, p + 3 + size
    size, p = _length(data, p + 1)
    return p, p + size


def _string(data: bytes, p: int) -> tuple[int, int]:
    """(start, end) of the UTF-8 of a non-empty string item at p; the item ends where the text does."""
    p, end = _item(data, p)
    if data[p] != _STRING:
        raise _Miss
    length, p = _length(data, p + 1)
    if p + length != end or not length:  # "" and NULL go the way that checks them
        raise _Miss
    return p, end


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _texts(data: bytes, p: int, count: int) -> list[Any]:
    """The UTF-8 of `count` non-empty string items from p on, then the position after them; short texts inline."""
    texts: list[Any] = []
    for _ in range(count):
        size = data[p + 3]
        if data[p] == _ITEM and data[p + 2] == _STRING and 0 < size < 126 and data[p + 1] == size + 2:
            p += 4 + size
            texts.append(data[p - size : p])
        else:
            start, p = _string(data, p)
            texts.append(data[start:p])
    texts.append(p)
    return texts


def _mods(data: bytes, p: int, end: int) -> tuple[Mod, ...]:
    mods = []
    decode = _decode_object
    while p < end:
        p, mod_end = _item(data, p)
        keys, new, old, p = _texts(data, _nested(data, p, _LIST, mod_end), 3)
        if p != mod_end:
            raise _Miss
        mods.append(Mod(decode(keys), decode(new), decode(old)))
    if p != end or not mods:
        raise _Miss
    return tuple(mods)


def _header(n: int) -> bytes:
    """The seven nested headers of a row of n bytes (the same for every row of that size), or a _Miss."""
    header = _HEADERS.get(n)
    if header is not None:
        return header
    for fields in range(n - 8 - 7 * 6, n - 8 - 7 * 2 + 1):  # each length is 1 to 5 bytes
        size, header = fields, b""
        for tag, extra in ((_LIST, 0), (_ITEM, 0), (_LIST, 0), (_ITEM, 0), (_LIST, 8), (_ITEM, 0), (_LIST, 0)):
            size += extra
            prefix = bytes((tag,)) + _varint(size)
            header, size = prefix + header, size + len(prefix)
        if size == n:
            if len(_HEADERS) >= _CACHED:
                _HEADERS.clear()
            _HEADERS[n] = header
            return header
    raise _Miss


class BytesRecords:
    """Maps the rows of one result set that have the documented shape; `slow` maps any other row, and the rows whose
    table and column types or whose last six fields were not seen yet (their records fill the caches)."""

    __slots__ = ("_column", "_slow", "_heads", "_tails", "_stamp_bytes", "_stamp")

    def __init__(self, column: int, slow: Callable[[Any], list[ChangeRecord]]) -> None:
        self._column = column
        self._slow = slow
        self._heads: dict[bytes, tuple[str, tuple[ColumnType, ...]]] = {}  # table_name, column_types items -> values
        self._tails: dict[bytes, Tail] = {}  # the bytes from mod_type to the row's end -> the six values
        self._stamp_bytes = b""
        self._stamp: datetime | None = None

    def __call__(self, row: Any) -> list[ChangeRecord]:
        try:
            data = row[self._column].SerializeToString()
            return [self._record(data)]
        except _Unseen as unseen:
            records = self._slow(row)
            self._remember(unseen, records)
            return records
        except (_Miss, *_MISSES):
            return self._slow(row)

    def _record(self, data: bytes) -> DataChangeRecord:
        n = len(data)
        header = _header(n)
        if not data.startswith(header) or data[n - 8 :] != _NO_OTHER_KINDS:
            raise _Miss
        stamp, sequence, transaction, p = _texts(data, len(header), 3)
        if stamp != self._stamp_bytes or self._stamp is None:  # a transaction's records share it
            self._stamp = parse_timestamp(stamp.decode(), "commit_timestamp")
            self._stamp_bytes = stamp
        last = _FLAGS[data[p : p + 4]]
        head = p + 4
        p = _item(data, _item(data, head)[1])[1]  # table_name, column_types
        mods_start, mods_end = _item(data, p)
        mods = _mods(data, _nested(data, mods_start, _LIST, mods_end), mods_end)
        found_head = self._heads.get(data[head:p])
        found_tail = self._tails.get(data[mods_end:])
        if found_head is None or found_tail is None:
            raise _Unseen(data[head:p], data[mods_end:])
        table, columns = found_head
        mod_type, capture, records, partitions, tag, system = found_tail
        return DataChangeRecord(self._stamp, sequence.decode(), transaction.decode(), last, table, columns, mods,
                                mod_type, capture, records, partitions, tag, system)  # fmt: skip

    def _remember(self, unseen: _Unseen, records: list[ChangeRecord]) -> None:
        """Keys the protobuf path's values by the bytes they were read from."""
        if len(records) != 1 or type(records[0]) is not DataChangeRecord:
            return
        r = records[0]
        if len(self._heads) >= _CACHED or len(self._tails) >= _CACHED:
            self._heads.clear()
            self._tails.clear()
        self._heads[unseen.head] = (r.table_name, r.column_types)
        self._tails[unseen.tail] = (r.mod_type, r.value_capture_type, r.number_of_records_in_transaction,
                                    r.number_of_partitions_in_transaction, r.transaction_tag, r.is_system_transaction)  # fmt: skip


__all__ = ["BytesRecords"]
