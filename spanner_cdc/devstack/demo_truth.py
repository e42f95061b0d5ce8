"""The workload's ground truth as change identities comparable with the rows read back from the lake."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

# (table, keys, commit timestamp, change type, new values, old values); values as canonical JSON text.
Identity = tuple[str, str, str, str, str, str]


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return format(value.normalize(), "f")
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat(timespec="microseconds")
    return str(value)


def canonical(table: str, values: Any) -> str:
    """Values (a dict or its JSON text) in one spelling: each compared by its column type (JSON parsed,
    timestamps and numbers as values, not text), sorted keys; None and {} both mean 'no values'."""
    from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME, comparable

    data = json.loads(values) if isinstance(values, str) and values else dict(values or {})
    schema = TABLES_BY_NAME.get(table)
    types = {c.name: c.type for c in (*schema.keys, *schema.values)} if schema else {}
    typed = {name: comparable(types[name], value) if name in types else value for name, value in data.items()}
    return json.dumps(typed, sort_keys=True, separators=(",", ":"), default=_plain)


def stamp(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).isoformat(timespec="microseconds")


def identity(table: str, keys: Any, commit: dt.datetime, change_type: str, new: Any, old: Any) -> Identity:
    return (table, canonical(table, keys), stamp(commit), change_type, canonical(table, new), canonical(table, old))


def truth_identities(path: Path, start: dt.datetime, end: dt.datetime) -> tuple[list[Identity], list[Identity]]:
    """The ground truth's changes committed in [start, end), and those outside it."""
    from spanner_cdc.devstack.workload import load_ground_truth

    inside: list[Identity] = []
    outside: list[Identity] = []
    for row in load_ground_truth(path):
        item = identity(row.table, row.keys, row.commit_timestamp, row.mod_type, row.new_values, row.old_values)
        (inside if start <= row.commit_timestamp < end else outside).append(item)
    return inside, outside
