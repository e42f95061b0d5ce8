"""Change stream partitions: hash key ranges with a life in server time, their records and lineage."""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

KEY_SPACE = 1 << 64
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_json_string = json.encoder.encode_basestring_ascii  # json.dumps's own encoding of a str (ensure_ascii)


def to_us(value: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // _ONE_US


def from_us(value: int) -> datetime:
    return EPOCH + timedelta(microseconds=value)


def key_hash(table: str, key_values: Sequence[Any]) -> int:
    """Position of a row in the key space: the same (table, key) always lands in the same range."""
    return _key_hash(table, tuple(key_values))


@lru_cache(maxsize=1 << 16)
def _key_hash(table: str, key_values: tuple[Any, ...]) -> int:
    # cached: workloads write the same rows again and again (a key column has one type, so equal tuples hash alike)
    return int.from_bytes(hashlib.blake2b(key_text(table, key_values).encode(), digest_size=8).digest(), "big")


def key_text(table: str, key_values: tuple[Any, ...]) -> str:
    """The JSON text a key hashes: json.dumps([table, [values]]) without spaces, sorted keys, str() of what JSON
    has no type for. Keys of text (STRING, and INT64 as the server holds it) and NULLs are written directly, the
    same text for a fraction of json.dumps's cost (every new row's change record routes by it)."""
    if all(type(value) is str or value is None for value in key_values):
        parts = ["null" if value is None else _json_string(value) for value in key_values]
        return f"[{_json_string(table)},[{','.join(parts)}]]"
    return json.dumps([table, list(key_values)], separators=(",", ":"), sort_keys=True, default=str)


@dataclass(eq=False)
class Partition:
    """Records of the key range [lo, hi) committed in [start, end); `end` None while alive."""

    token: str
    lo: int
    hi: int
    start: int
    parents: tuple[str, ...] = ()
    end: int | None = None
    children: tuple[str, ...] = ()
    # commit timestamps (µs) parallel to records, both append-only, so readers bisect without a lock
    timestamps: list[int] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    window_start: int = 0
    window_count: int = 0
    last_record: int | None = None

    def append(self, ts: int, record: dict[str, Any], period: int) -> None:
        self.timestamps.append(ts)
        self.records.append(record)
        if ts - self.window_start >= period:
            self.window_start = ts
            self.window_count = 0
        self.window_count += 1
        self.last_record = ts

    def alive_at(self, ts: int) -> bool:
        return self.start <= ts and (self.end is None or ts < self.end)


class PartitionSet:
    """All partitions of one stream; the alive ones tile the key space, sorted by `lo`."""

    def __init__(self) -> None:
        self.by_token: dict[str, Partition] = {}
        self.alive: list[Partition] = []
        self._alive_los: list[int] = []

    def __len__(self) -> int:
        return len(self.by_token)

    def get(self, token: str) -> Partition | None:
        return self.by_token.get(token)

    def reshape(self, at: int, parents: Sequence[str], children: Sequence[Partition]) -> None:
        """End `parents` at `at` and start `children` there (split, merge, or the roots when no parents)."""
        tokens = tuple(child.token for child in children)
        for token in parents:
            parent = self.by_token[token]
            parent.end = at
            parent.children = tokens
        for child in children:
            self.by_token[child.token] = child
        self.alive = sorted((p for p in self.by_token.values() if p.end is None), key=lambda p: p.lo)
        self._alive_los = [p.lo for p in self.alive]

    def route(self, h: int, ts: int) -> Partition | None:
        """The partition holding key hash `h` at commit time `ts` (None before the roots started)."""
        if not self.alive:
            return None
        partition = self.alive[bisect_right(self._alive_los, h) - 1]
        # a commit that got its timestamp just before a split or merge belongs to an ancestor
        while ts < partition.start:
            covering = [self.by_token[t] for t in partition.parents if self.by_token[t].lo <= h < self.by_token[t].hi]
            if not covering:
                return None
            partition = covering[0]
        return partition

    def alive_at(self, ts: int) -> list[Partition]:
        return sorted((p for p in self.by_token.values() if p.alive_at(ts)), key=lambda p: p.lo)

    def adjacent_runs(self, size: int) -> list[list[Partition]]:
        """Every run of `size` alive partitions with touching ranges, in key order."""
        return [self.alive[i : i + size] for i in range(len(self.alive) - size + 1)]

    def contiguous(self, partitions: Sequence[Partition]) -> bool:
        ordered = sorted(partitions, key=lambda p: p.lo)
        return all(a.hi == b.lo for a, b in zip(ordered, ordered[1:], strict=False))


def split_ranges(lo: int, hi: int, ways: int) -> list[tuple[int, int]]:
    """[lo, hi) cut into `ways` nearly equal non-empty ranges."""
    ways = max(1, min(ways, hi - lo))
    bounds = [lo + (hi - lo) * i // ways for i in range(ways + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(ways)]
