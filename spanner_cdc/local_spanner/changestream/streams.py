"""Change stream definitions and the engine's state of one stream."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from spanner_cdc.local_spanner.changestream.partitions import PartitionSet
from spanner_cdc.local_spanner.model import QueryError, StreamDef, TableInfo
from spanner_cdc.names import VALUE_CAPTURE_TYPES


@dataclass(eq=False)
class StreamState:
    """One change stream of one database: its definition and partitions."""

    db: str
    definition: StreamDef
    created: int  # µs
    partitions: PartitionSet = field(default_factory=PartitionSet)
    minted: int = 0  # partitions created so far, numbers the next token
    events_done: int = 0  # time-based policy events consumed
    last_reshape: int = 0  # µs of the latest split or merge
    dropped: bool = False


def same_definition(a: StreamDef, b: StreamDef) -> bool:
    """Equal apart from the creation time (a replayed CREATE after a restart)."""

    def key(d: StreamDef) -> tuple[object, ...]:
        tables = None if d.tables is None else {t: None if c is None else tuple(c) for t, c in d.tables.items()}
        return (tables, d.value_capture_type, d.retention, dict(d.options))

    return key(a) == key(b)


def validate(stream: StreamDef, tables: Mapping[str, TableInfo]) -> None:
    if stream.value_capture_type not in VALUE_CAPTURE_TYPES:
        raise QueryError(
            "INVALID_ARGUMENT",
            f"value_capture_type={stream.value_capture_type!r}: expected one of {', '.join(VALUE_CAPTURE_TYPES)}",
        )
    for table, columns in (stream.tables or {}).items():
        if table not in tables:
            raise QueryError("NOT_FOUND", f"change stream {stream.name}: table {table} does not exist")
        known = {c.name for c in tables[table].columns}
        for column in columns or ():
            if column not in known:
                raise QueryError("NOT_FOUND", f"change stream {stream.name}: column {table}.{column} does not exist")
