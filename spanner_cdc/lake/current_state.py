"""Current-state tables, the pure part: Spanner values typed, a window's changes folded per key, the state's columns
(the fold a task runs; extract/current_state.py runs it over the lineage's windows)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
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
ORDER_COLUMNS = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")
CHANGE_COLUMNS = ("object", *ORDER_COLUMNS, "change_type", "keys", "new_values", "column_types", "value_capture_type")
_FULL_ROW = ("NEW_ROW", "NEW_ROW_AND_OLD_VALUES")


def arrow_type(spanner_type: Mapping[str, Any]) -> pa.DataType:
    code = str(spanner_type.get("code"))
    if code == "ARRAY":
        return pa.list_(arrow_type(spanner_type.get("array_element_type") or {"code": "STRING"}))
    if spanner_type.get("type_annotation") == "PG_NUMERIC":
        return (
            pa.string()
        )  # PostgreSQL's numeric: any scale, up to 131072 digits, and NaN; no decimal type holds it: its text
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


def is_full_row(change_type: str, capture: str) -> bool:
    """A record that carries the whole row: it replaces the row, and a column it lacks is no longer the table's."""
    return change_type == "INSERT" or (change_type == "UPDATE" and capture in _FULL_ROW)


@dataclass(frozen=True)
class Column:
    name: str
    type: dict[str, Any]
    is_primary_key: bool
    ordinal_position: int


def ordered(columns: Iterable[Column]) -> list[Column]:
    """Key columns first, then in the table's order."""
    return sorted(columns, key=lambda c: (not c.is_primary_key, c.ordinal_position, c.name))


@dataclass(frozen=True)
class SchemaFact:
    """One distinct `column_types` text of a table seen in a window: whether a record carrying the whole row had it,
    and the last commit that carried it (DDL falls between commits: one commit never carries two texts of a table)."""

    table: str
    column_types: str
    full_row: bool
    last: datetime


def schema_facts(changes: pa.Table) -> list[SchemaFact]:
    """A batch of lake rows (object, commit_timestamp, change_type, column_types, value_capture_type) -> its facts."""
    if changes.num_rows == 0:
        return []
    import pyarrow.compute as pc

    full = pc.or_(
        pc.equal(changes.column("change_type"), "INSERT"),
        pc.and_(
            pc.equal(changes.column("change_type"), "UPDATE"),
            pc.is_in(changes.column("value_capture_type"), pa.array(_FULL_ROW)),
        ),
    )
    grouped = (
        pa.table({"object": changes.column("object"), "column_types": changes.column("column_types"), "full": full,
                  "at": changes.column("commit_timestamp")})
        .group_by(["object", "column_types", "full"])
        .aggregate([("at", "max")])
    )  # fmt: skip
    return [SchemaFact(r["object"], r["column_types"], r["full"], r["at_max"]) for r in grouped.to_pylist()]


def merge_facts(facts: Iterable[SchemaFact]) -> list[SchemaFact]:
    """Facts of many batches -> one per (table, text, full_row), the latest commit kept."""
    out: dict[tuple[str, str, bool], SchemaFact] = {}
    for f in facts:
        key = (f.table, f.column_types, f.full_row)
        if key not in out or f.last > out[key].last:
            out[key] = f
    return list(out.values())


def target_columns(facts: Sequence[SchemaFact], existing: Sequence[Column]) -> list[Column]:
    """The table's columns after a window: as the records apply in commit order, the last whole-row record's columns
    plus those of every later record (a column added mid-window); without one, the existing columns plus any new."""
    full = [f for f in facts if f.full_row]
    last_full = max(full, key=lambda f: f.last) if full else None
    columns: dict[str, Column] = {} if last_full else {c.name: c for c in existing}
    for fact in sorted(facts, key=lambda f: f.last):  # a later text's type and position win
        if last_full is None or fact is last_full or fact.last > last_full.last:
            for c in json.loads(fact.column_types):
                columns[c["name"]] = Column(c["name"], c["type"], bool(c["is_primary_key"]), int(c["ordinal_position"]))
    return ordered(columns.values())


def key_text(keys: Mapping[str, Any]) -> str:
    """A key's canonical JSON (typed values as text): equal keys, equal texts."""
    return json.dumps({k: keys[k] for k in sorted(keys)}, sort_keys=True, separators=(",", ":"), default=str)


@dataclass
class KeyChange:
    """A key's net change over a window: `row` None is a delete; `whole` False means the row's other columns are
    those it had before the window (partial updates of NEW_VALUES / OLD_AND_NEW_VALUES on top of the row found)."""

    keys: dict[str, Any]
    row: dict[str, Any] | None
    whole: bool

    def resolve(self, base: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The row after the window, given the row before it (None: none was there)."""
        if self.row is None or self.whole or base is None:
            return self.row
        return {**base, **self.row}


def _typed_values(values: Mapping[str, Any], types: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {name: typed(types.get(name, {"code": "STRING"}), v) for name, v in values.items()}


def fold(changes: Iterable[Mapping[str, Any]]) -> dict[str, KeyChange]:
    """Lake rows (CHANGE_COLUMNS) of one table, in any order -> each key's net change, applying them in commit order:
    an INSERT (or a whole-row UPDATE) replaces the row, an UPDATE sets the columns it carries, a DELETE removes it."""
    out: dict[str, KeyChange] = {}
    for r in sorted(changes, key=lambda r: tuple(r[c] for c in ORDER_COLUMNS)):
        types = {c["name"]: c["type"] for c in json.loads(r["column_types"])}
        keys = _typed_values(json.loads(r["keys"]), types)
        text = key_text(keys)
        if r["change_type"] == "DELETE":
            out[text] = KeyChange(keys, None, True)
            continue
        values = _typed_values(json.loads(r["new_values"]), types)
        before = out.get(text)
        if is_full_row(r["change_type"], r["value_capture_type"]):
            out[text] = KeyChange(keys, {**keys, **values}, True)
        elif before is None:
            out[text] = KeyChange(keys, {**keys, **values}, False)
        elif before.row is None:  # updated after a delete in the window: the columns it carries, nothing older
            out[text] = KeyChange(keys, {**keys, **values}, True)
        else:
            before.row.update(values)
    return out
