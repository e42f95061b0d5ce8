"""google.spanner.v1.Spanner on the local server: sessions, transactions, commits and queries."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import grpc
from google.cloud.spanner_v1.types import (
    BatchCreateSessionsRequest,
    BatchCreateSessionsResponse,
    BeginTransactionRequest,
    CommitRequest,
    CommitResponse,
    CreateSessionRequest,
    DeleteSessionRequest,
    ExecuteSqlRequest,
    GetSessionRequest,
    ListSessionsRequest,
    ListSessionsResponse,
    ReadRequest,
    RollbackRequest,
    Session,
    Transaction,
)
from google.protobuf import empty_pb2, timestamp_pb2

from spanner_cdc.local_spanner import sql, wire
from spanner_cdc.local_spanner.catalog import Catalog, Database
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.queries import argument, literal_select, read_rows, table_query
from spanner_cdc.local_spanner.record_encoding import GOOGLESQL_METADATA, metadata, pg_metadata
from spanner_cdc.local_spanner.streaming import ChangeStreamSender, FaultInjector, InjectedFailure, Position
from spanner_cdc.local_spanner.values import parse_timestamp, pb_to_python

log = logging.getLogger(__name__)

SERVICE = "google.spanner.v1.Spanner"


def pb_timestamp(value: datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(value)
    return out


def abort(context: grpc.ServicerContext, error: Exception) -> None:
    """End the call with the error's status; a bug (not a QueryError) becomes INTERNAL and is logged."""
    if isinstance(error, QueryError):
        context.abort(getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN), str(error))
    log.exception("internal error in the local Spanner server", exc_info=error)
    context.abort(grpc.StatusCode.INTERNAL, f"local Spanner server bug: {type(error).__name__}: {error}")


@dataclass
class _Session:
    name: str
    database: str
    multiplexed: bool
    create_time: datetime
    labels: dict[str, str]
    creator_role: str


class SpannerService:
    """Handlers of the Spanner API; every handler returns serialized bytes (the hot path writes them directly)."""

    def __init__(self, catalog: Catalog, engine: Any, faults: FaultInjector) -> None:
        self.catalog = catalog
        self.engine = engine
        self.faults = faults
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._transactions: OrderedDict[bytes, str] = OrderedDict()  # id -> transaction tag
        self._plans: OrderedDict[tuple[str, bool], sql.Plan] = OrderedDict()
        self.active_reads = 0

    # -- sessions -------------------------------------------------------------------------------

    def _new_session(self, database: str, template: Any) -> bytes:
        self.catalog.database(database)
        name = f"{database}/sessions/{secrets.token_hex(12)}"
        session = _Session(name, database, template.multiplexed, self.catalog.now(), dict(template.labels), template.creator_role)
        with self._lock:
            self._sessions[name] = session
        return Session.pb().SerializeToString(self._session_pb(session))

    @staticmethod
    def _session_pb(session: _Session) -> Any:
        message = Session.pb()(name=session.name, multiplexed=session.multiplexed, creator_role=session.creator_role)
        message.labels.update(session.labels)
        message.create_time.CopyFrom(pb_timestamp(session.create_time))
        message.approximate_last_use_time.CopyFrom(pb_timestamp(session.create_time))
        return message

    def _session(self, name: str) -> _Session:
        """The session named; one unknown to this process (e.g. after a restart) is adopted if its database exists."""
        with self._lock:
            found = self._sessions.get(name)
        if found is not None:
            return found
        database, sep, _ = name.partition("/sessions/")
        if not sep:
            raise QueryError("INVALID_ARGUMENT", f"Invalid session name: {name}")
        try:
            self.catalog.database(database)
        except QueryError:
            raise QueryError("NOT_FOUND", f"Session not found: {name}") from None
        session = _Session(name, database, False, self.catalog.now(), {}, "")
        with self._lock:
            self._sessions[name] = session
        return session

    def create_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._new_session(request.database, request.session)

    def batch_create_sessions(self, request: Any, context: grpc.ServicerContext) -> bytes:
        response = BatchCreateSessionsResponse.pb()()
        for _ in range(max(1, request.session_count)):
            response.session.add().MergeFromString(self._new_session(request.database, request.session_template))
        return response.SerializeToString()

    def get_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            session = self._sessions.get(request.name)
        if session is None:
            raise QueryError("NOT_FOUND", f"Session not found: {request.name}")
        return self._session_pb(session).SerializeToString()

    def list_sessions(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            sessions = [s for s in self._sessions.values() if s.database == request.database]
        return ListSessionsResponse.pb()(sessions=[self._session_pb(s) for s in sessions]).SerializeToString()

    def delete_session(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self._sessions.pop(request.name, None)
        return empty_pb2.Empty().SerializeToString()

    # -- transactions ---------------------------------------------------------------------------

    def _new_transaction(self, tag: str) -> bytes:
        transaction_id = secrets.token_bytes(16)
        with self._lock:
            self._transactions[transaction_id] = tag
            while len(self._transactions) > 10000:  # abandoned read-only transactions
                self._transactions.popitem(last=False)
        return transaction_id

    def begin_transaction(self, request: Any, context: grpc.ServicerContext) -> bytes:
        self._session(request.session)
        transaction_id = self._new_transaction(request.request_options.transaction_tag)
        message = Transaction.pb()(id=transaction_id)
        if request.options.HasField("read_only"):
            message.read_timestamp.CopyFrom(pb_timestamp(self.catalog.now()))
        return message.SerializeToString()

    def commit(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        with self._lock:
            begun_tag = self._transactions.pop(request.transaction_id, "") if request.transaction_id else ""
        tag = request.request_options.transaction_tag or begun_tag
        commit_ts = self.catalog.commit(session.database, request.mutations, tag)
        response = CommitResponse.pb()()
        response.commit_timestamp.CopyFrom(pb_timestamp(commit_ts))
        if request.return_commit_stats:
            response.commit_stats.mutation_count = sum(
                len(getattr(m, m.WhichOneof("operation")).values) or 1 for m in request.mutations
            )
        return response.SerializeToString()

    def rollback(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self._transactions.pop(request.transaction_id, None)
        return empty_pb2.Empty().SerializeToString()

    # -- queries --------------------------------------------------------------------------------

    def _plan(self, text: str, postgres: bool) -> sql.Plan:
        key = (text, postgres)
        with self._lock:
            plan = self._plans.get(key)
        if plan is None:
            plan = sql.parse(text, postgres)
            with self._lock:
                self._plans[key] = plan
                if len(self._plans) > 512:
                    self._plans.popitem(last=False)
        return plan

    def _begin_if_asked(self, request: Any) -> bytes:
        selector = request.transaction
        if selector.HasField("begin"):
            return self._new_transaction(request.request_options.transaction_tag)
        return b""

    def execute_streaming_sql(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        plan = self._plan(request.sql, database.postgres)
        params = {name: pb_to_python(value) for name, value in request.params.fields.items()}
        transaction_id = self._begin_if_asked(request)
        if isinstance(plan, sql.ChangeStreamQuery):
            yield from self._change_stream(database, plan, params, request.resume_token, transaction_id, context)
            return
        columns, rows = self._small_query(database, plan, params)
        yield from _stream_rows(columns, rows, request.resume_token, transaction_id)

    def execute_sql(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        plan = self._plan(request.sql, database.postgres)
        params = {name: pb_to_python(value) for name, value in request.params.fields.items()}
        transaction_id = self._begin_if_asked(request)
        if isinstance(plan, sql.ChangeStreamQuery):
            raise QueryError("INVALID_ARGUMENT", "Change stream queries must use ExecuteStreamingSql")
        columns, rows = self._small_query(database, plan, params)
        return wire.result_set(metadata(columns, transaction_id), [[wire.encode(v) for v in row] for row in rows])

    def _read(self, request: Any) -> tuple[Any, list[list[Any]], bytes]:
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        if request.index:
            raise QueryError("UNIMPLEMENTED", f"Reads through index {request.index} are not supported by the local Spanner server: read the table")
        transaction_id = self._begin_if_asked(request)
        with self.catalog.lock:
            columns, rows = read_rows(database, request.table, list(request.columns), request.key_set, request.limit)
        return columns, rows, transaction_id

    def read(self, request: Any, context: grpc.ServicerContext) -> bytes:
        columns, rows, transaction_id = self._read(request)
        return wire.result_set(metadata(columns, transaction_id), [[wire.encode(v) for v in row] for row in rows])

    def streaming_read(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        columns, rows, transaction_id = self._read(request)
        yield from _stream_rows(columns, rows, request.resume_token, transaction_id)

    def _small_query(self, database: Database, plan: sql.Plan, params: dict[str, Any]) -> tuple[Any, list[list[Any]]]:
        if isinstance(plan, sql.LiteralSelect):
            return literal_select(plan)
        assert isinstance(plan, sql.TableQuery)
        with self.catalog.lock:
            return table_query(database, plan, params)

    def _change_stream(
        self, database: Database, plan: sql.ChangeStreamQuery, params: dict[str, Any], resume_token: bytes,
        transaction_id: bytes, context: grpc.ServicerContext,
    ) -> Iterator[bytes]:
        stream = database.schema.stream(plan.stream)
        function = f"spanner.read_json_{plan.stream}" if database.postgres else f"READ_{plan.stream}"
        if stream is None:
            raise QueryError("INVALID_ARGUMENT", f"Table-valued function not found: {function} (no change stream {plan.stream} in {database.name})")
        start, end, token, heartbeat = _stream_arguments(plan, params, function)
        resume = Position.parse(resume_token) if resume_token else None
        if resume is not None and resume.ts_us > 0 and resume.timestamp > start:
            start = resume.timestamp
        if database.postgres:
            encoded_metadata = pg_metadata(stream.name)
        else:
            encoded_metadata = GOOGLESQL_METADATA
        if transaction_id:  # ResultSetMetadata.transaction = Transaction(id=...), appended as one more field
            transaction = b"\x0a" + wire.varint(len(transaction_id)) + transaction_id
            encoded_metadata += b"\x12" + wire.varint(len(transaction)) + transaction

        stop = threading.Event()
        records = self.engine.query(database.name, stream.name, token, start, end, heartbeat, stop)
        context.add_callback(stop.set)
        sender = ChangeStreamSender(records, stop, database.postgres, encoded_metadata, resume, self.faults.take(), context.is_active)
        with self._lock:
            self.active_reads += 1
        try:
            yield from sender.messages()
        except InjectedFailure:
            self.faults.fired()
            log.info("%s %s: injected UNAVAILABLE", stream.name, token or "<initial>")
            context.abort(grpc.StatusCode.UNAVAILABLE, "injected failure: the stream was interrupted (resume with the last resume token)")
        finally:
            with self._lock:
                self.active_reads -= 1


def _stream_rows(columns: Any, rows: list[list[Any]], resume_token: bytes, transaction_id: bytes) -> Iterator[bytes]:
    """A materialised result as PartialResultSets; the resume token counts the rows sent."""
    skip = int(resume_token.decode()[1:]) if resume_token.startswith(b"r") else 0
    encoded_metadata = metadata(columns, transaction_id)
    batch: list[bytes] = []
    for index in range(skip, len(rows)):
        batch.extend(wire.encode(v) for v in rows[index])
        if len(batch) >= 1000:
            yield wire.partial_result_set(batch, f"r{index + 1}".encode(), encoded_metadata)
            batch, encoded_metadata = [], b""
    if batch or encoded_metadata:
        yield wire.partial_result_set(batch, f"r{len(rows)}".encode() if batch else b"", encoded_metadata)


def _stream_arguments(plan: sql.ChangeStreamQuery, params: dict[str, Any], function: str) -> tuple[datetime, datetime | None, str | None, int]:
    values = {name: argument(arg, params) for name, arg in plan.args.items()}
    for required in ("start_timestamp", "heartbeat_milliseconds"):
        if values.get(required) is None:
            raise QueryError("INVALID_ARGUMENT", f"{function}: {required} must not be NULL")
    if values.get("read_options") is not None:
        raise QueryError("INVALID_ARGUMENT", f"{function}: read_options must be NULL")

    def timestamp(name: str) -> datetime | None:
        value = values.get(name)
        if value is None:
            return None
        try:
            return parse_timestamp(str(value))
        except ValueError as exc:
            raise QueryError("INVALID_ARGUMENT", f"{function}: {name}: {exc}") from None

    start = timestamp("start_timestamp")
    assert start is not None
    try:
        heartbeat = int(values["heartbeat_milliseconds"])
    except (TypeError, ValueError):
        raise QueryError("INVALID_ARGUMENT", f"{function}: heartbeat_milliseconds must be an INT64, got {values['heartbeat_milliseconds']!r}") from None
    token = values.get("partition_token")
    return start, timestamp("end_timestamp"), None if token is None else str(token), heartbeat


def _is_abort(exc: Exception) -> bool:
    # context.abort() raises a plain Exception carrying the status; let it through untouched
    return type(exc) is Exception and not isinstance(exc, QueryError)


def handlers(service: SpannerService) -> grpc.GenericRpcHandler:
    def unary(method: Callable[[Any, grpc.ServicerContext], bytes], request_type: Any) -> grpc.RpcMethodHandler:
        def handle(request: Any, context: grpc.ServicerContext) -> bytes:
            try:
                return method(request, context)
            except Exception as exc:
                if _is_abort(exc):
                    raise
                abort(context, exc)
                raise  # unreachable: abort raises

        return grpc.unary_unary_rpc_method_handler(handle, request_deserializer=request_type.pb().FromString)

    def streaming(method: Callable[[Any, grpc.ServicerContext], Iterator[bytes]], request_type: Any) -> grpc.RpcMethodHandler:
        def handle(request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
            try:
                yield from method(request, context)
            except Exception as exc:
                if _is_abort(exc):
                    raise
                abort(context, exc)

        return grpc.unary_stream_rpc_method_handler(handle, request_deserializer=request_type.pb().FromString)

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "CreateSession": unary(service.create_session, CreateSessionRequest),
            "BatchCreateSessions": unary(service.batch_create_sessions, BatchCreateSessionsRequest),
            "GetSession": unary(service.get_session, GetSessionRequest),
            "ListSessions": unary(service.list_sessions, ListSessionsRequest),
            "DeleteSession": unary(service.delete_session, DeleteSessionRequest),
            "BeginTransaction": unary(service.begin_transaction, BeginTransactionRequest),
            "Commit": unary(service.commit, CommitRequest),
            "Rollback": unary(service.rollback, RollbackRequest),
            "ExecuteSql": unary(service.execute_sql, ExecuteSqlRequest),
            "ExecuteStreamingSql": streaming(service.execute_streaming_sql, ExecuteSqlRequest),
            "Read": unary(service.read, ReadRequest),
            "StreamingRead": streaming(service.streaming_read, ReadRequest),
        },
    )
