"""Data change records of one commit for one stream: mods per value capture type, grouping, sequences."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from spanner_cdc.local_spanner.changestream.partitions import Partition, key_hash
from spanner_cdc.local_spanner.model import RowChange, StreamDef, TableInfo

Router = Callable[[int], Partition | None]


def tracked_columns(stream: StreamDef, table: TableInfo) -> tuple[str, ...]:
    """Non-key columns of `table` the stream watches, in schema order."""
    chosen = None if stream.tables is None else stream.tables.get(table.name)
    names = [c.name for c in sorted(table.columns, key=lambda c: c.ordinal_position) if not c.is_primary_key]
    if chosen is None:
        return tuple(names)
    wanted = set(chosen)
    return tuple(n for n in names if n in wanted)


def build_mod(change: RowChange, tracked: Sequence[str], capture: str) -> dict[str, Any] | None:
    """keys / new_values / old_values of one row change, or None if it touches no tracked column."""
    new_row = change.new_row or {}
    old_row = change.old_row or {}
    new_values: dict[str, Any]
    old_values: dict[str, Any]
    if change.mod_type == "INSERT":
        new_values, old_values = {c: new_row.get(c) for c in tracked}, {}
    elif change.mod_type == "DELETE":
        new_values = {}
        full_old = capture in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES")
        old_values = {c: old_row.get(c) for c in tracked} if full_old else {}
    else:
        written_set = set(change.written_columns)
        written = [c for c in tracked if c in written_set]
        if not written:
            return None
        if capture in ("NEW_ROW", "NEW_ROW_AND_OLD_VALUES"):
            new_values = {c: new_row.get(c) for c in tracked}
        else:
            new_values = {c: new_row.get(c) for c in written}
        if capture in ("OLD_AND_NEW_VALUES", "NEW_ROW_AND_OLD_VALUES"):
            old_values = {c: old_row.get(c) for c in written}
        else:
            old_values = {}
    return {"keys": dict(change.keys), "new_values": new_values, "old_values": old_values}


def column_types(table: TableInfo, present: Sequence[str]) -> list[dict[str, Any]]:
    """Key columns and the non-key columns present in a record, in schema order."""
    wanted = set(present)
    return [
        {"name": c.name, "type": c.type, "is_primary_key": c.is_primary_key, "ordinal_position": c.ordinal_position}
        for c in sorted(table.columns, key=lambda c: c.ordinal_position)
        if c.is_primary_key or c.name in wanted
    ]


class ColumnTypesCache:
    """One shared column_types list per table version and column set: records share it (read-only),
    which saves memory and lets the journal store it once. Also the tracked columns per stream and table."""

    def __init__(self) -> None:
        self._lists: dict[tuple[int, tuple[str, ...]], tuple[TableInfo, list[dict[str, Any]]]] = {}
        self._tracked: dict[tuple[int, int], tuple[StreamDef, TableInfo, tuple[str, ...]]] = {}

    def tracked(self, stream: StreamDef, table: TableInfo) -> tuple[str, ...]:
        """tracked_columns(stream, table), computed once per stream definition and table version."""
        hit = self._tracked.get((id(stream), id(table)))
        if hit is not None and hit[0] is stream and hit[1] is table:
            return hit[2]
        value = tracked_columns(stream, table)
        self._tracked[(id(stream), id(table))] = (stream, table, value)
        return value

    def get(self, table: TableInfo, present: tuple[str, ...]) -> list[dict[str, Any]]:
        hit = self._lists.get((id(table), present))
        if hit is not None and hit[0] is table:
            return hit[1]
        value = column_types(table, present)
        self._lists[(id(table), present)] = (table, value)
        return value


def excluded_mod_types(stream: StreamDef, system_transaction: bool) -> frozenset[str]:
    """Mod types the stream's options leave out of its records for this transaction.

    exclude_insert / exclude_update / exclude_delete drop every change of that type; exclude_ttl_deletes
    drops the deletes of a system transaction (a row deletion policy), which exclude_delete drops too
    (Spanner's "Create and manage change streams": the options filter by modification type and TTL)."""
    options = stream.options
    out = {mod for mod, option in _EXCLUDE_OPTIONS if options.get(option) == "true"}
    if system_transaction and options.get("exclude_ttl_deletes") == "true":
        out.add("DELETE")
    return frozenset(out)


_EXCLUDE_OPTIONS = (("INSERT", "exclude_insert"), ("UPDATE", "exclude_update"), ("DELETE", "exclude_delete"))


def build_transaction(
    stream: StreamDef,
    tables: Mapping[str, TableInfo],
    changes: Sequence[RowChange],
    route: Router,
    *,
    commit_timestamp: datetime,
    server_transaction_id: str,
    transaction_tag: str,
    types: ColumnTypesCache | None = None,
    system_transaction: bool = False,
) -> list[tuple[Partition, dict[str, Any]]]:
    """The stream's records of one commit, each with the partition it belongs to, in sequence order.

    Consecutive row changes of one partition with the same table, mod type and column set share a
    record; the order of changes within a partition is kept, so replaying records by sequence
    reproduces the commit. Changes of a mod type the stream's options exclude make no record."""
    capture = stream.value_capture_type
    types = types or ColumnTypesCache()
    excluded = excluded_mod_types(stream, system_transaction) if stream.options else frozenset()
    groups: list[tuple[Partition, TableInfo, str, tuple[str, ...], list[dict[str, Any]]]] = []
    open_group: dict[str, int] = {}  # partition token -> index of its last group
    for change in changes:
        table = tables.get(change.table)
        if table is None or not stream.tracks(change.table) or change.mod_type in excluded:
            continue
        mod = build_mod(change, types.tracked(stream, table), capture)
        if mod is None:
            continue
        partition = route(key_hash(table.name, [change.keys.get(k) for k in table.key_columns]))
        if partition is None:
            continue
        present = tuple(dict.fromkeys([*mod["new_values"], *mod["old_values"]]))
        index = open_group.get(partition.token)
        if index is not None:
            _, g_table, g_type, g_present, g_mods = groups[index]
            if g_table.name == table.name and g_type == change.mod_type and g_present == present:
                g_mods.append(mod)
                continue
        open_group[partition.token] = len(groups)
        groups.append((partition, table, change.mod_type, present, [mod]))

    last_in_partition = {partition.token: i for i, (partition, *_rest) in enumerate(groups)}
    partitions_in_transaction = len(last_in_partition)
    built = []
    for i, (partition, table, mod_type, present, mods) in enumerate(groups):
        record = {
            "commit_timestamp": commit_timestamp,
            "record_sequence": f"{i:08d}",
            "server_transaction_id": server_transaction_id,
            "is_last_record_in_transaction_in_partition": last_in_partition[partition.token] == i,
            "table_name": table.name,
            "column_types": types.get(table, present),
            "mods": mods,
            "mod_type": mod_type,
            "value_capture_type": capture,
            "number_of_records_in_transaction": len(groups),
            "number_of_partitions_in_transaction": partitions_in_transaction,
            "transaction_tag": transaction_tag,
            "is_system_transaction": system_transaction,
        }
        built.append((partition, record))
    return built
