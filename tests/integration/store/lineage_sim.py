"""A random partition history (splits, merges, moves) and the worker processes that land it through the store."""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Claim, LeaseLost, ManifestFile, MetadataStore

US = timedelta(microseconds=1)
T0 = datetime(2025, 6, 1, tzinfo=UTC)
CRASH_EXIT = 17
LEASE = timedelta(seconds=1)


@dataclass(frozen=True)
class Partition:
    token: str
    start: datetime
    end: datetime | None = None  # start of its child partitions record; None: still alive at the horizon
    children: tuple[ChildPartition, ...] = ()
    parents: tuple[str, ...] = ()


def generate(seed: int, *, roots: int, operations: int, horizon: timedelta) -> dict[str, Partition]:
    """Roots at T0, then `operations` splits / merges / moves at increasing whole seconds before the horizon."""
    rng = random.Random(seed)
    alive: dict[str, Partition] = {f"root{i}": Partition(f"root{i}", T0) for i in range(roots)}
    done: dict[str, Partition] = {}
    times = sorted(rng.sample(range(1, int(horizon.total_seconds()) - 60), operations))
    serial = 0
    for second in times:
        at = T0 + timedelta(seconds=second)
        ready = [p for p in alive.values() if p.start < at]
        if not ready:
            continue
        if len(ready) >= 2 and (len(alive) > 6 or rng.random() < 0.35):
            ended = rng.sample(ready, rng.randint(2, min(3, len(ready))))
            births = 1
        else:
            ended = [rng.choice(ready)]
            births = 1 if rng.random() < 0.2 else rng.randint(2, 3)
        parents = tuple(sorted(p.token for p in ended))
        kids = []
        for _ in range(births):
            serial += 1
            kids.append(Partition(f"p{serial:03d}", at, parents=parents))
        announced = tuple(ChildPartition(k.token, parents) for k in kids)
        for parent in ended:
            del alive[parent.token]
            done[parent.token] = Partition(parent.token, parent.start, at, announced, parent.parents)
        alive.update((k.token, k) for k in kids)
    return {**done, **alive}


def windows(horizon: timedelta, size: timedelta) -> list[tuple[datetime, datetime]]:
    count = int(horizon / size)
    return [(T0 + i * size, T0 + (i + 1) * size) for i in range(count)]


def fault_plan(topology: dict[str, Partition], seed: int) -> dict[tuple[str, int], str]:
    """(token, attempt) -> fault, whichever worker claims it.

fail: the attempt fails; abandon: the claim is dropped and its lease left to expire; crash: the
process dies holding its claims; zombie: the worker stalls past its lease, then tries to complete
while slow, the worker that took the token over, still holds it.
"""
    rng = random.Random(seed)
    tokens = sorted(topology)
    plan: dict[tuple[str, int], str] = {}
    for token in rng.sample(tokens, max(1, len(tokens) // 8)):
        plan[(token, 1)] = "fail"
    for token in rng.sample(tokens, max(1, len(tokens) // 8)):
        plan.setdefault((token, 2), "abandon")
    for token in rng.sample(tokens, 3):
        plan[(token, 1)] = "zombie"
        plan[(token, 2)] = "slow"
    for token in rng.sample(tokens, 3):
        plan[(token, 1)] = "crash"
    return plan


def iso(value: datetime) -> str:
    return value.strftime("%Y%m%dT%H%M%S.%fZ")


def land(store: MetadataStore, claim: Claim, part: Partition, window: tuple[datetime, datetime]) -> list[str]:
    """Pretend to read the token over [read_from, E - 1 µs], then commit the range as the extract would."""
    window_start, window_end = window
    last = window_end - US
    if part.end is not None and part.end <= last:
        range_end, finished = part.end - US, True
        children = [ChildPartitionsRecord(part.end, "0", part.children)]
    else:
        range_end, finished, children = last, False, []
    files = []
    if claim.read_from <= range_end:
        path = f"lake/{part.token}/{iso(claim.read_from)}-{iso(range_end)}.parquet"
        files.append(ManifestFile(path, part.token, claim.read_from, range_end, window_start, window_end, 1, 100))
    return store.complete(
        claim,
        watermark=range_end,
        finished=finished,
        children=children,
        files=files,
        records=len(files),
        window_start=window_start,
        window_end=window_end,
    )


def wait_until_reclaimed(store: MetadataStore, claim: Claim, timeout: float = 30.0) -> None:
    """Stall like a paused worker until another worker has taken the token over (or give up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = next(p for p in store.partitions(claim.lineage_id) if p.token == claim.token)
        if row.attempts > claim.attempt:
            return
        store.expire_leases(claim.lineage_id)
        time.sleep(0.05)  # polling the store: the takeover is another process's doing


def work(
    url: str,
    lineage_id: int,
    topology: dict[str, Partition],
    plan: dict[tuple[str, int], str],
    all_windows: list[tuple[datetime, datetime]],
    name: str,
    events_path: str,
    seed: int,
) -> None:
    """One worker process: for each window in turn, claim and land tokens until the window is complete."""
    rng = random.Random(seed)
    store = MetadataStore.connect(url)
    with open(events_path, "a", encoding="utf-8") as events:

        def event(kind: str, **fields: object) -> None:
            events.write(json.dumps({"event": kind, "worker": name, "at": time.time(), **fields}) + "\n")
            events.flush()  # the process may os._exit next

        for window in all_windows:
            while True:
                if store.window_status(lineage_id, *window).complete:
                    store.close_window(lineage_id, *window, records=0, files=0, transaction_check={}, marker_path=None)
                    break
                claims = store.claim(lineage_id, window_end=window[1], owner=name, lease=LEASE, limit=rng.randint(1, 2))
                if not claims:
                    if store.expire_leases(lineage_id) == 0:
                        time.sleep(0.02)  # polling: the remaining tokens are leased to others
                    continue
                for claim in claims:
                    fault = plan.get((claim.token, claim.attempt))
                    event("claimed", token=claim.token, attempt=claim.attempt, fault=fault)
                    if fault == "crash":
                        os._exit(CRASH_EXIT)
                    if fault == "abandon":
                        continue
                    if fault == "zombie":
                        wait_until_reclaimed(store, claim)
                    try:
                        if fault == "slow":
                            claim = store.renew(claim, timedelta(seconds=30))
                            time.sleep(0.5)  # a long read, during which the stalled zombie wakes up
                        if fault == "fail":
                            store.fail(claim, "simulated read error")
                            continue
                        promoted = land(store, claim, topology[claim.token], window)
                    except LeaseLost:
                        event("lease_lost", token=claim.token, attempt=claim.attempt)
                        continue
                    event("completed", token=claim.token, attempt=claim.attempt, promoted=promoted)
    store.close()
