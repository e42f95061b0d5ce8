"""Current-state tables: one table's rows at a window end (previous state + the window's changes in commit order), typed
(the fold a task runs; extract/current_state.py runs it over the lineage's windows)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from spanner_cdc.lake.columns import TIMESTAMP
from spanner_cdc.times import parse_rfc3339

# Spanner type code -> Arrow type of the state's column (NUMERIC exactly, as Spanner's 38 digits with 9 after the point)
SCALAR_TYPES: dict[str, pa.DataType] = {
    "INT64": pa.int64(), "FLOAT64": pa.float64(), "FLOAT32": pa.float32(), "STRING": pa.string(), "BOOL": pa.bool_(),
    "TIMESTAMP": TIMESTAMP, "DATE": pa.date32(), "BYTES": pa.binary(), "NUMERIC": pa.decimal128(38, 9), "JSON": pa.string(),
    "ENUM": pa.string(), "PROTO": pa.binary(),
}  # fmt: skip
SPANNER_TYPE_KEY = b"spanner_cdc.column_types"  # the state's column types, kept in the file's schema metadata
ORDER_COLUMNS = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")
CHANGE_COLUMNS = ("object", *ORDER_COLUMNS, "change_type", "keys", "new_values", "column_types", "value_capture_type")
_FULL_ROW = ("NEW_ROW", "NEW_ROW_AND_OLD_VALUES")


def arrow_type(spanner_type: Mapping[str, Any]) -> pa.DataType:
    code = str(spanner_type.get("code"))
    if code == "ARRAY":
        return pa.list_(arrow_type(spanner_type.get("array_element_type") or {"code": "STRING"}))
    if spanner_type.get("type_annotation") == "PG_NUMERIC":
        return pa.string()  # PostgreSQL's numeric: any scale, up to 131072 digits, and NaN; no decimal type holds it: its text
    return SCALAR_TYPES.get(code, pa.string())  # anything else keeps the change stream's JSON text


def typed(spanner_type: Mapping[str, Any], value: Any) -> Any:
    """A value as the change stream writes it (INT64 as text, BYTES base64, ...) -> the Python value of its Arrow type."""
    if value is None:
        return None
    code = str(spanner_type.get("code"))
    if code == "ARRAY":
        element = spanner_type.get("array_element_type") or {"code": "STRING"}
        return [typed(element, v) for v in value]
    if code == "INT64":
        return int(value)
    if code in ("FLOAT64", "FLOAT32"):
        return float(value)  # "NaN", "Infinity" and "-Infinity" come as text
    if code == "BOOL":
        return bool(value)
    if code == "TIMESTAMP":
        return parse_rfc3339(str(value))  # as Spanner writes it: Z, up to 9 fraction digits
    if code == "DATE":
        return date.fromisoformat(str(value))
    if code in ("BYTES", "PROTO"):
        return base64.b64decode(value)
    if code == "NUMERIC" and spanner_type.get("type_annotation") != "PG_NUMERIC":
        return Decimal(str(value))
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


@dataclass
class Column:
    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int


@dataclass
class TableState:
    """Rows by key (the key's JSON, canonical), each a dict column -> value as the change stream writes it."""

    table: str
    columns: dict[str, Column] = field(default_factory=dict)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def _learn(self, column_types: list[dict[str, Any]], full_row: bool) -> None:
        """New columns join (older rows get null); a record that carries the whole row and lacks a column drops it."""
        seen = set()
        for c in column_types:
            seen.add(c["name"])
            self.columns[c["name"]] = Column(c["name"], c["type"], bool(c["is_primary_key"]), int(c["ordinal_position"]))
        if full_row:
            for gone in [name for name in self.columns if name not in seen]:
                del self.columns[gone]
                for row in self.rows.values():
                    row.pop(gone, None)

    def apply(self, change_type: str, keys: dict[str, Any], new_values: dict[str, Any], column_types: list[dict[str, Any]], capture: str) -> None:
        """One mod, in commit order: an INSERT replaces the row, an UPDATE sets the columns it carries, a DELETE removes it."""
        key = json.dumps(keys, sort_keys=True, separators=(",", ":"))
        self._learn(column_types, change_type == "INSERT" or (change_type == "UPDATE" and capture in _FULL_ROW))
        if change_type == "DELETE":
            self.rows.pop(key, None)
        elif change_type == "INSERT" or capture in _FULL_ROW:
            self.rows[key] = {**keys, **new_values}
        else:  # NEW_VALUES / OLD_AND_NEW_VALUES: only the columns the transaction wrote
            self.rows.setdefault(key, dict(keys)).update(new_values)

    def ordered_columns(self) -> list[Column]:
        return sorted(self.columns.values(), key=lambda c: (not c.is_primary_key, c.ordinal_position, c.name))

    def to_arrow(self) -> pa.Table:
        """One column per table column, named as in Spanner, typed from the records' column types; rows in key order."""
        columns = self.ordered_columns()
        metadata = {SPANNER_TYPE_KEY: json.dumps([c.__dict__ for c in columns]).encode()}
        schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in columns], metadata=metadata)
        values = [[typed(c.type, r.get(c.name)) for c in columns] for r in self.rows.values()]
        keys = [i for i, c in enumerate(columns) if c.is_primary_key]
        values.sort(key=lambda row: tuple((row[i] is not None, row[i]) for i in keys))  # key order, NULL first as Spanner sorts
        arrays = [pa.array([row[i] for row in values], type=schema.field(c.name).type) for i, c in enumerate(columns)]
        return pa.Table.from_arrays(arrays, schema=schema)

    @classmethod
    def from_arrow(cls, table_name: str, data: pa.Table) -> TableState:
        """A state written by to_arrow, back to the change stream's value forms (so the next window applies the same way)."""
        state = cls(table_name)
        meta = (data.schema.metadata or {}).get(SPANNER_TYPE_KEY)
        for c in json.loads(meta) if meta else []:
            state.columns[c["name"]] = Column(**c)
        keys = [c.name for c in state.ordered_columns() if c.is_primary_key]
        for row in data.to_pylist():
            plain = {name: untyped(state.columns[name].type, value) for name, value in row.items()}
            state.rows[json.dumps({k: plain[k] for k in keys}, sort_keys=True, separators=(",", ":"))] = plain
        return state


def untyped(spanner_type: Mapping[str, Any], value: Any) -> Any:
    """The inverse of `typed`: back to the change stream's JSON value."""
    if value is None:
        return None
    code = str(spanner_type.get("code"))
    if code == "ARRAY":
        element = spanner_type.get("array_element_type") or {"code": "STRING"}
        return [untyped(element, v) for v in value]
    if code == "INT64" or isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if code == "JSON":
        return value
    return value


def apply_changes(states: dict[str, TableState], changes: Iterable[Mapping[str, Any]]) -> None:
    """Lake rows (CHANGE_COLUMNS) in any order -> applied to `states` per table, in commit order."""
    ordered = sorted(changes, key=lambda r: tuple(r[c] for c in ORDER_COLUMNS))
    for r in ordered:
        state = states.setdefault(r["object"], TableState(r["object"]))
        state.apply(r["change_type"], json.loads(r["keys"]), json.loads(r["new_values"]), json.loads(r["column_types"]), r["value_capture_type"])
