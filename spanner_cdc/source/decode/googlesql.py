"""GoogleSQL rows the client decoded -> typed records: STRUCTs arrive as positional lists, their field names only in the
result metadata, read once per result set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.cloud.spanner_v1 import TypeCode

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartition,
    ChildPartitionsRecord,
    ColumnType,
    DataChangeRecord,
    HeartbeatRecord,
)
from spanner_cdc.source.decode.fields import (
    CHILD_PARTITION_FIELDS,
    CHILD_PARTITIONS_FIELDS,
    COLUMN_TYPE_FIELDS,
    DATA_CHANGE_FIELDS,
    HEARTBEAT_FIELDS,
    MOD_FIELDS,
    RECORD_KINDS,
    SHAPE_ERRORS,
    ColumnTypesCache,
    Malformed,
    RowMapper,
    as_list,
    as_parent_tokens,
    as_sequence,
    as_text,
    as_timestamp,
    build_column_type,
    build_data_change,
    build_mod,
    empty_array,
    row_error,
)


def _struct_of(field_type: Any, what: str) -> dict[str, Any]:
    """An ARRAY<STRUCT<...>> type's struct fields: name -> (position, type)."""
    if field_type.code != TypeCode.ARRAY or field_type.array_element_type.code != TypeCode.STRUCT:
        raise SourceError(f"unexpected result metadata: {what} is not an ARRAY<STRUCT>", raw=str(field_type))
    return {f.name: (i, f.type_) for i, f in enumerate(field_type.array_element_type.struct_type.fields)}


def _positions(struct: dict[str, Any], wanted: Sequence[str], what: str) -> list[int]:
    missing = [name for name in wanted if name not in struct]
    if missing:
        raise SourceError(f"unexpected result metadata: {what} lacks {', '.join(missing)}", raw=str(list(struct)))
    return [struct[name][0] for name in wanted]


def _googlesql_layout(fields: Sequence[Any]) -> tuple[int, dict[str, tuple[int, Any]], list[list[int]]]:
    """Where things are in the result metadata: the ChangeRecord column, its record kinds, and each struct's fields
    (positions of data change, column type, mod, heartbeat, child partitions and child partition fields)."""
    names = [f.name for f in fields]
    column = names.index("ChangeRecord") if "ChangeRecord" in names else (0 if len(names) == 1 else -1)
    if column < 0:
        raise SourceError("unexpected result metadata: no ChangeRecord column", raw=str(list(fields)))
    outer = _struct_of(fields[column].type_, "ChangeRecord")
    if not set(outer) & set(RECORD_KINDS):
        raise SourceError("unexpected result metadata: ChangeRecord holds no known record kind", raw=str(list(outer)))
    dcr, ct, md = list(range(13)), list(range(4)), list(range(3))  # unused unless the kind is in the metadata
    hb, cp, ch = [0], list(range(3)), list(range(2))
    if "data_change_record" in outer:
        dcr_struct = _struct_of(outer["data_change_record"][1], "data_change_record")
        dcr = _positions(dcr_struct, DATA_CHANGE_FIELDS, "data_change_record")
        ct = _positions(_struct_of(dcr_struct["column_types"][1], "column_types"), COLUMN_TYPE_FIELDS, "column_types")
        md = _positions(_struct_of(dcr_struct["mods"][1], "mods"), MOD_FIELDS, "mods")
    if "heartbeat_record" in outer:
        hb = _positions(_struct_of(outer["heartbeat_record"][1], "heartbeat_record"), HEARTBEAT_FIELDS, "heartbeat_record")
    if "child_partitions_record" in outer:
        cp_struct = _struct_of(outer["child_partitions_record"][1], "child_partitions_record")
        cp = _positions(cp_struct, CHILD_PARTITIONS_FIELDS, "child_partitions_record")
        ch = _positions(_struct_of(cp_struct["child_partitions"][1], "child_partitions"), CHILD_PARTITION_FIELDS, "child_partitions")
    return column, outer, [dcr, ct, md, hb, cp, ch]


def googlesql_mapper(fields: Sequence[Any]) -> RowMapper:
    column, outer, (dcr, ct, md, (hb_ts,), cp, ch) = _googlesql_layout(fields)
    unknown = [i for name, (i, _) in outer.items() if name not in RECORD_KINDS]
    dcr_at, hb_at, cp_at = (outer[kind][0] if kind in outer else -1 for kind in RECORD_KINDS)

    i_name, i_type, i_pk, i_pos = ct
    i_keys, i_new, i_old = md
    (i_commit, i_seq, i_txn, i_last, i_table, i_columns, i_mods, i_mod_type, i_capture, i_records, i_partitions,
     i_tag, i_system) = dcr  # fmt: skip
    columns_cache = ColumnTypesCache()

    def column_types(raw: Any) -> tuple[ColumnType, ...]:
        return tuple(build_column_type(c[i_name], c[i_type], c[i_pk], c[i_pos]) for c in as_list(raw, "column_types"))

    def data_change(s: list[Any]) -> DataChangeRecord:
        mods = tuple([build_mod(m[i_keys], m[i_new], m[i_old]) for m in as_list(s[i_mods], "mods")])
        return build_data_change(
            as_timestamp(s[i_commit], "commit_timestamp"), s[i_seq], s[i_txn], s[i_last], s[i_table],
            columns_cache.get(s[i_table], s[i_columns], column_types), mods, s[i_mod_type], s[i_capture],
            s[i_records], s[i_partitions], s[i_tag], s[i_system],
        )  # fmt: skip

    def child_partitions(s: list[Any]) -> ChildPartitionsRecord:
        i_token, i_parents = ch
        return ChildPartitionsRecord(
            start_timestamp=as_timestamp(s[cp[0]], "start_timestamp"),
            record_sequence=as_sequence(s[cp[1]], "record_sequence"),
            child_partitions=tuple(
                ChildPartition(as_text(c[i_token], "child_partitions.token"), as_parent_tokens(c[i_parents]))
                for c in as_list(s[cp[2]], "child_partitions")
            ),
        )

    def map_row(row: Sequence[Any]) -> list[ChangeRecord]:
        out: list[ChangeRecord] = []
        try:
            for element in as_list(row[column], "ChangeRecord"):
                produced = len(out)
                if dcr_at >= 0 and element[dcr_at]:
                    out.extend(data_change(s) for s in element[dcr_at])
                if hb_at >= 0 and element[hb_at]:
                    out.extend(HeartbeatRecord(as_timestamp(s[hb_ts], "timestamp")) for s in element[hb_at])
                if cp_at >= 0 and element[cp_at]:
                    out.extend(child_partitions(s) for s in element[cp_at])
                if len(out) == produced:
                    if any(element[i] for i in unknown):
                        raise Malformed("unknown record kind")
                    raise Malformed("change record element holds no record")
        except (Malformed, *SHAPE_ERRORS) as exc:
            raise row_error(exc, row) from None
        if out:
            return out
        raise empty_array(row)

    return map_row


__all__ = ["googlesql_mapper"]
