"""Streaming a change stream query as PartialResultSets: batching, chunking, resume tokens and injected faults.

A resume token names the last record delivered: (commit or heartbeat timestamp, record kind, record
sequence) plus how many chunks of the next record were already sent. A resumed query restarts the
engine at that timestamp and skips what was delivered, so a resume survives even a server restart.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from spanner_cdc.local_spanner import wire
from spanner_cdc.local_spanner.model import QueryError
from spanner_cdc.local_spanner.record_bytes import EncodedRecords, FastRecordEncoder
from spanner_cdc.local_spanner.record_encoding import RecordEncoder

log = logging.getLogger(__name__)

MESSAGE_BYTES = 1 << 20  # rows per PartialResultSet up to ~1 MiB; the client accepts 4 MiB
MESSAGE_ROWS = 2000
QUEUE_ROWS = 10000  # how far the engine may run ahead of the network
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RANK = {"data_change_record": 0, "heartbeat_record": 1, "child_partitions_record": 2}


class InjectedFailure(Exception):
    """The stream must end with UNAVAILABLE now (fault injection)."""


def _us(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def _sequence(text: str) -> tuple[int, int, str]:
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


@dataclass(frozen=True)
class Position:
    """Where a change stream read stands: after the record with this key, plus chunks of the next one."""

    ts_us: int
    rank: int
    sequence: str
    chunks: int = 0

    @property
    def key(self) -> tuple[int, int, tuple[int, int, str]]:
        return (self.ts_us, self.rank, _sequence(self.sequence))

    def token(self) -> bytes:
        return f"cs1:{self.ts_us}:{self.rank}:{self.chunks}:{self.sequence}".encode()

    @classmethod
    def parse(cls, token: bytes) -> Position:
        try:
            tag, ts_us, rank, chunks, sequence = token.decode().split(":", 4)
            if tag != "cs1":
                raise ValueError(tag)
            return cls(int(ts_us), int(rank), sequence, int(chunks))
        except ValueError:
            raise QueryError("INVALID_ARGUMENT", f"Invalid resume token {token!r}") from None

    @property
    def timestamp(self) -> datetime:
        return _EPOCH + timedelta(microseconds=self.ts_us)


def record_position(record: dict[str, Any]) -> Position:
    kind = next(iter(record))
    body = record[kind]
    if kind == "data_change_record":
        return Position(_us(body["commit_timestamp"]), 0, body["record_sequence"])
    if kind == "heartbeat_record":
        return Position(_us(body["timestamp"]), 1, "")
    # the partition records of both modes follow data at their timestamp, ordered by their record sequence
    at = body.get("start_timestamp") or body.get("commit_timestamp") or body["end_timestamp"]
    return Position(_us(at), 2, body["record_sequence"])


class FaultInjector:
    """Arms the next N streaming reads to fail with UNAVAILABLE after K rows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.pending = 0
        self.after_rows = 0
        self.injected = 0

    def arm(self, reads: int, after_rows: int) -> None:
        with self._lock:
            self.pending = reads
            self.after_rows = after_rows

    def take(self) -> int | None:
        with self._lock:
            if self.pending <= 0:
                return None
            self.pending -= 1
            return self.after_rows

    def fired(self) -> None:
        with self._lock:
            self.injected += 1


# a queued row: (encoded value or its chunks, the record or a Position it ends at, chunks to skip)
_Row = tuple[list[bytes], Any, int]


def _position(source: Any) -> Position:
    return source if isinstance(source, Position) else record_position(source)


class ChangeStreamSender:
    """Runs one engine query in a producer thread and turns its records into PartialResultSet bytes.

    The producer encodes records as they come; the gRPC thread takes everything queued at once and
    packs it into messages, so a burst becomes a few large messages and a trickle goes out at once."""

    def __init__(
        self,
        records: Iterator[dict[str, Any]],
        stop: threading.Event,
        postgres: bool,
        metadata: bytes,
        resume: Position | None,
        fail_after: int | None,
        is_active: Callable[[], bool],
        encoder: RecordEncoder | None = None,
        encoded: EncodedRecords | None = None,
    ) -> None:
        self._records = records
        self._encoder = encoder or FastRecordEncoder(postgres)
        self._encoded = encoded  # rows of data change records encoded by earlier queries (same dialect and encoder)
        self._metadata = metadata
        self._resume = resume
        self._fail_after = fail_after
        self._is_active = is_active
        self.stop = stop  # the engine query watches it: set when the client goes away
        self._cond = threading.Condition()
        self._queue: deque[_Row] = deque()
        self._done = False
        self._error: BaseException | None = None
        self._consumer_waiting = False

    # -- producer -------------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            resume = self._resume
            encode, encoded_rows = self._encoder.encode, self._encoded
            queue, cond, stop = self._queue, self._cond, self.stop
            for record in self._records:
                skip_chunks = 0
                if resume is not None:
                    if record_position(record).key <= resume.key:
                        continue
                    skip_chunks, resume = resume.chunks, None
                body = record.get("data_change_record") if encoded_rows is not None else None
                if body is None:
                    encoded = encode(record)
                else:
                    assert encoded_rows is not None
                    encoded = encoded_rows.get(body) or encoded_rows.put(body, encode(record))
                parts = [encoded] if len(encoded) <= MESSAGE_BYTES else wire.chunks(self._encoder.row(record), MESSAGE_BYTES)
                if len(queue) >= QUEUE_ROWS:
                    with cond:
                        while len(queue) >= QUEUE_ROWS and not stop.is_set():
                            cond.wait(0.5)
                # deque.append is atomic; the consumer sets the flag before its last look at the queue
                queue.append((parts, record, skip_chunks))
                if self._consumer_waiting:
                    with cond:
                        cond.notify_all()
                if stop.is_set():
                    break
        except BaseException as exc:  # handed to the consumer, which turns it into a status
            self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    # -- consumer -------------------------------------------------------------------------------

    def _take(self) -> list[_Row] | None:
        """Everything queued, waiting for at least one row; None at the end of the query."""
        queue = self._queue
        with self._cond:
            while not queue and not self._done:
                if not self._is_active():
                    self.stop.set()
                    return None
                self._consumer_waiting = True
                if not queue:
                    self._cond.wait(0.5)
                self._consumer_waiting = False
            if not queue:
                return None
            rows = [queue.popleft() for _ in range(len(queue))]
            self._cond.notify_all()  # the producer may wait for room
            return rows

    def messages(self) -> Iterator[bytes]:
        producer = threading.Thread(target=self._produce, name="change-stream-read", daemon=True)
        producer.start()
        try:
            yield from self._messages()
        finally:
            self.stop.set()
            with self._cond:
                self._cond.notify_all()

    def _messages(self) -> Iterator[bytes]:
        metadata = self._metadata
        sent_rows = 0
        last: Any = self._resume  # the record (or Position) the last complete row ends at
        fail_after = self._fail_after
        if fail_after == 0:
            raise InjectedFailure()
        while True:
            rows = self._take()
            if rows is None:
                break
            batch: list[bytes] = []
            batch_bytes = 0
            for parts, record, skip_chunks in rows:
                if len(parts) > 1:
                    if batch:
                        yield wire.partial_result_set(batch, _position(last).token(), metadata)
                        metadata, batch, batch_bytes = b"", [], 0
                    base = _position(last) if last is not None else Position(0, -1, "")
                    for index in range(skip_chunks, len(parts)):
                        final = index == len(parts) - 1
                        token = record_position(record) if final else Position(base.ts_us, base.rank, base.sequence, index + 1)
                        yield wire.partial_result_set([parts[index]], token.token(), metadata, chunked=not final)
                        metadata = b""
                else:
                    batch.append(parts[0])
                    batch_bytes += len(parts[0])
                last = record
                sent_rows += 1
                if fail_after is not None and sent_rows >= fail_after or len(batch) >= MESSAGE_ROWS or batch_bytes >= MESSAGE_BYTES:
                    if batch:
                        yield wire.partial_result_set(batch, _position(last).token(), metadata)
                        metadata, batch, batch_bytes = b"", [], 0
                    if fail_after is not None and sent_rows >= fail_after:
                        raise InjectedFailure()
            if batch:
                yield wire.partial_result_set(batch, _position(last).token(), metadata)
                metadata = b""
        if self._error is not None:
            raise self._error
        if metadata:  # no rows at all: the client still needs the result's metadata
            yield wire.partial_result_set([], b"", metadata)
