"""PartitionReader: one change stream partition query as lazily yielded typed records, resumed after transient failures."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc

from spanner_cdc.errors import ConfigError, NotFound, RetentionError, SourceError, setting
from spanner_cdc.model.records import ChangeRecord, DataChangeRecord, HeartbeatRecord, PartitionEndRecord
from spanner_cdc.names import MUTABLE_KEY_RANGE
from spanner_cdc.read_options import ReadOptions
from spanner_cdc.source.decode.mapper import cached_row_mapper, lazy_decode
from spanner_cdc.source.decode.proto import proto_row_mapper
from spanner_cdc.source.out_of_range import CREATION, FUTURE, OTHER, classify
from spanner_cdc.source.partition_mode import validate_partition_mode
from spanner_cdc.source.queries import (
    build_query,
    validate_dialect,
    validate_heartbeat,
    validate_stream_name,
    validate_window,
)
from spanner_cdc.times import rfc3339

log = logging.getLogger(__name__)

ONE_MICROSECOND = timedelta(microseconds=1)
MUTABLE_MAX_QUERY = timedelta(minutes=30)  # a MUTABLE_KEY_RANGE query's end is at most 30 minutes after its start
# errors the client surfaces without resuming the stream itself (it resumes UNAVAILABLE and some
# INTERNAL resets on its own; when they still surface, e.g. while opening the session, re-query too)
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    gexc.DeadlineExceeded,
    gexc.Aborted,
    gexc.Unknown,
    gexc.InternalServerError,
    gexc.ServiceUnavailable,
)
PRIORITIES = ("LOW", "MEDIUM", "HIGH")
MAX_BACKOFF_S = 5.0


def _request_options(request_tag: str | None, priority: str | None) -> Any:
    from google.cloud.spanner_v1 import RequestOptions

    options = RequestOptions()
    if request_tag:
        options.request_tag = request_tag
    if priority:
        name = str(priority).upper().removeprefix("PRIORITY_")
        if name not in PRIORITIES:
            raise ConfigError("priority", priority, "one of " + ", ".join(PRIORITIES))
        options.priority = getattr(RequestOptions.Priority, f"PRIORITY_{name}")
    return options


class _Progress:
    """What was delivered at the newest timestamp, so a re-query from that timestamp repeats nothing.

    Many records can share one commit timestamp (one per table and mod type of a transaction, and
    several transactions), so the timestamp alone cannot say where to resume."""

    __slots__ = ("last", "seen", "complete")

    def __init__(self) -> None:
        self.last: datetime | None = None
        self.seen: set[tuple[str, ...]] = set()
        self.complete = False  # a heartbeat at `last` said nothing more can come at or before it

    def admit(self, record: ChangeRecord) -> bool:
        """True if the record is new to the consumer; False for a repeat of a resumed query."""
        ts = record.timestamp
        if self.last is None or ts > self.last:
            self.last = ts
            self.seen = set()
            self.complete = False
        elif ts < self.last:
            return True  # out of order (not from an overlap: a re-query starts at `last`); deliver, do not track
        if type(record) is HeartbeatRecord:
            if self.complete:
                return False
            self.complete = True
            return True
        key: tuple[str, ...]
        if type(record) is DataChangeRecord:
            key = (record.server_transaction_id, record.record_sequence)
        else:
            key = (record.record_sequence,)  # type: ignore[union-attr]
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    def resume_start(self, start: datetime) -> datetime:
        if self.last is None:
            return start
        return self.last + ONE_MICROSECOND if self.complete else self.last


def _row_type_key(fields: Any) -> bytes:
    """The result's fields (names and types) as bytes: the same for every query of a stream (cached_row_mapper's key)."""
    key = bytearray()
    for field in fields:
        as_pb = getattr(type(field), "pb", None)  # a proto-plus message's protobuf
        data = (as_pb(field) if as_pb is not None else field).SerializeToString()
        key += len(data).to_bytes(4, "big") + data
    return bytes(key)


class PartitionReader:
    """Reads one partition token over [start, end] (end inclusive, None = until the partition ends)."""

    def __init__(
        self,
        database: Any,
        stream: str,
        *,
        dialect: str,
        heartbeat_ms: int = 10_000,
        request_tag: str | None = None,
        priority: str | None = None,
        max_resumes: int = 20,
        partition_mode: str = "auto",
        read_options: ReadOptions | None = None,
    ) -> None:
        self.database = database
        self.stream = validate_stream_name(stream)
        self.heartbeat_ms = validate_heartbeat(heartbeat_ms)
        self._dialect = None if str(dialect).lower() == "auto" else validate_dialect(dialect)
        self._request_options = _request_options(request_tag, priority or (read_options.priority if read_options else None))
        # the stream's directed reads apply to change stream queries too (a read-only, single-use snapshot)
        directed = None if read_options is None else read_options.directed_read
        self._directed = {} if directed is None else {"directed_read_options": directed.client_options()}
        self.max_resumes = max_resumes
        self.resumes = 0  # re-queries made after transient failures, over this reader's life
        self._sleep: Callable[[float], None] = time.sleep
        self._partition_mode = None if str(partition_mode).lower() == "auto" else validate_partition_mode(partition_mode)

    @property
    def dialect(self) -> str:
        if self._dialect is None:
            from spanner_cdc.source.client import detect_dialect

            self._dialect = detect_dialect(self.database)
        return self._dialect

    @property
    def partition_mode(self) -> str:
        """IMMUTABLE_KEY_RANGE or MUTABLE_KEY_RANGE: the configured one, else asked from the database once."""
        if self._partition_mode is None:
            from spanner_cdc.source.partition_mode import detect_partition_mode

            self._partition_mode = detect_partition_mode(self.database, self.stream, self.dialect)
        return self._partition_mode

    @property
    def mutable(self) -> bool:
        return self.partition_mode == MUTABLE_KEY_RANGE

    def read(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        """Records of the partition in commit order, lazily; arguments are checked before returning."""
        start, end = validate_window(start, end)
        build_query(self.stream, self.dialect, token, start, end, self.heartbeat_ms)  # checks the rest now
        return self._read(token, start, end)

    def _slices(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        """One query, or in MUTABLE_KEY_RANGE mode consecutive queries of at most 30 minutes each (the mode's
        rule), until `end` or the partition's end record."""
        if not self.mutable:
            yield from self._query(token, start, end)
            return
        while True:
            limit = start + MUTABLE_MAX_QUERY
            slice_end = limit if end is None or end > limit else end
            last = token is None or slice_end == end  # the root query answers at once, whatever its end
            ended = False
            for record in self._query(token, start, slice_end):
                ended = ended or type(record) is PartitionEndRecord
                yield record
            if last or ended:
                return
            start = slice_end + ONE_MICROSECOND

    def _read(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        progress = _Progress()
        failures = 0
        query_start = start
        while True:
            delivered = 0
            try:
                for record in self._slices(token, query_start, end):
                    if progress.admit(record):
                        delivered += 1
                        yield record
                return
            except TRANSIENT_ERRORS as exc:
                failures = 1 if delivered else failures + 1
                if failures > self.max_resumes:
                    raise SourceError(
                        f"{self.stream} {token}: the change stream query failed {failures} times in a row "
                        f"without progress; last error: {exc}"
                    ) from None
                query_start = progress.resume_start(start)
                if end is not None and query_start > end:
                    return  # a heartbeat at `end` had already proven the partition read to the end
                self.resumes += 1
                delay = min(0.05 * 2 ** (failures - 1), MAX_BACKOFF_S)
                log.warning(
                    "%s %s: change stream query failed (%s: %s); re-querying from %s (skipping %s records "
                    "already delivered there) in %.2fs",
                    self.stream, token, type(exc).__name__, exc, rfc3339(query_start),
                    0 if progress.complete else len(progress.seen), delay,
                )  # fmt: skip
                self._sleep(delay)
            except gexc.GoogleAPICallError as exc:
                raise self._error(exc, token, query_start) from None

    def _query(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        mutable = self.mutable
        query = build_query(self.stream, self.dialect, token, start, end, self.heartbeat_ms, mutable=mutable)
        log.debug("%s %s: querying from %s to %s", self.stream, token, rfc3339(start), end and rfc3339(end))
        with self.database.snapshot() as snapshot:
            results = snapshot.execute_sql(
                query.sql,
                params=query.params,
                param_types=query.param_types,
                request_options=self._request_options,
                timeout=None,  # a change stream query lives as long as its window; the client's default is 1 h
                lazy_decode=mutable or lazy_decode(self.dialect),
                **self._directed,
            )
            yield from self._records(results, mutable)

    def _records(self, results: Any, mutable: bool) -> Iterator[ChangeRecord]:
        """A query's result set as records."""
        mapper = None
        for row in results:
            if mapper is None:  # the metadata arrives with the first message
                mapper = (
                    proto_row_mapper(results.fields)
                    if mutable
                    else cached_row_mapper(self.dialect, results.fields, _row_type_key(results.fields), results.decode_row)
                )
            yield from mapper(row)

    def _error(self, exc: gexc.GoogleAPICallError, token: str | None, start: datetime) -> Exception:
        where = f"{self.stream} {token}"
        message = " ".join(str(exc.message).split())  # the CLI prints errors as one line
        if isinstance(exc, gexc.OutOfRange):
            found = classify(message)
            if found.cause == FUTURE:  # Spanner's clock will get there: not a lost window
                return SourceError(f"{where}: the window start {rfc3339(start)} is ahead of Spanner's clock (Spanner: {message})")
            if found.cause == OTHER:
                return SourceError(f"{where}: Spanner rejected the change stream query (OUT_OF_RANGE): {message}")
            if found.cause == CREATION:
                created = f" (at {rfc3339(found.earliest)})" if found.earliest else ""
                error = RetentionError(
                    f"{where}: the window start {rfc3339(start)} precedes the change stream's creation{created}: there are "
                    f"no changes before it (Spanner: {message}); start at or after the stream's creation ({setting('start')} / window)"
                )
            else:
                error = RetentionError(
                    f"{where}: the window start {rfc3339(start)} has left the change stream's retention period "
                    f"or precedes the stream's creation (Spanner: {message}); start at a time within the "
                    f"retention period (a later {setting('start')} / window), or lengthen the stream's retention_period for the future"
                )
            error.spanner_message = message
            return error
        if isinstance(exc, gexc.NotFound):
            return NotFound(f"{where}: {message}")
        status = exc.grpc_status_code.name if exc.grpc_status_code is not None else type(exc).__name__
        return SourceError(f"{where}: Spanner rejected the change stream query ({status}): {message}")
