"""Statement results on the wire (rows, metadata with the begun transaction, DML stats) and typed request parameters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud.spanner_v1.types import ResultSetStats, TypeCode

from spanner_cdc.local_spanner import wire
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.record_encoding import metadata
from spanner_cdc.local_spanner.sql_eval import Typed
from spanner_cdc.local_spanner.values import normalize, pb_to_python

_RESULT_SET_STATS, _PARTIAL_RESULT_SET_STATS = b"\x1a", b"\x2a"  # field 3 of ResultSet, field 5 of PartialResultSet


@dataclass
class Result:
    columns: list[tuple[str, dict[str, Any]]]
    rows: list[list[Any]]
    begun: bytes = b""  # id of the transaction the request began
    read_timestamp: datetime | None = None  # returned when asked for
    row_count: int | None = None  # DML: rows changed
    lower_bound: bool = False  # partitioned DML reports a lower bound

    def metadata(self) -> bytes:
        return metadata(self.columns, self.begun, self.read_timestamp)

    def stats(self, partial: bool) -> bytes:
        if self.row_count is None:
            return b""
        message = ResultSetStats.pb()()
        if self.lower_bound:
            message.row_count_lower_bound = self.row_count
        else:
            message.row_count_exact = self.row_count
        body = message.SerializeToString()
        return (_PARTIAL_RESULT_SET_STATS if partial else _RESULT_SET_STATS) + wire.varint(len(body)) + body

    def result_set(self) -> bytes:
        return wire.result_set(self.metadata(), [[wire.encode(v) for v in row] for row in self.rows]) + self.stats(partial=False)


def json_type(type_pb: Any) -> dict[str, Any]:
    """A google.spanner.v1.Type message as the server's JSON type."""
    code = TypeCode(type_pb.code).name
    out: dict[str, Any] = {"code": code}
    if code == "ARRAY":
        out["array_element_type"] = json_type(type_pb.array_element_type)
    elif code == "STRUCT":
        raise QueryError("UNIMPLEMENTED", "STRUCT parameters are not supported by the local Spanner server")
    return out


def _untyped(value: Any) -> Typed:
    if value is None:
        return None, None
    if isinstance(value, bool):
        return {"code": "BOOL"}, value
    if isinstance(value, float):
        return {"code": "FLOAT64"}, value
    if isinstance(value, list):
        raise QueryError("INVALID_ARGUMENT", "An ARRAY parameter needs its type in param_types")
    return {"code": "STRING"}, value


def typed_params(params: Any, param_types: Any) -> dict[str, Typed]:
    """Request parameters as typed values in the stored encoding; without a type, as the JSON value suggests."""
    out: dict[str, Typed] = {}
    for name, value in params.fields.items():
        raw = pb_to_python(value)
        if name in param_types:
            type_ = json_type(param_types[name])
            out[name] = (type_, normalize(type_, raw, f"parameter {name}"))
        else:
            out[name] = _untyped(raw)
    return out


@dataclass(frozen=True)
class Selector:
    """A TransactionSelector naming a transaction by id (later statements of a batch run in the one begun)."""

    id: bytes

    def WhichOneof(self, _: str) -> str:  # noqa: N802 - the protobuf accessor this stands in for
        return "id"

    def HasField(self, name: str) -> bool:  # noqa: N802
        return name == "id"


@dataclass(frozen=True)
class BatchStatement:
    """One statement of an ExecuteBatchDmlRequest shaped like an ExecuteSqlRequest."""

    transaction: Any
    params: Any
    param_types: Any
    request_options: Any
