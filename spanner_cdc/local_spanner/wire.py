"""Protobuf bytes of query results, written directly: Value trees, PartialResultSet / ResultSet, chunked values.

A value tree is plain Python: str -> string_value, bool -> bool_value, float/int -> number_value,
None -> null_value, list -> list_value, Raw -> a Value already encoded. Building bytes directly is
several times faster than building protobuf objects and is the server's hot path.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

# field tags (field number << 3 | wire type)
_NULL = b"\x08\x00"  # Value.null_value = NULL_VALUE
_TRUE = b"\x20\x01"  # Value.bool_value
_FALSE = b"\x20\x00"
_NUMBER = b"\x11"  # Value.number_value (fixed64)
_STRING = b"\x1a"  # Value.string_value
_LIST = b"\x32"  # Value.list_value
_ITEM = b"\x0a"  # ListValue.values / PartialResultSet & ResultSet .metadata
_PRS_VALUE = b"\x12"  # PartialResultSet.values / ResultSet.rows
_PRS_CHUNKED = b"\x18\x01"  # PartialResultSet.chunked_value = true
_PRS_TOKEN = b"\x22"  # PartialResultSet.resume_token
_pack_double = struct.Struct("<d").pack
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_SMALL = [bytes((n,)) for n in range(128)]
# every length below 16 KiB has its varint precomputed: the hot path frames thousands of small messages
VARINTS = _SMALL + [bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(128, 1 << 14)]


class Raw(bytes):
    """Bytes of an encoded google.protobuf.Value, used as a leaf of a value tree."""


def varint(n: int) -> bytes:
    if n < 16384:
        return VARINTS[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def timestamp(seconds: int, nanos: int) -> bytes:
    """google.protobuf.Timestamp bytes (fields at zero left out, as protobuf writes them)."""
    out = b"\x08" + varint(seconds & 0xFFFFFFFFFFFFFFFF) if seconds else b""
    return out + b"\x10" + varint(nanos) if nanos else out


def commit_response(commit_timestamp: datetime) -> bytes:
    """CommitResponse bytes with commit_timestamp alone (a naive datetime is UTC): every commit's answer."""
    if commit_timestamp.tzinfo is None:
        commit_timestamp = commit_timestamp.replace(tzinfo=UTC)
    seconds, micros = divmod((commit_timestamp - _EPOCH) // _ONE_US, 1_000_000)
    body = timestamp(seconds, micros * 1000)
    return b"\x0a" + varint(len(body)) + body


def string(text: str) -> bytes:
    data = text.encode()
    n = len(data)
    return _STRING + (VARINTS[n] if n < 16384 else varint(n)) + data


def list_of(encoded_items: Sequence[bytes]) -> bytes:
    """A list_value Value from already encoded item Values."""
    body = b"".join([_ITEM + (VARINTS[len(i)] if len(i) < 16384 else varint(len(i))) + i for i in encoded_items])
    n = len(body)
    return _LIST + (VARINTS[n] if n < 16384 else varint(n)) + body


def encode(value: Any) -> bytes:
    """The google.protobuf.Value bytes of a value tree."""
    cls = value.__class__
    if cls is str:
        return string(value)
    if cls is list:
        return list_of([encode(v) for v in value])
    if cls is Raw:
        return value
    if value is None:
        return _NULL
    if cls is bool:
        return _TRUE if value else _FALSE
    if cls is float or cls is int:
        return _NUMBER + _pack_double(value)
    raise TypeError(f"cannot encode {value!r} as a protobuf Value")


def partial_result_set(values: Sequence[bytes], resume_token: bytes, metadata: bytes = b"", chunked: bool = False) -> bytes:
    """PartialResultSet bytes from encoded Values (and encoded ResultSetMetadata for the first message)."""
    parts = []
    if metadata:
        parts.append(_ITEM + varint(len(metadata)) + metadata)
    for value in values:
        n = len(value)
        parts.append(_PRS_VALUE + (VARINTS[n] if n < 16384 else varint(n)) + value)
    if chunked:
        parts.append(_PRS_CHUNKED)
    if resume_token:
        parts.append(_PRS_TOKEN + varint(len(resume_token)) + resume_token)
    return b"".join(parts)


def result_set(metadata: bytes, rows: Sequence[Sequence[bytes]]) -> bytes:
    """ResultSet bytes: metadata plus rows, each row a ListValue of encoded Values."""
    parts = [_ITEM + varint(len(metadata)) + metadata]
    for row in rows:
        body = b"".join(_ITEM + varint(len(v)) + v for v in row)
        parts.append(_PRS_VALUE + varint(len(body)) + body)
    return b"".join(parts)


# -- chunking -----------------------------------------------------------------------------------
#
# The client merges a chunked value with the first value of the next message: strings concatenate,
# and for lists the last element of the first part merges with the first element of the next,
# recursively. So a value is cut inside one string leaf: the first part holds everything before
# the cut (on the path from the root to that leaf, each list keeps its earlier elements), the rest
# holds the remainder string and everything after it.


def _leaves(value: Any, path: tuple[int, ...], out: list[tuple[tuple[int, ...], Any]]) -> None:
    if value.__class__ is list:
        for index, item in enumerate(value):
            _leaves(item, path + (index,), out)
    else:
        out.append((path, value))


def _cut(value: Any, path: tuple[int, ...], head: str, tail: str) -> tuple[Any, Any]:
    if not path:
        return head, tail
    index = path[0]
    inner_head, inner_tail = _cut(value[index], path[1:], head, tail)
    return value[:index] + [inner_head], [inner_tail] + value[index + 1 :]


def _prefix_chars(text: str, budget: int) -> int:
    """Most characters of `text` whose UTF-8 form fits in `budget` bytes."""
    if len(text.encode()) <= budget:
        return len(text)
    low, high = 0, min(len(text), budget)
    while low < high:
        middle = (low + high + 1) // 2
        if len(text[:middle].encode()) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def split(value: Any, budget: int) -> tuple[Any, Any]:
    """Cut a value tree into (first, rest) with first's encoding about `budget` bytes or less."""
    leaves: list[tuple[tuple[int, ...], Any]] = []
    _leaves(value, (), leaves)
    position = 0
    chosen: tuple[tuple[int, ...], str, int] | None = None
    for path, leaf in leaves:
        size = len(encode(leaf)) + 6 * (len(path) + 1)  # leaf plus a generous allowance for list headers
        if leaf.__class__ is str:
            if position + size <= budget:
                chosen = (path, leaf, len(leaf))
            else:
                chars = _prefix_chars(leaf, max(0, budget - position - 6 * (len(path) + 1)))
                if chars or chosen is None:
                    chosen = (path, leaf, chars)
                break
        elif position + size > budget and chosen is not None:
            break
        position += size
    if chosen is None:
        raise ValueError("a value without a string leaf cannot be chunked")
    path, leaf, chars = chosen
    if chars == 0 and path == leaves[0][0]:
        raise ValueError("the value cannot be cut within the budget (no string leaf early enough)")
    return _cut(value, path, leaf[:chars], leaf[chars:])


def chunks(value: Any, budget: int) -> list[bytes]:
    """Encoded parts of a value whose encoding exceeds `budget`; merging them on the client gives the value."""
    out: list[bytes] = []
    rest = value
    while True:
        encoded = encode(rest)
        if len(encoded) <= budget:
            out.append(encoded)
            return out
        first, rest = split(rest, budget)
        out.append(encode(first))
