"""google.spanner.v1.Spanner on the local server: sessions, transactions, commits and queries."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import grpc
from google.cloud.spanner_v1.types import (
    BatchCreateSessionsRequest,
    BatchWriteRequest,
    BeginTransactionRequest,
    CommitRequest,
    CommitResponse,
    CreateSessionRequest,
    DeleteSessionRequest,
    ExecuteBatchDmlRequest,
    ExecuteBatchDmlResponse,
    ExecuteSqlRequest,
    GetSessionRequest,
    ListSessionsRequest,
    PartitionQueryRequest,
    PartitionReadRequest,
    ReadRequest,
    RollbackRequest,
)
from google.cloud.spanner_v1.types import Transaction as TransactionPb
from google.protobuf import empty_pb2

from spanner_cdc.local_spanner import sql, wire
from spanner_cdc.local_spanner.batch_write import batch_write
from spanner_cdc.local_spanner.catalog import Catalog, Database
from spanner_cdc.local_spanner.catalog_queries import stream_arguments
from spanner_cdc.local_spanner.dml import run_dml
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.mutations import MutationSet
from spanner_cdc.local_spanner.query_partitions import Partitions
from spanner_cdc.local_spanner.query_run import read_rows, run_select
from spanner_cdc.local_spanner.record_bytes import EncodedRecords
from spanner_cdc.local_spanner.record_encoding import GOOGLESQL_METADATA, RecordEncoder, pg_metadata
from spanner_cdc.local_spanner.record_proto import ProtoRecordEncoder, proto_metadata
from spanner_cdc.local_spanner.request_log import RequestLog
from spanner_cdc.local_spanner.sessions import Sessions
from spanner_cdc.local_spanner.sql_statements import Dml, Select
from spanner_cdc.local_spanner.statement_results import BatchStatement, Result, Selector, typed_params
from spanner_cdc.local_spanner.streaming import ChangeStreamSender, FaultInjector, InjectedFailure, Position
from spanner_cdc.local_spanner.transactions import (
    PARTITIONED_DML,
    READ_ONLY,
    READ_WRITE,
    ReadView,
    Transaction,
    excluded_from_change_streams,
    read_timestamp,
)
from spanner_cdc.local_spanner.values import pb_timestamp, pb_to_python

log = logging.getLogger(__name__)

SERVICE = "google.spanner.v1.Spanner"


def abort(context: grpc.ServicerContext, error: Exception) -> None:
    """End the call with the error's status; a bug (not a QueryError) becomes INTERNAL and is logged."""
    if isinstance(error, QueryError):
        context.abort(getattr(grpc.StatusCode, error.code, grpc.StatusCode.UNKNOWN), str(error))
    log.exception("internal error in the local Spanner server", exc_info=error)
    context.abort(grpc.StatusCode.INTERNAL, f"local Spanner server bug: {type(error).__name__}: {error}")


class SpannerService:
    """Handlers of the Spanner API; every handler returns serialized bytes (the hot path writes them directly)."""

    def __init__(self, catalog: Catalog, engine: Any, faults: FaultInjector) -> None:
        self.catalog = catalog
        self.engine = engine
        self.faults = faults
        self._encoded = {postgres: EncodedRecords() for postgres in (False, True)}  # by dialect: data change rows
        self._lock = threading.Lock()
        self.sessions = Sessions(catalog)
        self._session = self.sessions.session
        self._transactions: OrderedDict[bytes, Transaction] = OrderedDict()
        self.partitions = Partitions()
        self._plans: OrderedDict[tuple[str, bool], sql.Plan] = OrderedDict()
        self.active_reads = 0
        self.requests = RequestLog()  # the read options asked for (control API: Requests)

    # -- transactions ---------------------------------------------------------------------------

    def _register(self, transaction: Transaction) -> Transaction:
        with self._lock:
            self._transactions[transaction.id] = transaction
            while len(self._transactions) > 10000:  # abandoned transactions
                self._transactions.popitem(last=False)
        return transaction

    def _read_timestamp(self, database: Database, read_only: Any) -> datetime:
        """The snapshot's timestamp; one in the future is waited for, as Spanner waits until it can serve it."""
        assert self.catalog.clock is not None
        clock = self.catalog.clock
        with self.catalog.lock:
            timestamp = read_timestamp(read_only, database, clock.now(), clock.last_commit_timestamp)
        while not clock.sleep_until(timestamp):
            pass
        return timestamp

    def _begin(self, database: Database, options: Any, tag: str) -> Transaction:
        kind = options.WhichOneof("mode") or READ_WRITE
        transaction = Transaction(secrets.token_bytes(16), kind, tag, excluded=excluded_from_change_streams(options))
        if kind == READ_ONLY:
            transaction.read_timestamp = self._read_timestamp(database, options.read_only)
        return self._register(transaction)

    def begin_transaction(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        transaction = self._begin(database, request.options, request.request_options.transaction_tag)
        message = TransactionPb.pb()(id=transaction.id)
        if transaction.read_timestamp is not None:
            message.read_timestamp.CopyFrom(pb_timestamp(transaction.read_timestamp))
        return message.SerializeToString()

    def _selected(self, request: Any, database: Database) -> tuple[Transaction | None, bytes, datetime | None]:
        """The transaction a request runs in, the id it began (to return) and the read timestamp to return."""
        selector = request.transaction
        which = selector.WhichOneof("selector")
        if which == "begin":
            transaction = self._begin(database, selector.begin, request.request_options.transaction_tag)
            return transaction, transaction.id, transaction.read_timestamp
        if which == "id":
            with self._lock:  # an id unknown here (a restart) reads as a strong single-use transaction did before
                return self._transactions.get(selector.id), b"", None
        if which == "single_use":
            options = selector.single_use
            excluded_from_change_streams(options)
            if options.WhichOneof("mode") != READ_ONLY:
                raise QueryError("INVALID_ARGUMENT", "A single-use transaction must be read-only here; begin a read-write transaction")
            timestamp = self._read_timestamp(database, options.read_only)
            returned = timestamp if options.read_only.return_read_timestamp else None
            return Transaction(b"", READ_ONLY, read_timestamp=timestamp), b"", returned
        return None, b"", None

    def _note(self, method: str, request: Any, database: str) -> None:
        """Record the request's read options (and refuse directed reads in a read-write transaction, as Spanner does)."""
        selector = request.transaction
        which = selector.WhichOneof("selector")
        if which == "begin":
            read_write = selector.begin.WhichOneof("mode") != READ_ONLY
        elif which == "id":
            with self._lock:
                known = self._transactions.get(selector.id)
            read_write = known is not None and known.kind != READ_ONLY
        else:
            read_write = False
        self.requests.record(method, request, database, read_write)

    def _view(self, database: Database, transaction: Transaction | None) -> ReadView:
        """Called under the catalog lock: a read-write transaction records what it reads as of the newest commit."""
        if transaction is None:
            return ReadView(database)
        if transaction.kind == READ_ONLY:
            return ReadView(database, transaction.read_timestamp)
        assert self.catalog.clock is not None
        return ReadView(database, None, transaction, self.catalog.clock.last_commit_timestamp)

    def commit(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        with self._lock:
            transaction = self._transactions.pop(request.transaction_id, None) if request.transaction_id else None
        tag = request.request_options.transaction_tag or (transaction.tag if transaction else "")
        prepared = transaction.changes if transaction is not None and transaction.kind == READ_WRITE else None
        check = transaction.check_conflicts if transaction is not None and (transaction.reads or transaction.scans) else None
        if transaction is not None:
            excluded = transaction.excluded
        else:  # Commit with single_use_transaction (the client's batch): its options come with it
            excluded = request.HasField("single_use_transaction") and excluded_from_change_streams(request.single_use_transaction)
        commit_ts = self.catalog.commit(session.database, request.mutations, tag, prepared, check, excluded=excluded)
        if not request.return_commit_stats:  # the common answer, written directly (every commit's last step)
            return wire.commit_response(commit_ts)
        response = CommitResponse.pb()()
        response.commit_timestamp.CopyFrom(pb_timestamp(commit_ts))
        response.commit_stats.mutation_count = sum(len(getattr(m, m.WhichOneof("operation")).values) or 1 for m in request.mutations)
        return response.SerializeToString()

    def batch_write(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        return batch_write(self.catalog, self._session(request.session).database, request)

    def rollback(self, request: Any, context: grpc.ServicerContext) -> bytes:
        with self._lock:
            self._transactions.pop(request.transaction_id, None)
        return empty_pb2.Empty().SerializeToString()

    # -- queries and DML ------------------------------------------------------------------------

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

    def _statement(self, request: Any, database: Database, plan: sql.Plan, seqno: int) -> Result:
        """Run a SELECT or DML statement in the request's transaction."""
        transaction, begun, returned_ts = self._selected(request, database)
        params = typed_params(request.params, request.param_types)
        if isinstance(plan, Dml):
            return self._dml(database, plan, params, transaction, seqno, begun)
        assert isinstance(plan, Select)
        with self.catalog.lock:
            view = self._view(database, transaction)
            assert self.catalog.clock is not None
            columns, rows = run_select(plan, view, params, view.timestamp or self.catalog.clock.now())
        return Result(columns, rows, begun, returned_ts)

    def _dml(self, database: Database, plan: Dml, params: dict[str, Any], transaction: Transaction | None, seqno: int, begun: bytes) -> Result:
        if transaction is None or transaction.kind == READ_ONLY:
            raise QueryError("INVALID_ARGUMENT", "DML statements can only be performed in a read-write or partitioned DML transaction")
        if seqno and seqno in transaction.dml_results:  # the client re-sent a statement it already ran
            return transaction.dml_results[seqno]
        partitioned = transaction.kind == PARTITIONED_DML
        if partitioned and plan.kind == "INSERT":
            raise QueryError("INVALID_ARGUMENT", "Partitioned DML supports UPDATE and DELETE only")
        with self.catalog.lock:
            if transaction.changes is None:
                transaction.changes = MutationSet(database.schema, database.data)
            outcome = run_dml(plan, self._view(database, transaction), transaction.changes, params)
        if partitioned:  # each partitioned DML statement commits on its own
            self.catalog.commit(database.name, [], transaction.tag, transaction.changes, excluded=transaction.excluded)
            transaction.changes = None
        result = Result(outcome.columns, outcome.rows, begun, None, outcome.row_count, partitioned)
        if seqno:
            transaction.dml_results[seqno] = result
        return result

    def execute_streaming_sql(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        session = self._session(request.session)
        self._note("ExecuteStreamingSql", request, session.database)
        database = self.catalog.database(session.database)
        plan = self._plan(request.sql, database.postgres)
        if request.partition_token:
            plan = self.partitions.query_part(request, plan)
        if isinstance(plan, sql.ChangeStreamQuery):
            _check_strong_single_use(request.transaction)
            params = {name: pb_to_python(value) for name, value in request.params.fields.items()}
            yield from self._change_stream(database, plan, params, request.resume_token, context)
            return
        result = self._statement(request, database, plan, request.seqno)
        if request.partition_token:
            result = self.partitions.part_of(request.partition_token, result)
        yield from _stream_rows(result, request.resume_token)

    def execute_sql(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        self._note("ExecuteSql", request, session.database)
        database = self.catalog.database(session.database)
        plan = self._plan(request.sql, database.postgres)
        if isinstance(plan, sql.ChangeStreamQuery):
            raise QueryError("INVALID_ARGUMENT", "Change stream queries must use ExecuteStreamingSql")
        if request.partition_token:
            plan = self.partitions.query_part(request, plan)
        result = self._statement(request, database, plan, request.seqno)
        if request.partition_token:
            result = self.partitions.part_of(request.partition_token, result)
        return result.result_set()

    def execute_batch_dml(self, request: Any, context: grpc.ServicerContext) -> bytes:
        """Statements run in order until one fails; the response has a result set per success and the failure's status."""
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        response = ExecuteBatchDmlResponse.pb()()
        selector: Any = request.transaction
        for number, statement in enumerate(request.statements):
            try:
                plan = self._plan(statement.sql, database.postgres)
                if not isinstance(plan, Dml):
                    raise QueryError("INVALID_ARGUMENT", f"Statement {number} of ExecuteBatchDml is not a DML statement")
                call = BatchStatement(selector, statement.params, statement.param_types, request.request_options)
                result = self._statement(call, database, plan, request.seqno * 1000 + number + 1 if request.seqno else 0)
            except QueryError as error:
                if number == 0:
                    raise
                response.status.code = getattr(grpc.StatusCode, error.code).value[0]
                response.status.message = str(error)
                break
            response.result_sets.add().MergeFromString(result.result_set())
            if result.begun:  # later statements run in the transaction the first one began
                selector = Selector(result.begun)
        return response.SerializeToString()

    def _read(self, request: Any) -> Result:
        session = self._session(request.session)
        self._note("Read", request, session.database)
        database = self.catalog.database(session.database)
        if request.partition_token:
            return self.partitions.read_part(request, self._read_all, database)
        return self._read_all(request, database)

    def _read_all(self, request: Any, database: Database) -> Result:
        transaction, begun, returned_ts = self._selected(request, database)
        with self.catalog.lock:
            view = self._view(database, transaction)
            columns, rows = read_rows(view, request.table, list(request.columns), request.key_set, request.limit, request.index)
        return Result(columns, rows, begun, returned_ts)

    def read(self, request: Any, context: grpc.ServicerContext) -> bytes:
        return self._read(request).result_set()

    def streaming_read(self, request: Any, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from _stream_rows(self._read(request), request.resume_token)

    def partition_query(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        self._note("PartitionQuery", request, session.database)
        database = self.catalog.database(session.database)
        plan = self._plan(request.sql, database.postgres)
        transaction, begun, returned_ts = self._selected(request, database)
        return self.partitions.partition_query(request, plan, transaction, begun, returned_ts)

    def partition_read(self, request: Any, context: grpc.ServicerContext) -> bytes:
        session = self._session(request.session)
        database = self.catalog.database(session.database)
        transaction, begun, returned_ts = self._selected(request, database)
        return self.partitions.partition_read(request, transaction, begun, returned_ts)

    def _change_stream(
        self, database: Database, plan: sql.ChangeStreamQuery, params: dict[str, Any], resume_token: bytes,
        context: grpc.ServicerContext,
    ) -> Iterator[bytes]:
        stream = database.schema.stream(plan.stream)
        function = f"spanner.{plan.function}{plan.stream}" if database.postgres else f"READ_{plan.stream}"
        if stream is None and database.postgres:  # PostgreSQL looks the function up by name and argument types
            raise QueryError("NOT_FOUND", f"function {function}(timestamp with time zone, timestamp with time zone, text, bigint, unknown) "
                                          f"does not exist (no change stream {plan.stream} in {database.name})")  # fmt: skip
        if stream is None:
            raise QueryError("INVALID_ARGUMENT", f"Table-valued function not found: {function} (no change stream {plan.stream} in {database.name})")
        mutable = stream.mutable_key_range
        if database.postgres and plan.function != ("read_proto_bytes_" if mutable else "read_json_"):
            expected = f"spanner.{'read_proto_bytes_' if mutable else 'read_json_'}{plan.stream}"
            mode = "MUTABLE_KEY_RANGE" if mutable else "IMMUTABLE_KEY_RANGE"
            raise QueryError("INVALID_ARGUMENT", f"Table-valued function not found: {function} (change stream {plan.stream} is in partition_mode {mode}: read it with {expected})")
        start, end, token, heartbeat = stream_arguments(plan, params, function)
        resume = Position.parse(resume_token) if resume_token else None
        if resume is not None and resume.ts_us > 0 and resume.timestamp > start:
            start = resume.timestamp
        encoder: RecordEncoder | None = None
        if mutable:
            encoded_metadata, encoder = proto_metadata(stream.name, database.postgres), ProtoRecordEncoder(database.postgres)
        elif database.postgres:
            encoded_metadata = pg_metadata(stream.name)
        else:
            encoded_metadata = GOOGLESQL_METADATA

        stop = threading.Event()
        records = self.engine.query(database.name, stream.name, token, start, end, heartbeat, stop)
        context.add_callback(stop.set)
        sender = ChangeStreamSender(
            records, stop, database.postgres, encoded_metadata, resume, self.faults.take(), context.is_active, encoder,
            None if encoder is not None else self._encoded[database.postgres],
        )
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


def _stream_rows(result: Result, resume_token: bytes) -> Iterator[bytes]:
    """A materialised result as PartialResultSets; the resume token counts the rows sent; DML stats in the last one."""
    skip = int(resume_token.decode()[1:]) if resume_token.startswith(b"r") else 0
    encoded_metadata = result.metadata()
    rows = result.rows
    batch: list[bytes] = []
    for index in range(skip, len(rows)):
        batch.extend(wire.encode(v) for v in rows[index])
        if len(batch) >= 1000 and index + 1 < len(rows):
            yield wire.partial_result_set(batch, f"r{index + 1}".encode(), encoded_metadata)
            batch, encoded_metadata = [], b""
    last = wire.partial_result_set(batch, f"r{len(rows)}".encode() if batch else b"", encoded_metadata)
    yield last + result.stats(partial=True)


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
            "CreateSession": unary(service.sessions.create_session, CreateSessionRequest),
            "BatchCreateSessions": unary(service.sessions.batch_create_sessions, BatchCreateSessionsRequest),
            "GetSession": unary(service.sessions.get_session, GetSessionRequest),
            "ListSessions": unary(service.sessions.list_sessions, ListSessionsRequest),
            "DeleteSession": unary(service.sessions.delete_session, DeleteSessionRequest),
            "BeginTransaction": unary(service.begin_transaction, BeginTransactionRequest),
            "Commit": unary(service.commit, CommitRequest),
            "Rollback": unary(service.rollback, RollbackRequest),
            "ExecuteSql": unary(service.execute_sql, ExecuteSqlRequest),
            "ExecuteStreamingSql": streaming(service.execute_streaming_sql, ExecuteSqlRequest),
            "Read": unary(service.read, ReadRequest),
            "StreamingRead": streaming(service.streaming_read, ReadRequest),
            "ExecuteBatchDml": unary(service.execute_batch_dml, ExecuteBatchDmlRequest),
            "PartitionQuery": unary(service.partition_query, PartitionQueryRequest),
            "PartitionRead": unary(service.partition_read, PartitionReadRequest),
            "BatchWrite": streaming(service.batch_write, BatchWriteRequest),
        },
    )


_NOT_STRONG_SINGLE_USE = (
    "Change stream queries are not supported for multi use transactions. Change stream queries must be strong reads "
    "executed via single use transactions using the ExecuteStreamingSql API."
)


def _check_strong_single_use(selector: Any) -> None:
    """Spanner serves a change stream query only in a strong single-use read-only transaction (or none named, which
    is one): a transaction begun or named, or a stale read, is INVALID_ARGUMENT, in the emulator's words."""
    which = selector.WhichOneof("selector")
    if which is None:
        return
    if which != "single_use" or selector.single_use.WhichOneof("mode") != READ_ONLY:
        raise QueryError("INVALID_ARGUMENT", _NOT_STRONG_SINGLE_USE)
    bound = selector.single_use.read_only.WhichOneof("timestamp_bound")
    if bound not in (None, "strong"):
        raise QueryError("INVALID_ARGUMENT", _NOT_STRONG_SINGLE_USE)
