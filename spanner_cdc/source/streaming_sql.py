"""Change stream queries sent through the client's generated Spanner API, without the layers its snapshot wraps around each call."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from google.cloud.spanner_v1 import (
    DirectedReadOptions,
    ExecuteSqlRequest,
    RequestOptions,
    TransactionOptions,
    TransactionSelector,
)
from google.cloud.spanner_v1._helpers import _make_value_pb
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.protobuf.struct_pb2 import Struct

from spanner_cdc.source.queries import ChangeStreamQuery

# A strong single-use read-only transaction: what `database.snapshot()` sends for a query by default, and what the
# change stream query workflow asks for.
_SINGLE_USE_STRONG = TransactionSelector.pb(
    TransactionSelector(single_use=TransactionOptions(read_only=TransactionOptions.ReadOnly(strong=True, return_read_timestamp=True)))
)


class StreamingSql:
    """ExecuteStreamingSql through the database's generated Spanner API client (`database.spanner_api`: its transport,
    credentials, routing and x-goog-api-client headers, its mapping of gRPC errors to google.api_core's), each
    response wrapped in the client's StreamedResultSet, which merges chunked values and builds rows as for its own
    queries.

    `snapshot.execute_sql` spends ~0.7 ms of a core per query around that call (the request built as proto-plus
    messages, a tracing span, a metrics capture, a request id, its own resumption): a third of a small partition's
    client CPU (`python -m bench.bench_reader --small-partitions 1000`). None of it is needed here: the reader resumes a failed query itself (`PartitionReader._read`, from the
    last timestamp it delivered), and the request is the one the client's snapshot sends (a strong single-use
    read-only transaction on the snapshot's session, the client's default query options and directed reads, the
    reader's request options; tests/integration/reader/test_streaming_sql.py compares them through a proxy). What
    the client adds alone: its request id and server-timing headers, and its built-in metrics and spans of these
    queries.
    """

    def __init__(self, database: Any) -> None:
        client = database._instance._client
        self._api = database.spanner_api
        self._metadata = (("google-cloud-resource-prefix", database.name),)
        template = ExecuteSqlRequest.pb()()
        template.transaction.CopyFrom(_SINGLE_USE_STRONG)
        if client._query_options is not None:
            template.query_options.CopyFrom(_as_pb(ExecuteSqlRequest.QueryOptions, client._query_options))
        if database._directed_read_options is not None:
            template.directed_read_options.CopyFrom(_as_pb(DirectedReadOptions, database._directed_read_options))
        self._template = template

    def execute(self, snapshot: Any, query: ChangeStreamQuery, request_options: Any) -> StreamedResultSet:
        """The query on the snapshot's session (the caller holds the snapshot until the rows are read): its result set,
        undecoded rows (`lazy_decode`)."""
        request = ExecuteSqlRequest.pb()()
        request.CopyFrom(self._template)
        request.session = snapshot._session.name
        request.sql = query.sql
        request.params.CopyFrom(Struct(fields={name: _make_value_pb(value) for name, value in query.params.items()}))
        for name, type_ in query.param_types.items():
            request.param_types[name].CopyFrom(type(type_).pb(type_))
        if request_options is not None:
            request.request_options.CopyFrom(_as_pb(RequestOptions, request_options))
        responses = self._api.execute_streaming_sql(request=ExecuteSqlRequest.wrap(request), metadata=self._metadata, timeout=None)
        return StreamedResultSet(responses, lazy_decode=True)

    @staticmethod
    def cancel(results: StreamedResultSet) -> None:
        """Ends the query's call (no-op once it has ended): the server stops its stream. The client's own queries are
        cancelled only when their call is collected, so a reader that stopped early left the server's read running."""
        results._response_iterator.cancel()


def _as_pb(kind: Any, value: Any) -> Any:
    """A proto-plus message of `kind`, or a dict of its fields (the client takes both), as its protobuf."""
    return kind.pb(value if isinstance(value, kind) else kind(value))


# by the database's id, with a weak reference to tell it from a later object of the same id: google-cloud-spanner's
# Database defines __eq__ without __hash__, so it cannot key a dict itself
_queries: dict[int, tuple[weakref.ref[Any], StreamingSql | None]] = {}
_queries_lock = threading.Lock()


def streaming_sql(database: Any) -> StreamingSql | None:
    """The database's StreamingSql, made once; None for what is not google-cloud-spanner's Database (a stand-in in
    unit tests, a client version without these attributes), whose queries go through `snapshot.execute_sql`."""
    key = id(database)
    with _queries_lock:
        known = _queries.get(key)
        if known is not None and known[0]() is database:
            return known[1]
    found: StreamingSql | None
    try:
        found = StreamingSql(database)
    except AttributeError:
        found = None
    try:
        ref = weakref.ref(database, lambda _: _forget(key))
    except TypeError:  # not weakly referenceable: made again next time
        return found
    with _queries_lock:
        _queries[key] = (ref, found)
    return found


def _forget(key: int) -> None:
    # no lock: a weak reference's callback runs inside the collector, which may run in a thread holding it
    _queries.pop(key, None)
