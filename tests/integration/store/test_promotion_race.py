"""The last parents of a merge finish at the same moment in two connections: the child is promoted exactly once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import MetadataStore, State

pytestmark = pytest.mark.integration

T0 = datetime(2025, 4, 1, tzinfo=UTC)
W1 = T0 + timedelta(hours=1)
MERGE_AT = T0 + timedelta(minutes=30)
MERGES = 40


def merged(i: int) -> ChildPartitionsRecord:
    parents = tuple(f"{side}{i:02d}" for side in "abc")
    return ChildPartitionsRecord(MERGE_AT, "1", (ChildPartition(f"m{i:02d}", parents),))


def test_simultaneous_last_parents_promote_their_merge_child_exactly_once(pg_url: str) -> None:
    setup = MetadataStore.connect(pg_url)
    setup.upgrade()
    lineage = setup.ensure_lineage("race", "live")
    setup.bootstrap(lineage.id, T0, [ChildPartition(f"{side}{i:02d}", ()) for i in range(MERGES) for side in "abc"])
    claims = {c.token: c for c in setup.claim(lineage.id, window_end=W1, owner="w", lease=timedelta(hours=1))}
    watermark = MERGE_AT - timedelta(microseconds=1)
    # parent a finishes first and creates the child, so b and c do not queue on inserting it
    for i in range(MERGES):
        assert setup.complete(claims[f"a{i:02d}"], watermark=watermark, finished=True, children=[merged(i)]) == []

    stores = [MetadataStore.connect(pg_url), MetadataStore.connect(pg_url)]
    barrier = threading.Barrier(2)
    promoted: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def finish(side: int) -> None:
        try:
            for i in range(MERGES):
                barrier.wait(timeout=30)
                claim = claims[f"{'bc'[side]}{i:02d}"]
                promoted[side] += stores[side].complete(claim, watermark=watermark, finished=True, children=[merged(i)])
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=finish, args=(side,)) for side in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(promoted[0] + promoted[1]) == [f"m{i:02d}" for i in range(MERGES)]
    rows = {p.token: p for p in setup.partitions(lineage.id)}
    for i in range(MERGES):
        child = rows[f"m{i:02d}"]
        assert child.state is State.READY
        assert child.parents == (f"a{i:02d}", f"b{i:02d}", f"c{i:02d}")
        assert child.ready_at >= max(rows[p].finished_at for p in child.parents)
    for store in (*stores, setup):
        store.close()
