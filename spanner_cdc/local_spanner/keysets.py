"""Primary key order and KeySets (keys, closed/open ranges with key prefixes, all) over a table's rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.schema import TableDef
from spanner_cdc.local_spanner.values import normalize, pb_to_python, sort_key

Key = tuple[Any, ...]
Rows = dict[Key, dict[str, Any]]  # key tuple -> full row (key columns included)
KeyTypes = Sequence[tuple[dict[str, Any], bool]]  # per key column: (type, descending)


def key_types(table: TableDef, postgres: bool) -> list[tuple[dict[str, Any], bool]]:
    types = []
    for name, descending in table.key:
        column = table.column(name, postgres)
        assert column is not None
        types.append((column.type, descending))
    return types


def _order(types: KeyTypes, key: Key) -> tuple[Any, ...]:
    return tuple(sort_key(t, v, desc) for (t, desc), v in zip(types, key, strict=False))


def sorted_keys(table: TableDef, rows: Rows, postgres: bool) -> list[Key]:
    """Keys of `rows` in primary key order."""
    types = key_types(table, postgres)
    return sorted(rows, key=lambda k: _order(types, k))


def _key_values(table: TableDef, key_pb: Any, types: KeyTypes, prefix: bool) -> Key:
    values = [pb_to_python(v) for v in key_pb.values]
    if len(values) > len(types) or (not prefix and len(values) != len(types)):
        raise QueryError("INVALID_ARGUMENT", f"Key {values} for table {table.name} does not match its primary key ({', '.join(table.key_names)})")
    return tuple(normalize(t, v, f"key column {table.name}.{n}") for (t, _), v, n in zip(types, values, table.key_names, strict=False))


def _range(table: TableDef, key_range: Any, types: KeyTypes) -> Callable[[Key], bool]:
    start_kind = key_range.WhichOneof("start_key_type")
    end_kind = key_range.WhichOneof("end_key_type")
    if start_kind is None or end_kind is None:
        raise QueryError("INVALID_ARGUMENT", f"Key range for table {table.name} needs a start and an end")
    start = _order(types, _key_values(table, getattr(key_range, start_kind), types, prefix=True))
    end = _order(types, _key_values(table, getattr(key_range, end_kind), types, prefix=True))

    def contains(key: Key) -> bool:
        order = _order(types, key)
        low, high = order[: len(start)], order[: len(end)]
        above = low >= start if start_kind == "start_closed" else low > start
        below = high <= end if end_kind == "end_closed" else high < end
        return above and below

    return contains


def matching_keys(table: TableDef, postgres: bool, rows: Rows, key_set: Any) -> list[Key]:
    """Keys of existing rows a google.spanner.v1.KeySet names, in key order, each once."""
    types = key_types(table, postgres)
    if key_set.all_:
        return sorted(rows, key=lambda k: _order(types, k))
    found: dict[Key, None] = {}
    for key_pb in key_set.keys:
        key = _key_values(table, key_pb, types, prefix=False)
        if key in rows:
            found[key] = None
    ranges = [_range(table, key_range, types) for key_range in key_set.ranges]
    if ranges:
        for key in rows:
            if any(contains(key) for contains in ranges):
                found[key] = None
    return sorted(found, key=lambda k: _order(types, k))
