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
from spanner_cdc.local_spanner.record_encoding import RecordEncoder

log = logging.getLogger(__name__)

MESSAGE_BYTES = 1 << 20  # rows per PartialResultSet up to ~1 MiB; the client accepts 4 MiB
MESSAGE_ROWS = 2000
QUEUE_BYTES = 8 << 20  # how far the engine may run ahead of the network
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
    return Position(_us(body["start_timestamp"]), 2, body["record_sequence"])


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


@dataclass
class _Row:
    parts: list[bytes]  # one encoded value, or the chunks of one
    position: Position
    skip_chunks: int = 0


class ChangeStreamSender:
    """Runs one engine query in a producer thread and turns its records into PartialResultSet bytes."""

    def __init__(
        self,
        records: Iterator[dict[str, Any]],
        stop: threading.Event,
        postgres: bool,
        metadata: bytes,
        resume: Position | None,
        fail_after: int | None,
        is_active: Callable[[], bool],
    ) -> None:
        self._records = records
        self._encoder = RecordEncoder(postgres)
        self._metadata = metadata
        self._resume = resume
        self._fail_after = fail_after
        self._is_active = is_active
        self.stop = stop  # the engine query watches it: set when the client goes away
        self._cond = threading.Condition()
        self._queue: deque[_Row] = deque()
        self._queued_bytes = 0
        self._done = False
        self._error: BaseException | None = None
        self._consumer_waiting = False

    # -- producer -------------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            skipping = self._resume is not None
            resume_key = self._resume.key if self._resume else None
            encoder_row = self._encoder.row
            for record in self._records:
                position = record_position(record)
                skip_chunks = 0
                if skipping:
                    assert self._resume is not None
                    if position.key <= resume_key:  # type: ignore[operator]
                        continue
                    skipping = False
                    skip_chunks = self._resume.chunks
                value = encoder_row(record)
                encoded = wire.encode(value)
                parts = [encoded] if len(encoded) <= MESSAGE_BYTES else wire.chunks(value, MESSAGE_BYTES)
                self._put(_Row(parts, position, skip_chunks), len(encoded))
                if self.stop.is_set():
                    break
        except BaseException as exc:  # handed to the consumer, which turns it into a status
            self._error = exc
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _put(self, row: _Row, size: int) -> None:
        with self._cond:
            while self._queued_bytes > QUEUE_BYTES and not self.stop.is_set():
                self._cond.wait(0.5)
            self._queue.append(row)
            self._queued_bytes += size
            if self._consumer_waiting:
                self._cond.notify_all()

    # -- consumer -------------------------------------------------------------------------------

    def _take(self) -> list[_Row] | None:
        """Everything queued, waiting for at least one row; None at the end of the query."""
        with self._cond:
            while not self._queue and not self._done:
                if not self._is_active():
                    self.stop.set()
                    return None
                self._consumer_waiting = True
                self._cond.wait(0.5)
                self._consumer_waiting = False
            if not self._queue:
                return None
            rows = list(self._queue)
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify_all()
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
        last = self._resume
        fail_after = self._fail_after
        if fail_after == 0:
            raise InjectedFailure()
        while True:
            rows = self._take()
            if rows is None:
                break
            batch: list[bytes] = []
            batch_bytes = 0
            for row in rows:
                if len(row.parts) > 1:
                    if batch:
                        yield wire.partial_result_set(batch, last.token() if last else b"", metadata)
                        metadata, batch, batch_bytes = b"", [], 0
                    for index in range(row.skip_chunks, len(row.parts)):
                        final = index == len(row.parts) - 1
                        if final:
                            token = row.position
                        else:
                            base = last or Position(0, -1, "")
                            token = Position(base.ts_us, base.rank, base.sequence, index + 1)
                        yield wire.partial_result_set([row.parts[index]], token.token(), metadata, chunked=not final)
                        metadata = b""
                    last = row.position
                else:
                    batch.append(row.parts[0])
                    batch_bytes += len(row.parts[0])
                    last = row.position
                sent_rows += 1
                if fail_after is not None and sent_rows >= fail_after or len(batch) >= MESSAGE_ROWS or batch_bytes >= MESSAGE_BYTES:
                    if batch:
                        yield wire.partial_result_set(batch, last.token(), metadata)
                        metadata, batch, batch_bytes = b"", [], 0
                    if fail_after is not None and sent_rows >= fail_after:
                        raise InjectedFailure()
            if batch:
                yield wire.partial_result_set(batch, last.token() if last else b"", metadata)
                metadata = b""
        if self._error is not None:
            raise self._error
        if metadata:  # no rows at all: the client still needs the result's metadata
            yield wire.partial_result_set([], b"", metadata)
