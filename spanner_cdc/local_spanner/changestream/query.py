"""Change stream queries: the NULL-token root query and the streaming read of one partition."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Any, Protocol

from spanner_cdc.local_spanner.changestream.partitions import Partition, PartitionSet, from_us
from spanner_cdc.local_spanner.changestream.streams import StreamState
from spanner_cdc.local_spanner.clock import ServerClock
from spanner_cdc.local_spanner.model import QueryError

# Upper bound of one wait, so a cancelled query (stop set) ends quickly even when nothing happens.
MAX_WAIT_SECONDS = 0.05
MIN_WAIT_SECONDS = 0.0002
FIRST_SEQUENCE = "00000000"


class QueryHost(Protocol):
    """What a query needs from the engine; every *_locked call is made holding `cond`."""

    clock: ServerClock
    cond: threading.Condition

    @property
    def version(self) -> int: ...

    def frontier_locked(self) -> int: ...

    def tick_locked(self, stream: StreamState) -> None: ...

    def next_event_due(self, stream: StreamState) -> int | None: ...


def wait_until_final(host: QueryHost, stream: StreamState, start: int, stop: threading.Event) -> bool:
    """Hold the engine's lock until `start` is final (True), or the query is stopped first (False).

    Only once `start` is final can no later split, merge or move change who was alive at it."""
    while True:
        _check_alive(stream)
        host.tick_locked(stream)
        if host.frontier_locked() >= start:
            return True
        if stop.is_set():
            return False
        host.cond.wait(_wait_seconds(host, start + 1))


def read_roots(host: QueryHost, stream: StreamState, start: int, stop: threading.Event) -> Iterator[dict[str, Any]]:
    """The partitions alive at `start`, as one child partitions record without parents."""
    with host.cond:
        if not wait_until_final(host, stream, start, stop):
            return
        roots = stream.partitions.alive_at(start)
    yield {
        "child_partitions_record": {
            "start_timestamp": from_us(start),
            "record_sequence": FIRST_SEQUENCE,
            "child_partitions": [{"token": p.token, "parent_partition_tokens": []} for p in roots],
        }
    }


def read_partition(
    host: QueryHost,
    stream: StreamState,
    partition: Partition,
    start: int,
    end: int | None,
    heartbeat_us: int,
    stop: threading.Event,
) -> Iterator[dict[str, Any]]:
    """Records of `partition` with commit timestamp in [start, end], heartbeats when idle, and its
    child partitions record if it ends within the range."""
    timestamps, records = partition.timestamps, partition.records
    position = bisect_left(timestamps, start)
    covered = start - 1  # every record of the partition <= covered has been yielded
    # commit time up to which the reader knows it has everything: the start, then each record or heartbeat. Heartbeats
    # follow commit time, not the wall clock, as in Cloud Spanner: a stretch of history longer than the heartbeat
    # interval without a commit in this partition gets one, so a reader's watermark advances while it reads history
    last_output = start - 1
    while not stop.is_set():
        with host.cond:
            frontier, seen_version = observe_locked(host, stream)
            partition_end = partition.end
        # the frontier guarantees every commit <= it is logged, so nothing can still arrive below it
        limit = frontier if end is None else min(frontier, end)
        if partition_end is not None:
            limit = min(limit, partition_end - 1)
        if limit > covered:
            upto = bisect_right(timestamps, limit, position)
            for index in range(position, upto):
                commit_us = timestamps[index]
                if commit_us - 1 - last_output >= heartbeat_us:
                    yield {"heartbeat_record": {"timestamp": from_us(commit_us - 1)}}
                yield {"data_change_record": records[index]}
                last_output = commit_us
            position = upto
            covered = limit
        if partition_end is not None and frontier >= partition_end - 1 and (end is None or end >= partition_end):
            yield _child_partitions_record(stream.partitions, partition)
            return
        if end is not None and frontier >= end:
            return
        if covered >= start and covered - last_output >= heartbeat_us:
            yield {"heartbeat_record": {"timestamp": from_us(covered)}}
            last_output = covered
            continue
        # wake up for whatever can happen next without a commit: heartbeat, end, partition end, policy
        targets = [last_output + heartbeat_us + 1 if covered >= start else start + 1]
        if end is not None:
            targets.append(end + 1)
        if partition_end is not None:
            targets.append(partition_end)
        wait_for_change(host, stream, seen_version, targets, stop)


def _child_partitions_record(partitions: PartitionSet, parent: Partition) -> dict[str, Any]:
    assert parent.end is not None
    children = [partitions.by_token[token] for token in parent.children]
    return {
        "child_partitions_record": {
            "start_timestamp": from_us(parent.end),
            "record_sequence": FIRST_SEQUENCE,
            "child_partitions": [
                {"token": child.token, "parent_partition_tokens": list(child.parents)} for child in children
            ],
        }
    }


def observe_locked(host: QueryHost, stream: StreamState) -> tuple[int, int]:
    """(frontier, engine version) after the stream's due policy events, holding the engine's lock; raises if the
    stream was dropped."""
    _check_alive(stream)
    host.tick_locked(stream)
    return host.frontier_locked(), host.version


def wait_for_change(
    host: QueryHost, stream: StreamState, seen_version: int, targets: list[int], stop: threading.Event
) -> None:
    """Sleep until the earliest commit time in `targets` (µs) or the stream's next policy event is due, unless the
    engine changed since `seen_version` was observed or the query is stopped; a commit or reshape wakes it."""
    with host.cond:
        due = host.next_event_due(stream)
        if due is not None:
            targets.append(due)
        if host.version == seen_version and not stop.is_set():
            host.cond.wait(_wait_seconds(host, min(targets)))


def _check_alive(stream: StreamState) -> None:
    if stream.dropped:
        raise QueryError("NOT_FOUND", f"change stream {stream.definition.name} was dropped during the query")


def _wait_seconds(host: QueryHost, target: int) -> float:
    # the floor keeps a reader from spinning while a commit that holds an earlier timestamp lands
    return max(MIN_WAIT_SECONDS, min(MAX_WAIT_SECONDS, host.clock.real_seconds_until(from_us(target))))
