"""The one entry of the decoders: a result set's row mapper for its dialect and the form its rows arrive in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.struct_pb2 import Value as _WireValue

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import ChangeRecord
from spanner_cdc.names import POSTGRESQL
from spanner_cdc.source.decode.fields import RowMapper
from spanner_cdc.source.decode.googlesql import googlesql_mapper
from spanner_cdc.source.decode.googlesql_values import wire_mapper
from spanner_cdc.source.decode.postgresql import postgresql_mapper
from spanner_cdc.source.queries import validate_dialect


def row_mapper(dialect: str, fields: Sequence[Any], decode_row: Callable[[Any], list[Any]] | None = None) -> RowMapper:
    """A function row -> records for one result set; field positions are looked up once, here.

    Rows may also be undecoded (`lazy_decode=True`, lists of protobuf Values): PostgreSQL's JSON text is
    parsed here, once, instead of through the client's JsonObject wrapper (a data change record by msgspec
    straight into typed structs, pg_json.py; other kinds and unusual rows by json, with the checks of fields.py); GoogleSQL's ChangeRecord is read
    straight from the protobuf values (googlesql_values.py) when the metadata has the documented shape, and
    otherwise decoded by the client (`decode_row`, the result set's own decode_row)."""
    dialect = validate_dialect(dialect)
    if dialect == POSTGRESQL:
        return postgresql_mapper(fields)
    return _googlesql_row_mapper(googlesql_mapper(fields), wire_mapper(fields), decode_row)


# A thread's GoogleSQL mappers by their result metadata's bytes: every query of a stream has the same metadata, and a
# small partition's query is over after a few rows, so building the mappers per query (~0.1 ms: the field lookups) and
# refilling their caches (each table's column types, a record's tail) cost more than its rows. Per thread: a mapper's
# caches are not shared between threads (a wave task reads several tokens at once, one thread each).
_MAPPERS_PER_THREAD = 8
_local = threading.local()


def cached_row_mapper(dialect: str, fields: Sequence[Any], key: bytes, decode_row: Callable[[Any], list[Any]] | None = None) -> RowMapper:
    """row_mapper, with GoogleSQL's field lookups and decoding caches kept by this thread for the next result set of the
    same metadata (`key`: its serialized row type); the rows map to the same records."""
    dialect = validate_dialect(dialect)
    if dialect == POSTGRESQL:
        return postgresql_mapper(fields)
    mappers: dict[bytes, tuple[RowMapper, RowMapper | None]] | None = getattr(_local, "mappers", None)
    if mappers is None:
        mappers = _local.mappers = {}
    found = mappers.get(key)
    if found is None:
        if len(mappers) >= _MAPPERS_PER_THREAD:
            mappers.clear()
        found = mappers[key] = (googlesql_mapper(fields), wire_mapper(fields))
    return _googlesql_row_mapper(*found, decode_row)


def _googlesql_row_mapper(decoded: RowMapper, wire: RowMapper | None, decode_row: Callable[[Any], list[Any]] | None) -> RowMapper:
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


__all__ = ["RowMapper", "cached_row_mapper", "lazy_decode", "row_mapper"]
