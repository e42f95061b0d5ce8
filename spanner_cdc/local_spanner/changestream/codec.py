"""JSON forms of the engine's state for the journal, and the replay of journal entries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from spanner_cdc.local_spanner.changestream.partitions import Partition, from_us, to_us
from spanner_cdc.local_spanner.changestream.streams import StreamState
from spanner_cdc.local_spanner.model import ColumnInfo, StreamDef, TableInfo

_ONE_US = timedelta(microseconds=1)


def table_to_json(table: TableInfo) -> dict[str, Any]:
    return {
        "name": table.name,
        "key_columns": list(table.key_columns),
        "columns": [[c.name, c.type, c.is_primary_key, c.ordinal_position] for c in table.columns],
    }


def table_from_json(data: dict[str, Any]) -> TableInfo:
    return TableInfo(
        name=data["name"],
        columns=tuple(ColumnInfo(name, type_, pk, ordinal) for name, type_, pk, ordinal in data["columns"]),
        key_columns=tuple(data["key_columns"]),
    )


def stream_to_json(stream: StreamDef) -> dict[str, Any]:
    assert stream.created_at is not None
    return {
        "name": stream.name,
        "tables": None
        if stream.tables is None
        else {t: None if cols is None else list(cols) for t, cols in stream.tables.items()},
        "value_capture_type": stream.value_capture_type,
        "retention_us": stream.retention // _ONE_US,
        "created_us": to_us(stream.created_at),
        "options": dict(stream.options),
    }


def stream_from_json(data: dict[str, Any]) -> StreamDef:
    tables = data["tables"]
    return StreamDef(
        name=data["name"],
        tables=None if tables is None else {t: None if cols is None else tuple(cols) for t, cols in tables.items()},
        value_capture_type=data["value_capture_type"],
        retention=timedelta(microseconds=data["retention_us"]),
        created_at=from_us(data["created_us"]),
        options=data["options"],
    )


def record_to_json(record: dict[str, Any]) -> dict[str, Any]:
    """A data change record without its commit timestamp (the journal entry carries it once)."""
    return {k: v for k, v in record.items() if k != "commit_timestamp"}


def apply(
    entry: dict[str, Any],
    dbs: dict[str, dict[str, TableInfo]],
    streams: dict[str, dict[str, StreamState]],
    period: int,
) -> None:
    """Replay one journal entry onto the engine's state."""
    op, db = entry["op"], entry["db"]
    if op == "tables":
        dbs[db] = {t["name"]: table_from_json(t) for t in entry["tables"]}
    elif op == "stream":
        definition = stream_from_json(entry["stream"])
        state = streams.setdefault(db, {}).get(definition.name)
        if state is None:
            created = to_us(definition.created_at)  # type: ignore[arg-type]
            streams[db][definition.name] = StreamState(db=db, definition=definition, created=created)
        else:
            state.definition = definition
    elif op == "drop":
        streams[db].pop(entry["name"]).dropped = True
    elif op == "reshape":
        state = streams[db][entry["stream"]]
        children = [
            Partition(token=token, lo=int(lo), hi=int(hi), start=entry["at"], parents=tuple(parents))
            for token, lo, hi, parents in entry["children"]
        ]
        state.partitions.reshape(entry["at"], entry["parents"], children)
        state.minted = len(state.partitions)
        state.last_reshape = entry["at"]
    elif op == "events":
        streams[db][entry["stream"]].events_done = entry["done"]
    elif op == "commit":
        ts = entry["ts"]
        commit_timestamp = from_us(ts)
        for name, built in entry["streams"].items():
            state = streams[db][name]
            for token, record in built:
                state.partitions.by_token[token].append(ts, {"commit_timestamp": commit_timestamp, **record}, period)
    else:
        raise ValueError(f"unknown changestream journal entry {op!r}")
