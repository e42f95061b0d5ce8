"""Builds a realistic large lineage through the store's own transitions: splits, merges, hourly windows, a frontier, stuck tokens."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Completion, MetadataStore

US = timedelta(microseconds=1)
HOUR = timedelta(hours=1)
WAVES_PER_WINDOW = 3


@dataclass(frozen=True)
class ScaleLineage:
    lineage_id: int
    stream: str
    partitions: int
    frontier: int
    windows: int


def _wave(
    store: MetadataStore, lineage_id: int, at: datetime, window_end: datetime, churn: int, rng: random.Random, seq: int
) -> int:
    """Claim every token with something left before `window_end`; `churn` split in two, 2*`churn` merge in pairs, the
    rest land up to `at` and go on. Returns how many partitions the wave created."""
    claims = store.claim(lineage_id, window_end=window_end, owner="bench-builder", lease=HOUR)
    rng.shuffle(claims)
    pairs = min(churn, (len(claims) - churn) // 2)
    splits, merging, going_on = claims[:churn], claims[churn : churn + 2 * pairs], claims[churn + 2 * pairs :]
    items = []
    for claim in splits:
        kids = tuple(ChildPartition(f"{claim.token}.{seq}{k}", (claim.token,)) for k in "ab")
        items.append(Completion(claim, at - US, True, (ChildPartitionsRecord(at, "1", kids),), records=rng.randint(1, 500)))
    for index, (left, right) in enumerate(zip(merging[::2], merging[1::2], strict=False)):
        child = ChildPartition(f"m{seq:02d}.{index:04d}", (left.token, right.token))
        record = ChildPartitionsRecord(at, "1", (child,))
        items += [Completion(c, at - US, True, (record,), records=rng.randint(1, 500)) for c in (left, right)]
    items += [Completion(c, at - US, False, records=rng.randint(0, 500)) for c in going_on]
    for start in range(0, len(items), 500):
        store.complete_many(items[start : start + 500])
    return 2 * len(splits) + len(merging) // 2


def build(store: MetadataStore, stream: str, *, partitions: int, frontier: int, windows: int, t0: datetime,
          seed: int = 15) -> ScaleLineage:
    """About `partitions` partitions of which about `frontier` alive, over `windows` hourly windows (the last open).

    Churn per wave is sized so that splits and merges keep the frontier steady while the total grows to the
    target; the open window ends with some tokens RUNNING, a few failing and a few with an expired lease.
    """
    rng = random.Random(seed)
    lineage = store.ensure_lineage(stream, "live", database="bench")
    store.bootstrap(lineage.id, t0, [ChildPartition(f"root{i:05d}", ()) for i in range(frontier)])
    waves = windows * WAVES_PER_WINDOW
    churn = max(1, min(frontier // 3, (partitions - frontier) // (3 * waves)))
    created = frontier
    for w in range(windows):
        start, end = t0 + w * HOUR, t0 + (w + 1) * HOUR
        store.open_window(lineage.id, start, end)
        for k in range(WAVES_PER_WINDOW):
            at = start + (k + 1) * HOUR / (WAVES_PER_WINDOW + 1)
            created += _wave(store, lineage.id, at, end, churn, rng, w * WAVES_PER_WINDOW + k)
        if w < windows - 1:
            for claim_batch in _chunks(store.claim(lineage.id, window_end=end, owner="bench-builder", lease=HOUR), 500):
                store.complete_many([Completion(c, end - US, False, records=rng.randint(0, 500)) for c in claim_batch])
            store.close_window(lineage.id, start, end, records=rng.randint(10_000, 90_000), files=rng.randint(500, 2000),
                               transaction_check={"ok": True, "transactions": rng.randint(1000, 9000)}, marker_path=None)
    _leave_a_live_frontier(store, lineage.id, t0 + windows * HOUR)
    alive = sum(1 for p in store.partitions(lineage.id) if p.state.value != "FINISHED")
    return ScaleLineage(lineage.id, stream, created, alive, windows)


def _leave_a_live_frontier(store: MetadataStore, lineage_id: int, window_end: datetime) -> None:
    """Some tokens RUNNING under a live lease, five failing, three whose lease ran out."""
    running = store.claim(lineage_id, window_end=window_end, owner="worker-1", lease=HOUR, limit=60)
    for claim in running[:5]:
        store.fail(claim, "DeadlineExceeded: 504 Deadline Exceeded while reading the change stream")
    store.claim(lineage_id, window_end=window_end, owner="worker-2", lease=timedelta(microseconds=1), limit=3)


def _chunks(items: list, size: int) -> list[list]:  # type: ignore[type-arg]
    return [items[i : i + size] for i in range(0, len(items), size)]
