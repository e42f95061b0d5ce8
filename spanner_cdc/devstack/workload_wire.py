"""The workload's BatchWrite requests as raw google.spanner.v1 protobufs, sent through the client's GAPIC layer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Why not the client's MutationGroups: it builds every value through proto-plus wrappers, which cost more CPU
# per transaction than the server spends committing it. The values here are already in their wire text
# (workload_schema.encode), so a protobuf ListValue takes them as they are.


def wire_value(value: Any) -> Any:
    """An encoded value (workload_schema.encode) as google.protobuf.Value takes it: non-finite floats as text."""
    if type(value) is float and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if type(value) is list:
        return [wire_value(v) for v in value]
    return value


def fill_mutation(
    mutation: Any, operation: str, table: str, key_names: Sequence[str], key: Sequence[Any],
    columns: Sequence[str], values: Sequence[Any],
) -> None:  # fmt: skip
    """Fill an empty google.spanner.v1.Mutation: `operation` (insert, update, insert_or_update, replace or delete)
    of the row `key` with `values` of `columns`; keys and values in wire encoding."""
    if operation == "delete":
        mutation.delete.table = table
        mutation.delete.key_set.keys.add().extend([wire_value(v) for v in key])
        return
    write = getattr(mutation, operation)
    write.table = table
    write.columns.extend(key_names)
    write.columns.extend(columns)
    write.values.add().extend([wire_value(v) for v in (*key, *values)])


@dataclass(frozen=True)
class Outcome:
    """One BatchWriteResponse: the indexes of its mutation groups and their commit timestamp, or the refusal."""

    indexes: tuple[int, ...]
    commit_timestamp: datetime | None
    code: int
    message: str


class BatchWriter:
    """BatchWrite requests on one session of its own (created here, deleted by close())."""

    def __init__(self, database: Any) -> None:
        from google.cloud.spanner_v1.types import BatchWriteRequest, BatchWriteResponse

        self._request_type, self._response_type = BatchWriteRequest, BatchWriteResponse
        self._api = database.spanner_api
        self._metadata = [("google-cloud-resource-prefix", database.name)]
        self._session = self._api.create_session(database=database.name, metadata=self._metadata).name

    def request(self, tag: str) -> Any:
        """An empty raw BatchWriteRequest on the session: add groups with `request.mutation_groups.add()`."""
        request = self._request_type.pb()(session=self._session)
        if tag:
            request.request_options.transaction_tag = tag
        return request

    def send(self, request: Any) -> list[Outcome]:
        """Send the request; the responses, as they arrive."""
        responses = self._api.batch_write(request=self._request_type.wrap(request), metadata=self._metadata)
        out = []
        for response in responses:
            raw = self._response_type.pb(response)
            committed = raw.commit_timestamp.ToDatetime(tzinfo=UTC) if raw.HasField("commit_timestamp") else None
            out.append(Outcome(tuple(raw.indexes), committed, raw.status.code, raw.status.message))
        return out

    def close(self) -> None:
        self._api.delete_session(name=self._session, metadata=self._metadata)
