"""MUTABLE_KEY_RANGE partitions: long-lived owners of the engine's key range segments, and their partition records.

The engine keeps splitting and merging immutable segments (`Partition`) in both modes. In this mode a
segment belongs to an *owner*, the long-lived partition readers see: a reshape hands each parent's owner
to the child at the same position (children and parents are in key order), a child past the parents'
count starts a new owner named after its own token, and a parent past the children's count ends its
owner. So an owner holds exactly one segment at any time, the ownership follows from the lineage alone
(nothing more to journal), and every key range that changes owner at a reshape is one move: a move-out
in the source owner, a move-in in the destination.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spanner_cdc.local_spanner.changestream.partitions import Partition, PartitionSet, from_us


@dataclass
class Owner:
    """One MUTABLE_KEY_RANGE partition: its segments in time order; `end` None while alive."""

    token: str
    segments: list[Partition] = field(default_factory=list)
    end: int | None = None

    @property
    def start(self) -> int:
        return self.segments[0].start

    def alive_at(self, ts: int) -> bool:
        return self.start <= ts and (self.end is None or ts < self.end)


@dataclass(frozen=True)
class Reshape:
    """The segments ending (`parents`) and starting (`children`) at `at`, each in key order."""

    at: int
    parents: tuple[Partition, ...]
    children: tuple[Partition, ...]


@dataclass(frozen=True)
class OwnerEvent:
    """What one reshape means for one owner: partitions it announces, key ranges in and out, its end."""

    at: int
    started: tuple[str, ...] = ()
    move_in: tuple[str, ...] = ()
    move_out: tuple[str, ...] = ()
    ends: bool = False


class MutableView:
    """Owners of one stream's segments; rebuilt when the segments change (only reshapes add segments)."""

    def __init__(self, partitions: PartitionSet) -> None:
        self.partitions = partitions
        self.size = len(partitions)
        self.owner_of: dict[str, str] = {}
        self.owners: dict[str, Owner] = {}
        for segment in sorted(partitions.by_token.values(), key=lambda p: (p.start, p.lo)):
            token = self._owner(segment)
            self.owner_of[segment.token] = token
            self.owners.setdefault(token, Owner(token)).segments.append(segment)
        for owner in self.owners.values():
            last = owner.segments[-1]
            if last.end is not None and all(self.owner_of.get(c) != owner.token for c in last.children):
                owner.end = last.end
        self._events: dict[str, list[OwnerEvent]] = {}

    def _owner(self, segment: Partition) -> str:
        if not segment.parents:
            return segment.token
        siblings = self.partitions.by_token[segment.parents[0]].children
        index = siblings.index(segment.token)
        if index < len(segment.parents):
            return self.owner_of[segment.parents[index]]
        return segment.token

    def alive_at(self, ts: int) -> list[Owner]:
        return sorted((o for o in self.owners.values() if o.alive_at(ts)), key=lambda o: o.segments[-1].lo)

    def alive(self) -> list[Owner]:
        return [o for o in self.owners.values() if o.end is None]

    def reshape_at(self, segment: Partition, starting: bool) -> Reshape | None:
        """The reshape that started (`starting`) or ended `segment`; None for a root or a live segment."""
        by_token = self.partitions.by_token
        if starting:
            if not segment.parents:
                return None
            parents = tuple(by_token[t] for t in segment.parents)
            children = tuple(by_token[t] for t in parents[0].children)
            return Reshape(segment.start, parents, children)
        if segment.end is None:
            return None
        children = tuple(by_token[t] for t in segment.children)
        return Reshape(segment.end, tuple(by_token[t] for t in children[0].parents), children)

    def moves(self, reshape: Reshape) -> list[tuple[str, str]]:
        """(source owner, destination owner) of every key range that changes owner, in key order."""
        out: list[tuple[str, str]] = []
        for child in reshape.children:
            destination = self.owner_of[child.token]
            for parent in reshape.parents:
                source = self.owner_of[parent.token]
                if parent.lo < child.hi and child.lo < parent.hi and source != destination:
                    if (source, destination) not in out:
                        out.append((source, destination))
        return out

    def events(self, token: str) -> list[OwnerEvent]:
        """The owner's partition events in time order (at most one per reshape)."""
        cached = self._events.get(token)
        if cached is not None:
            return cached
        owner = self.owners[token]
        reshapes: dict[int, Reshape] = {}
        for segment in owner.segments:
            for starting in (True, False):
                found = self.reshape_at(segment, starting)
                if found is not None:
                    reshapes[found.at] = found
        events = []
        for at in sorted(reshapes):
            reshape = reshapes[at]
            moves = self.moves(reshape)
            before = {self.owner_of[p.token] for p in reshape.parents}
            after = {self.owner_of[c.token] for c in reshape.children}
            event = OwnerEvent(
                at=at,
                started=tuple(d for s, d in moves if s == token and d not in before),
                move_in=tuple(s for s, d in moves if d == token),
                move_out=tuple(d for s, d in moves if s == token),
                ends=token in before and token not in after,
            )
            if event.started or event.move_in or event.move_out or event.ends:
                events.append(event)
        self._events[token] = events
        return events


def event_records(token: str, event: OwnerEvent, first_sequence: int) -> list[dict[str, Any]]:
    """The proto-shaped records of one owner event: start, then the moves, then the end (the last record)."""
    at = from_us(event.at)
    records: list[dict[str, Any]] = []
    if event.started:
        records.append({"partition_start_record": {"start_timestamp": at, "partition_tokens": list(event.started)}})
    if event.move_in or event.move_out:
        records.append(
            {
                "partition_event_record": {
                    "commit_timestamp": at,
                    "partition_token": token,
                    "move_in_events": [{"source_partition_token": s} for s in event.move_in],
                    "move_out_events": [{"destination_partition_token": d} for d in event.move_out],
                }
            }
        )
    if event.ends:
        records.append({"partition_end_record": {"end_timestamp": at, "partition_token": token}})
    for offset, record in enumerate(records):
        next(iter(record.values()))["record_sequence"] = f"{first_sequence + offset:08d}"
    return records
