"""Test helper: read a change stream with the bare google-cloud-spanner client, every partition, as dicts; compare with a ground truth."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1 import param_types
from google.cloud.spanner_v1.data_types import JsonObject

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.workload_schema import TABLES_BY_NAME, comparable

GOOGLESQL_QUERY = ("SELECT ChangeRecord FROM READ_{stream}(start_timestamp => @start, end_timestamp => @end, "
                   "partition_token => @token, heartbeat_milliseconds => @heartbeat)")
POSTGRESQL_QUERY = "SELECT * FROM spanner.read_json_{stream}($1, $2, $3, $4, null)"


def _named(value: Any, type_: Any) -> Any:
    """A decoded value with STRUCTs turned into dicts by the field names in the result metadata."""
    code = type_.code.name if hasattr(type_.code, "name") else type_.code
    if value is None:
        return None
    if code in ("ARRAY", 8):
        return [_named(v, type_.array_element_type) for v in value]
    if code in ("STRUCT", 9):
        return {f.name: _named(v, f.type_) for f, v in zip(type_.struct_type.fields, value, strict=True)}
    if isinstance(value, JsonObject):
        return list(value._array_value) if value._is_array else dict(value)
    return value


def query_partition(database: Any, stream: str, start: datetime, end: datetime | None, token: str | None,
                    postgres: bool, heartbeat_ms: int = 1000) -> list[dict[str, Any]]:
    """One change stream query; each record as {"data_change_record": {...}} etc."""
    if postgres:
        sql = POSTGRESQL_QUERY.format(stream=stream)
        params = {"p1": start, "p2": end, "p3": token, "p4": heartbeat_ms}
        types = {"p1": param_types.TIMESTAMP, "p2": param_types.TIMESTAMP, "p3": param_types.STRING, "p4": param_types.INT64}
    else:
        sql = GOOGLESQL_QUERY.format(stream=stream)
        params = {"start": start, "end": end, "token": token, "heartbeat": heartbeat_ms}
        types = {"start": param_types.TIMESTAMP, "end": param_types.TIMESTAMP, "token": param_types.STRING, "heartbeat": param_types.INT64}
    records: list[dict[str, Any]] = []
    with database.snapshot() as snapshot:
        results = snapshot.execute_sql(sql, params=params, param_types=types, timeout=None)
        for row in results:
            if postgres:
                records.append(dict(row[0]))
                continue
            for element in _named(row[0], results.fields[0].type_):
                kinds = {k: v for k, v in element.items() if v}
                assert len(kinds) == 1, element
                ((kind, (body,)),) = kinds.items()
                records.append({kind: body})
    return records


def read_stream(database: Any, stream: str, start: datetime, end: datetime, postgres: bool = False) -> dict[str, list[dict[str, Any]]]:
    """Every partition's records (root query first, then children once all their parents were read), by token."""
    roots = query_partition(database, stream, start, end, None, postgres)
    pending: deque[tuple[str, Any]] = deque()
    parents_left: dict[str, set[str]] = {}
    for record in roots:
        for child in record["child_partitions_record"]["child_partitions"]:
            pending.append((child["token"], record["child_partitions_record"]["start_timestamp"]))
    by_token: dict[str, list[dict[str, Any]]] = {}
    while pending:
        token, child_start = pending.popleft()
        if token in by_token:
            continue
        records = query_partition(database, stream, _as_datetime(child_start), end, token, postgres)
        by_token[token] = records
        for record in records:
            if "child_partitions_record" not in record:
                continue
            body = record["child_partitions_record"]
            for child in body["child_partitions"]:
                waiting = parents_left.setdefault(child["token"], set(child["parent_partition_tokens"]))
                waiting.discard(token)
                if not waiting:
                    pending.append((child["token"], body["start_timestamp"]))
    return by_token


def _as_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def data_records(by_token: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Data change records of all partitions in commit order (timestamp, transaction, sequence)."""
    records = [r["data_change_record"] for rs in by_token.values() for r in rs if "data_change_record" in r]
    return sorted(records, key=lambda r: (_as_datetime(r["commit_timestamp"]), r["server_transaction_id"], r["record_sequence"]))


def mods(by_token: dict[str, list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """(table, mod type, keys, new values, old values, tag) of every mod, in commit order."""
    return [
        (r["table_name"], r["mod_type"], m["keys"], m["new_values"], m["old_values"], r["transaction_tag"])
        for r in data_records(by_token)
        for m in r["mods"]
    ]


def truth_key(row: workload.GroundTruthRow) -> tuple[Any, ...]:
    types = {c.name: c.type for c in (*TABLES_BY_NAME[row.table].keys, *TABLES_BY_NAME[row.table].values)}
    return (
        row.commit_timestamp,
        row.table,
        row.mod_type,
        json.dumps({k: comparable(types[k], v) for k, v in row.keys.items()}, sort_keys=True, default=str),
        json.dumps({k: comparable(types[k], v) for k, v in row.new_values.items()}, sort_keys=True, default=str),
        json.dumps({k: comparable(types[k], v) for k, v in row.old_values.items()}, sort_keys=True, default=str),
        row.transaction_tag,
    )


def record_keys(record: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    types = {c["name"]: c["type"] for c in record["column_types"]}
    for mod in record["mods"]:
        yield (
            record["commit_timestamp"],
            record["table_name"],
            record["mod_type"],
            *(
                json.dumps({k: comparable(types[k], v) for k, v in mod[part].items()}, sort_keys=True, default=str)
                for part in ("keys", "new_values", "old_values")
            ),
            record["transaction_tag"],
        )
