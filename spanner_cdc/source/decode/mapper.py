"""The one entry of the decoders: a result set's row mapper for its dialect and the form its rows arrive in."""

from __future__ import annotations

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
    decoded = googlesql_mapper(fields)
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


__all__ = ["RowMapper", "lazy_decode", "row_mapper"]
