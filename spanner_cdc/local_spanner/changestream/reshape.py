"""Splits and merges of change stream partitions: when (the policy's rules) and how (time, tokens, journal)."""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from spanner_cdc.local_spanner.changestream.partitions import KEY_SPACE, Partition, from_us, split_ranges, to_us
from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy
from spanner_cdc.local_spanner.changestream.streams import StreamState
from spanner_cdc.local_spanner.clock import ServerClock

log = logging.getLogger(__name__)


class Reshaper:
    """Changes a stream's partitions; every call is made holding the engine's lock."""

    def __init__(
        self,
        policy: PartitionPolicy,
        clock: ServerClock,
        frontier: Callable[[], int],
        appended: Callable[[], int],
        write: Callable[[dict[str, Any]], None],
        changed: Callable[[], None],
    ) -> None:
        self.policy = policy
        self.clock = clock
        self._frontier = frontier
        self._appended = appended
        self._write = write
        self._changed = changed

    def roots(self, state: StreamState) -> list[Partition]:
        """The partitions a new stream starts with, tiling the key space."""
        roots = [
            Partition(token=self._mint(state), lo=lo, hi=hi, start=state.created)
            for lo, hi in split_ranges(0, KEY_SPACE, self.policy.initial_partitions)
        ]
        state.last_reshape = state.created - 1
        self.reshape(state, state.created, [], roots)
        return roots

    def split(self, state: StreamState, parent: Partition, ways: int) -> list[Partition]:
        at = self._time(state)
        children = [
            Partition(token=self._mint(state), lo=lo, hi=hi, start=at, parents=(parent.token,))
            for lo, hi in split_ranges(parent.lo, parent.hi, ways)
        ]
        self.reshape(state, at, [parent.token], children)
        log.info(
            "%s %s: split at %s into %s", state.definition.name, parent.token, from_us(at), [c.token for c in children]
        )
        return children

    def merge(self, state: StreamState, parents: Sequence[Partition]) -> Partition:
        at = self._time(state)
        ordered = sorted(parents, key=lambda p: p.lo)
        tokens = tuple(p.token for p in ordered)
        child = Partition(token=self._mint(state), lo=ordered[0].lo, hi=ordered[-1].hi, start=at, parents=tokens)
        self.reshape(state, at, list(tokens), [child])
        log.info("%s %s: merged at %s into %s", state.definition.name, ",".join(tokens), from_us(at), child.token)
        return child

    def move(self, state: StreamState, left: Partition, right: Partition, rightward: bool) -> list[Partition]:
        """Shift the boundary between two neighbours by half of one side: that key range changes partition."""
        if left.hi != right.lo:
            raise ValueError(f"{left.token} and {right.token} are not neighbours")
        boundary = left.lo + (left.hi - left.lo) // 2 if rightward else right.lo + (right.hi - right.lo) // 2
        at = self._time(state)
        parents = (left.token, right.token)
        children = [
            Partition(token=self._mint(state), lo=lo, hi=hi, start=at, parents=parents)
            for lo, hi in ((left.lo, boundary), (boundary, right.hi))
        ]
        self.reshape(state, at, list(parents), children)
        log.info("%s %s: moved keys %s at %s", state.definition.name, ",".join(parents), "right" if rightward else "left", from_us(at))
        return children

    def _time(self, state: StreamState) -> int:
        # after everything readers may have seen (no reader saw a heartbeat past the change), and
        # after the stream's previous change, so every partition lives at least one microsecond
        return max(self._frontier(), self._appended(), state.last_reshape) + 1

    def reshape(self, state: StreamState, at: int, parents: list[str], children: list[Partition]) -> None:
        state.partitions.reshape(at, parents, children)
        state.last_reshape = at
        self._write(
            {
                "op": "reshape",
                "db": state.db,
                "stream": state.definition.name,
                "at": at,
                "parents": parents,
                "children": [[c.token, str(c.lo), str(c.hi), list(c.parents)] for c in children],
            }
        )
        self._changed()

    def split_hot(self, state: StreamState, partitions: Iterable[Partition]) -> None:
        policy = self.policy
        for partition in partitions:
            room = policy.max_partitions - len(state.partitions.alive)
            if partition.end is None and partition.window_count >= policy.split_records and room >= 1:
                self.split(state, partition, min(policy.split_ways, room + 1))

    def next_event_due(self, stream: StreamState) -> int | None:
        every = self.policy.event_every_us
        return None if every is None else stream.created + (stream.events_done + 1) * every

    def tick(self, state: StreamState) -> None:
        """Apply the time-based and cold-merge rules whose time has come."""
        if state.dropped:
            return
        policy = self.policy
        now = to_us(self.clock.now())
        every = policy.event_every_us
        if every is not None and now >= state.created + (state.events_done + 1) * every:
            due = (now - state.created) // every
            for index in range(max(state.events_done + 1, due - policy.max_catchup_events + 1), due + 1):
                self._time_event(state, index)
            state.events_done = due
            self._write({"op": "events", "db": state.db, "stream": state.definition.name, "done": due})
        idle = policy.merge_idle_us
        alive = state.partitions.alive
        if idle is None or len(alive) <= policy.min_partitions:
            return
        frontier = self._frontier()
        for run in state.partitions.adjacent_runs(2):
            if all(frontier - (p.last_record or p.start) >= idle for p in run):
                self.merge(state, run)
                return

    def _time_event(self, state: StreamState, index: int) -> None:
        policy = self.policy
        alive = state.partitions.alive
        mutable = state.definition.mutable_key_range
        kind = policy.event_kind(index, mutable)
        if kind == "move" and len(alive) < 2:
            kind = "split"
        if kind == "split" and len(alive) >= policy.max_partitions:
            kind = "merge"
        if kind == "merge" and len(alive) <= policy.min_partitions:
            kind = "split" if len(alive) < policy.max_partitions else "none"
        rng = policy.rng(state.db, state.definition.name, index)
        if kind == "split":
            self.split(state, rng.choice(alive), min(policy.split_ways, policy.max_partitions - len(alive) + 1))
        elif kind == "merge":
            self.merge(state, rng.choice(state.partitions.adjacent_runs(2)))
        elif kind == "move":
            left, right = rng.choice(state.partitions.adjacent_runs(2))
            rightward = rng.random() < 0.5
            if (left if rightward else right).hi - (left if rightward else right).lo >= 2:
                self.move(state, left, right, rightward)

    def _mint(self, state: StreamState) -> str:
        state.minted += 1
        seed = f"{state.db}\x00{state.definition.name}\x00{state.created}\x00{state.minted}".encode()
        return base64.b32encode(hashlib.blake2b(seed, digest_size=15).digest()).decode().lower()
