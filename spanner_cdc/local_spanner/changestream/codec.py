"""JSON forms of the engine's state for the journal, and the replay of journal entries."""

from __future__ import annotations

from collections.abc import Iterator
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


class CommitCodec:
    """Compact journal form of one commit's records: the fields shared by a transaction are stored once,
    and each distinct column_types list once (a "types" entry) and then by number."""

    def __init__(self) -> None:
        self._ids: dict[int, tuple[list[Any], int]] = {}
        self.types: list[list[Any]] = []

    def encode(self, db: str, ts: int, built: dict[str, list[tuple[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
        """Journal entries (new column types first) for `built`: stream -> [(token, record)]."""
        entries: list[dict[str, Any]] = []
        streams: dict[str, Any] = {}
        first: dict[str, Any] = {}
        for name, records in built.items():
            first = records[0][1]
            streams[name] = [
                first["number_of_records_in_transaction"],
                first["number_of_partitions_in_transaction"],
                [
                    [
                        token,
                        r["record_sequence"],
                        r["is_last_record_in_transaction_in_partition"],
                        r["table_name"],
                        self._type_id(r["column_types"], entries),
                        r["mod_type"],
                        r["value_capture_type"],
                        [[m["keys"], m["new_values"], m["old_values"]] for m in r["mods"]],
                    ]
                    for token, r in records
                ],
            ]
        commit = {
            "op": "commit",
            "ts": ts,
            "db": db,
            "tx": first["server_transaction_id"],
            "tag": first["transaction_tag"],
            "streams": streams,
        }
        if first["is_system_transaction"]:
            commit["sys"] = True
        return [*entries, commit]

    def _type_id(self, column_types: list[Any], entries: list[dict[str, Any]]) -> int:
        known = self._ids.get(id(column_types))
        if known is not None and known[0] is column_types:
            return known[1]
        number = len(self.types)
        self.types.append(column_types)
        self._ids[id(column_types)] = (column_types, number)
        entries.append({"op": "types", "db": "", "id": number, "column_types": column_types})
        return number

    def decode(self, entry: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """(stream, token, record) of a commit entry."""
        commit_timestamp = from_us(entry["ts"])
        for name, (n_records, n_partitions, records) in entry["streams"].items():
            for token, sequence, is_last, table, type_id, mod_type, capture, mods in records:
                yield (
                    name,
                    token,
                    {
                        "commit_timestamp": commit_timestamp,
                        "record_sequence": sequence,
                        "server_transaction_id": entry["tx"],
                        "is_last_record_in_transaction_in_partition": is_last,
                        "table_name": table,
                        "column_types": self.types[type_id],
                        "mods": [{"keys": k, "new_values": n, "old_values": o} for k, n, o in mods],
                        "mod_type": mod_type,
                        "value_capture_type": capture,
                        "number_of_records_in_transaction": n_records,
                        "number_of_partitions_in_transaction": n_partitions,
                        "transaction_tag": entry["tag"],
                        "is_system_transaction": entry.get("sys", False),
                    },
                )

    def learn(self, entry: dict[str, Any]) -> None:
        """Replay a "types" entry."""
        assert entry["id"] == len(self.types), "column types out of order in the journal"
        self.types.append(entry["column_types"])


def apply(
    entry: dict[str, Any],
    dbs: dict[str, dict[str, TableInfo]],
    streams: dict[str, dict[str, StreamState]],
    commits: CommitCodec,
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
    elif op == "types":
        commits.learn(entry)
    elif op == "commit":
        for name, token, record in commits.decode(entry):
            streams[db][name].partitions.by_token[token].append(entry["ts"], record, period)
    else:
        raise ValueError(f"unknown changestream journal entry {op!r}")
