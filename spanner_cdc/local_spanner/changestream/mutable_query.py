"""Change stream queries in MUTABLE_KEY_RANGE mode: the root query and the streaming read of one long-lived partition."""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Any

from spanner_cdc.local_spanner.changestream.mutable import MutableView, Owner, event_records
from spanner_cdc.local_spanner.changestream.partitions import from_us
from spanner_cdc.local_spanner.changestream.query import (
    FIRST_SEQUENCE,
    QueryHost,
    observe_locked,
    wait_for_change,
    wait_until_final,
)
from spanner_cdc.local_spanner.changestream.streams import StreamState


def view(stream: StreamState) -> MutableView:
    """The stream's owners, cached until the next reshape (called holding the engine's lock)."""
    cached = stream.mutable_view
    if cached is None or cached.size != len(stream.partitions):
        cached = stream.mutable_view = MutableView(stream.partitions)
    return cached


def read_mutable_roots(
    host: QueryHost, stream: StreamState, start: int, stop: threading.Event
) -> Iterator[dict[str, Any]]:
    """The partitions alive at `start`, as one partition start record."""
    with host.cond:
        if not wait_until_final(host, stream, start, stop):
            return
        tokens = [owner.token for owner in view(stream).alive_at(start)]
    yield {
        "partition_start_record": {
            "start_timestamp": from_us(start),
            "record_sequence": FIRST_SEQUENCE,
            "partition_tokens": tokens,
        }
    }


def _data_in(owner: Owner, after: int, upto: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(commit µs, record) of the owner's data change records in (after, upto]; its segments follow each other."""
    for segment in owner.segments:
        if segment.end is not None and segment.end <= after + 1 or segment.start > upto:
            continue
        timestamps = segment.timestamps
        for index in range(bisect_right(timestamps, after), bisect_right(timestamps, upto)):
            yield timestamps[index], segment.records[index]


def _last_data_sequence(owner: Owner, at: int) -> int:
    """The highest record sequence of the owner's data at `at` (-1 if none): partition records follow them."""
    best = -1
    for segment in owner.segments:
        timestamps = segment.timestamps
        for index in range(bisect_left(timestamps, at), bisect_right(timestamps, at)):
            best = max(best, int(segment.records[index]["record_sequence"]))
    return best


def _ordered(owner_view: MutableView, owner: Owner, after: int, upto: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """Data and partition records in (after, upto], by timestamp; at one timestamp the data first."""
    events = [e for e in owner_view.events(owner.token) if after < e.at <= upto]
    pending = iter(events)
    event = next(pending, None)
    for ts, record in _data_in(owner, after, upto):
        while event is not None and event.at < ts:
            yield from _event(owner, event)
            event = next(pending, None)
        yield ts, {"data_change_record": record}
    while event is not None:
        yield from _event(owner, event)
        event = next(pending, None)


def _event(owner: Owner, event: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    for record in event_records(owner.token, event, _last_data_sequence(owner, event.at) + 1):
        yield event.at, record


def read_mutable_partition(
    host: QueryHost,
    stream: StreamState,
    owner: Owner,
    start: int,
    end: int,
    heartbeat_us: int,
    stop: threading.Event,
) -> Iterator[dict[str, Any]]:
    """Records of the long-lived partition `owner` in [start, end], heartbeats when idle; ends after its
    partition end record if it ends within the range."""
    covered = start - 1  # every record <= covered has been yielded
    last_output = start - 1  # as in query.read_partition: heartbeats follow commit time
    while not stop.is_set():
        with host.cond:
            frontier, seen_version = observe_locked(host, stream)
            owner_view = view(stream)
            owner = owner_view.owners[owner.token]
            owner_end = owner.end
        limit = min(frontier, end)
        if owner_end is not None:
            limit = min(limit, owner_end)
        if limit > covered:
            for ts, record in _ordered(owner_view, owner, covered, limit):
                if ts - 1 - last_output >= heartbeat_us:
                    yield {"heartbeat_record": {"timestamp": from_us(ts - 1)}}
                yield record
                last_output = ts
            covered = limit
        if owner_end is not None and covered >= owner_end:
            return
        if frontier >= end:
            return
        if covered >= start and covered - last_output >= heartbeat_us:
            yield {"heartbeat_record": {"timestamp": from_us(covered)}}
            last_output = covered
            continue
        targets = [last_output + heartbeat_us + 1 if covered >= start else start + 1, end + 1]
        if owner_end is not None:
            targets.append(owner_end)
        wait_for_change(host, stream, seen_version, targets, stop)
