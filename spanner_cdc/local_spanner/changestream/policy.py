"""When partitions split and merge: the seeded, configurable partition policy of the local server."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property


@dataclass(frozen=True)
class PartitionPolicy:
    """All times are server time. Automatic changes respect min/max_partitions; on-demand ones do not.

    - load: a partition that received `split_records` data change records within one `split_period`
      splits into `split_ways` children;
    - cold: two adjacent partitions that are older than `merge_idle` and received no record for
      `merge_idle` merge into one;
    - time: every `event_every` after the stream's creation, alternately a split (odd events) and a
      merge (even events) of a partition chosen with `seed`, so lineage changes on any workload that
      spans a few `event_every` (MUTABLE_KEY_RANGE streams cycle split, move, merge: a move shifts the
      boundary between two neighbours, so a key range changes partition). At most `max_catchup_events` overdue events are applied at once
      (after a long idle period the older ones are skipped).
    """

    seed: int = 0
    initial_partitions: int = 2
    min_partitions: int = 1
    max_partitions: int = 8
    split_records: int = 5000
    split_period: timedelta = timedelta(minutes=10)
    split_ways: int = 2
    merge_idle: timedelta | None = timedelta(minutes=15)
    event_every: timedelta | None = timedelta(minutes=20)
    max_catchup_events: int = 2

    def __post_init__(self) -> None:
        if self.initial_partitions < 1:
            raise ValueError(f"initial_partitions={self.initial_partitions}: expected >= 1")
        if not 1 <= self.min_partitions <= self.max_partitions:
            raise ValueError(
                f"min_partitions={self.min_partitions}, max_partitions={self.max_partitions}: expected 1 <= min <= max"
            )
        if self.split_ways < 2:
            raise ValueError(f"split_ways={self.split_ways}: expected >= 2")
        if self.split_records < 1:
            raise ValueError(f"split_records={self.split_records}: expected >= 1")
        for name in ("split_period", "merge_idle", "event_every"):
            value = getattr(self, name)
            if value is not None and value <= timedelta(0):
                raise ValueError(f"{name}={value}: expected a positive duration")

    @cached_property  # read on every commit
    def split_period_us(self) -> int:
        return _us(self.split_period)

    @cached_property
    def merge_idle_us(self) -> int | None:
        return None if self.merge_idle is None else _us(self.merge_idle)

    @cached_property
    def event_every_us(self) -> int | None:
        return None if self.event_every is None else _us(self.event_every)

    def rng(self, db: str, stream: str, decision: int) -> random.Random:
        """A generator for one decision, so choices replay identically after a restart."""
        return random.Random(f"{self.seed}\x00{db}\x00{stream}\x00{decision}")

    @staticmethod
    def event_kind(index: int, mutable: bool = False) -> str:
        """Kind of the index-th (1-based) time-based event."""
        if mutable:
            return ("merge", "split", "move")[index % 3]
        return "split" if index % 2 == 1 else "merge"


def _us(value: timedelta) -> int:
    return value // timedelta(microseconds=1)
