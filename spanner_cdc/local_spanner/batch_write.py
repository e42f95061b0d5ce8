"""BatchWrite on the local server: mutation groups committed as separate transactions with one group commit."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import grpc
from google.cloud.spanner_v1.types import BatchWriteResponse

from spanner_cdc.local_spanner.catalog import Catalog
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.values import pb_timestamp

_Response = BatchWriteResponse.pb()


def batch_write(catalog: Catalog, database: str, request: Any) -> Iterator[bytes]:
    """One response per mutation group, in request order: its own commit timestamp, or the status that refused it.

    As in Spanner, a refused group changes nothing and does not stop the others; the groups are applied in
    request order under the commit lock, and answered only after the journals hold all of them."""
    groups = [group.mutations for group in request.mutation_groups]
    outcomes = catalog.commit_groups(
        database, groups, request.request_options.transaction_tag, excluded=request.exclude_txn_from_change_streams
    )
    for index, outcome in enumerate(outcomes):
        response = _Response(indexes=[index])
        if isinstance(outcome, datetime):
            response.commit_timestamp.CopyFrom(pb_timestamp(outcome))
        else:
            response.status.code = _code(outcome)
            response.status.message = str(outcome)
        yield response.SerializeToString()


def _code(error: QueryError) -> int:
    status = getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN)
    return int(status.value[0])
