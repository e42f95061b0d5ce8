"""The spec's query workflow in-process: the root query, then every child (merges after all parents) or started partition."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from spanner_cdc.errors import SourceError
from spanner_cdc.model.records import ChangeRecord, ChildPartitionsRecord, PartitionStartRecord
from spanner_cdc.source.queries import validate_window
from spanner_cdc.times import rfc3339

log = logging.getLogger(__name__)

_PUT_WAIT_S = 0.5  # how often a producer blocked on a full queue checks whether the consumer has gone


class Reader(Protocol):
    stream: str

    def read(self, token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]: ...


@dataclass
class _Partition:
    token: str
    start: datetime
    parents: set[str]
    scheduled: bool = False


@dataclass
class WorkflowLog:
    """What the workflow did, in order: ("start" | "end", token) events, for callers and tests."""

    events: list[tuple[str, str | None]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # children that begin after the end timestamp


class AllPartitions:
    """Iterate (partition token, record) for every partition of a stream over [start, end].

    Root partitions come from the NULL-token query at `start`; every child is read from its child
    partitions record's start timestamp, once, and only after all of its parents' queries ended, so
    a key's changes come out in commit order. Partitions are read in threads (at most `concurrency`
    at once when `end` is set; with no end every live partition needs its own query), and the
    records are handed to the iterating thread one at a time."""

    def __init__(self, reader: Reader, start: datetime, end: datetime | None, *, concurrency: int = 4) -> None:
        self.reader = reader
        self.start, self.end = validate_window(start, end)
        self.concurrency = max(1, concurrency)
        self.log = WorkflowLog()
        self._partitions: dict[str, _Partition] = {}
        self._finished: set[str | None] = set()
        self._events: queue.Queue[tuple[str, str | None, Any]] = queue.Queue(maxsize=256 * self.concurrency)
        self._stop = threading.Event()
        self._slots: Any = threading.Semaphore(self.concurrency) if self.end is not None else contextlib.nullcontext()

    def __iter__(self) -> Iterator[tuple[str | None, ChangeRecord]]:
        outstanding = 1
        self._launch(None, self.start)
        try:
            while outstanding:
                kind, token, payload = self._events.get()
                if kind == "record":
                    if isinstance(payload, ChildPartitionsRecord):
                        outstanding += self._register(token, payload)
                    elif isinstance(payload, PartitionStartRecord):
                        outstanding += self._register_started(payload)
                    yield token, payload
                elif kind == "done":
                    outstanding -= 1
                    self._finished.add(token)
                    self.log.events.append(("end", token))
                    log.debug("%s %s: partition query ended", self.reader.stream, token)
                    outstanding += self._schedule_ready()
                else:
                    raise payload
            stuck = [p.token for p in self._partitions.values() if not p.scheduled]
            if stuck:
                raise SourceError(
                    f"{self.reader.stream}: child partitions {', '.join(stuck)} never became ready: some of their "
                    "parents were not read (inconsistent child partitions records)"
                )
        finally:
            self._stop.set()

    def _register(self, parent: str | None, record: ChildPartitionsRecord) -> int:
        for child in record.child_partitions:
            parents = set(child.parent_partition_tokens)
            if parent is not None:
                parents.add(parent)
            known = self._partitions.get(child.token)
            if known is None:
                self._partitions[child.token] = _Partition(child.token, record.start_timestamp, parents)
            else:  # a merge child, announced by each of its parents: one partition, one query
                known.parents |= parents
                if known.start != record.start_timestamp:
                    log.warning(
                        "%s %s: parents announce child %s at %s and %s; reading from the earlier",
                        self.reader.stream, parent, child.token, rfc3339(known.start), rfc3339(record.start_timestamp),
                    )  # fmt: skip
                    known.start = min(known.start, record.start_timestamp)
        # root partitions have no parent query to wait for; other children wait for their parents' end
        return self._schedule_ready() if parent is None else 0

    def _register_started(self, record: PartitionStartRecord) -> int:
        """MUTABLE_KEY_RANGE: a started partition is read at once from its start (each token once); key
        ranges moving into it come with move-in events, which this debugging workflow does not wait on."""
        for token in record.partition_tokens:
            if token not in self._partitions:
                self._partitions[token] = _Partition(token, record.start_timestamp, set())
        return self._schedule_ready()

    def _schedule_ready(self) -> int:
        launched = 0
        for partition in self._partitions.values():
            if partition.scheduled or not partition.parents <= self._finished:
                continue
            partition.scheduled = True
            if self.end is not None and partition.start > self.end:
                self.log.skipped.append(partition.token)
                log.debug("%s %s: starts after the end; not read", self.reader.stream, partition.token)
                continue
            self._launch(partition.token, max(partition.start, self.start))
            launched += 1
        return launched

    def _launch(self, token: str | None, start: datetime) -> None:
        self.log.events.append(("start", token))
        log.debug("%s %s: starting partition query at %s", self.reader.stream, token, rfc3339(start))
        thread = threading.Thread(target=self._run, args=(token, start), name=f"partition-{token}", daemon=True)
        thread.start()

    def _run(self, token: str | None, start: datetime) -> None:
        try:
            with self._slots:
                if self._stop.is_set():
                    return
                for record in self.reader.read(token, start, self.end):
                    if not self._put(("record", token, record)):
                        return
            self._put(("done", token, None))
        except BaseException as exc:  # handed to the iterating thread, which raises it
            self._put(("error", token, exc))

    def _put(self, event: tuple[str, str | None, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._events.put(event, timeout=_PUT_WAIT_S)
                return True
            except queue.Full:
                continue
        return False
