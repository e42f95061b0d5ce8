"""PartitionQuery / PartitionRead: partitions of one read-only transaction's result, whose union is exactly that result."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1.types import PartitionResponse
from sqlglot import exp

from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.sql_statements import Select
from spanner_cdc.local_spanner.statement_results import Result
from spanner_cdc.local_spanner.transactions import READ_ONLY, Transaction

DEFAULT_PARTITIONS = 4
MAX_PARTITIONS = 1000


def _token(index: int, count: int) -> bytes:
    return json.dumps({"part": index, "of": count}).encode()


def _parse(token: bytes) -> tuple[int, int]:
    try:
        fields = json.loads(token)
        index, count = int(fields["part"]), int(fields["of"])
    except (ValueError, KeyError, TypeError):
        raise QueryError("INVALID_ARGUMENT", "Invalid partition_token: use a token PartitionQuery or PartitionRead returned") from None
    if not 0 <= index < count:
        raise QueryError("INVALID_ARGUMENT", "Invalid partition_token: use a token PartitionQuery or PartitionRead returned")
    return index, count


class Partitions:
    """Row i of a result belongs to partition i mod n: the rows come in key order, the same in every partition's run."""

    @staticmethod
    def _response(request: Any, transaction: Transaction | None, begun: bytes, read_timestamp: datetime | None) -> bytes:
        if transaction is None or transaction.kind != READ_ONLY:
            raise QueryError("INVALID_ARGUMENT", "Partitioned reads and queries need a read-only transaction (begin one or pass its id)")
        wanted = request.partition_options.max_partitions or DEFAULT_PARTITIONS
        count = max(1, min(wanted, MAX_PARTITIONS))
        response = PartitionResponse.pb()()
        for index in range(count):
            response.partitions.add(partition_token=_token(index, count))
        if begun:
            response.transaction.id = begun
            if transaction.read_timestamp is not None:
                response.transaction.read_timestamp.FromDatetime(transaction.read_timestamp)
        return response.SerializeToString()

    def partition_query(self, request: Any, plan: Any, transaction: Transaction | None, begun: bytes, read_timestamp: datetime | None) -> bytes:
        self._check_query(plan)
        return self._response(request, transaction, begun, read_timestamp)

    def partition_read(self, request: Any, transaction: Transaction | None, begun: bytes, read_timestamp: datetime | None) -> bytes:
        return self._response(request, transaction, begun, read_timestamp)

    @staticmethod
    def _check_query(plan: Any) -> None:
        if not isinstance(plan, Select) or plan.source is None or plan.info_schema:
            raise QueryError("INVALID_ARGUMENT", "Query is not root partitionable: PartitionQuery takes a SELECT from one table")
        tree = plan.tree
        for clause in ("order", "limit", "offset"):
            if tree.args.get(clause) is not None:
                raise QueryError("INVALID_ARGUMENT", f"Query is not root partitionable since it has {clause.upper()} at its root")
        if any(node.find(exp.AggFunc) is not None for node in tree.expressions):
            raise QueryError("INVALID_ARGUMENT", "Query is not root partitionable since it aggregates (COUNT(*)) at its root")

    def query_part(self, request: Any, plan: Any) -> Any:
        _parse(request.partition_token)
        self._check_query(plan)
        return plan

    @staticmethod
    def part_of(token: bytes, result: Result) -> Result:
        index, count = _parse(token)
        result.rows = result.rows[index::count]
        return result

    def read_part(self, request: Any, read_all: Callable[[Any, Any], Result], database: Any) -> Result:
        if request.limit:
            raise QueryError("INVALID_ARGUMENT", "A partitioned read cannot have a limit")
        return self.part_of(request.partition_token, read_all(request, database))
