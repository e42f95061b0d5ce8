"""Shared types of the local server: schema, committed row changes and stream definitions (engine contract)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from spanner_cdc.names import MUTABLE_KEY_RANGE

DEFAULT_RETENTION = timedelta(days=7)  # Spanner's documented default retention_period


@dataclass(frozen=True)
class ColumnInfo:
    """A column; `type` is Spanner's JSON type, e.g. {"code": "INT64"} or
    {"code": "ARRAY", "array_element_type": {"code": "STRING"}}."""

    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int  # 1-based, in schema order


@dataclass(frozen=True)
class TableInfo:
    name: str
    columns: tuple[ColumnInfo, ...]
    key_columns: tuple[str, ...]  # primary key order

    def column(self, name: str) -> ColumnInfo:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)


@dataclass(frozen=True)
class RowChange:
    """One row changed by a commit. Values are in change stream JSON encoding (INT64 and NUMERIC as
    strings, FLOAT64 as numbers, BYTES base64, TIMESTAMP RFC 3339, DATE YYYY-MM-DD, JSON as text).
    `old_row` / `new_row` hold every non-key column before / after (None for insert / delete);
    `written_columns` are the non-key columns the mutation named."""

    table: str
    mod_type: str  # INSERT | UPDATE | DELETE
    keys: dict[str, Any]
    old_row: dict[str, Any] | None
    new_row: dict[str, Any] | None
    written_columns: tuple[str, ...]


@dataclass(frozen=True)
class StreamDef:
    """A change stream. `tables` None = FOR ALL; a table mapped to None = all its columns;
    otherwise the tracked non-key columns."""

    name: str
    tables: Mapping[str, tuple[str, ...] | None] | None
    value_capture_type: str = "OLD_AND_NEW_VALUES"
    retention: timedelta = DEFAULT_RETENTION
    created_at: datetime | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def tracks(self, table: str) -> bool:
        return self.tables is None or table in self.tables

    @property
    def mutable_key_range(self) -> bool:
        """Created with partition_mode = 'MUTABLE_KEY_RANGE': long-lived partitions, proto records."""
        return self.options.get("partition_mode") == MUTABLE_KEY_RANGE


class QueryError(Exception):
    """A change stream query the server refuses; `code` is a grpc.StatusCode name such as
    "INVALID_ARGUMENT", "OUT_OF_RANGE" or "NOT_FOUND"."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)
