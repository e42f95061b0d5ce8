"""Partition state machine on a real Postgres: claim, lease, complete, fail, splits and merges."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import Claim, LeaseLost, ManifestFile, MetadataStore, PartitionRow, State

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
W1 = T0 + timedelta(hours=1)
LEASE = timedelta(minutes=5)


def new_lineage(store: MetadataStore, roots: tuple[str, ...] = ("r1", "r2")) -> int:
    lineage = store.ensure_lineage("s_" + uuid.uuid4().hex[:8], "live", database="cdc")
    store.bootstrap(lineage.id, T0, [ChildPartition(t, ()) for t in roots])
    return lineage.id


def record(at: datetime, *children: tuple[str, tuple[str, ...]]) -> ChildPartitionsRecord:
    return ChildPartitionsRecord(at, "1", tuple(ChildPartition(t, parents) for t, parents in children))


def attempts(store: MetadataStore, lineage_id: int, token: str) -> list[sa.Row]:
    with store._db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text("SELECT * FROM cdc_attempts WHERE lineage_id = :l AND token = :t ORDER BY attempt"),
                {"l": lineage_id, "t": token},
            )
        )


def by_token(store: MetadataStore, lineage_id: int) -> dict[str, PartitionRow]:
    return {p.token: p for p in store.partitions(lineage_id)}


def test_bootstrap_is_idempotent(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    assert store.bootstrap(lineage_id, T0, [ChildPartition("a", ()), ChildPartition("c", ())]) == 1
    rows = store.partitions(lineage_id)
    assert [(p.token, p.state, p.start, p.watermark) for p in rows] == [
        ("a", State.READY, T0, None),
        ("b", State.READY, T0, None),
        ("c", State.READY, T0, None),
    ]
    assert all(p.ready_at is not None and p.parents == () for p in rows)


def test_claim_leases_each_token_to_one_worker(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b", "c"))
    first = store.claim(lineage_id, window_end=W1, owner="w1", lease=LEASE, limit=2)
    second = store.claim(lineage_id, window_end=W1, owner="w2", lease=LEASE)
    third = store.claim(lineage_id, window_end=W1, owner="w3", lease=LEASE)
    assert [c.token for c in first] == ["a", "b"]
    assert [c.token for c in second] == ["c"]
    assert third == []
    claim = first[0]
    assert (claim.owner, claim.attempt, claim.watermark, claim.read_from) == ("w1", 1, None, T0)
    assert claim.lease_expires_at > datetime.now(UTC) + LEASE - timedelta(minutes=1)
    row = by_token(store, lineage_id)["a"]
    assert (row.state, row.lease_owner, row.attempts) == (State.RUNNING, "w1", 1)
    assert row.running_at is not None
    [attempt] = attempts(store, lineage_id, "a")
    assert (attempt.owner, attempt.outcome, attempt.read_from, attempt.window_end) == ("w1", "RUNNING", T0, W1)


def test_claim_only_takes_tokens_with_something_left_in_the_window(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    store.complete(claim, watermark=W1 - US, finished=False)
    assert store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE) == []
    assert store.ready_tokens(lineage_id, W1) == []
    assert [p.token for p in store.ready_tokens(lineage_id, W1 + timedelta(hours=1))] == ["a"]
    [again] = store.claim(lineage_id, window_end=W1 + timedelta(hours=1), owner="w", lease=LEASE)
    assert again.read_from == W1
    assert again.attempt == 2
    # a partition starting at the window end belongs to the next window
    late = new_lineage(store, ())
    store.bootstrap(late, W1, [ChildPartition("z", ())])
    assert store.claim(late, window_end=W1, owner="w", lease=LEASE) == []


def test_the_plans_reads_agree_with_the_partition_rows(store: MetadataStore) -> None:
    """ready_reads, held_tokens and lineage_start (what a window's plan reads) say what the full rows say."""
    empty = store.ensure_lineage("s_" + uuid.uuid4().hex[:8], "live", database="cdc").id
    assert store.lineage_start(empty) is None
    assert store.ready_reads(empty, W1) == []
    lineage_id = new_lineage(store, ("a", "b", "c", "d"))
    store.bootstrap(lineage_id, T0 + timedelta(minutes=5), [ChildPartition("e", ())])
    a, b, c = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE, tokens=["a", "b", "c"])
    store.complete(a, watermark=T0 + timedelta(minutes=10), finished=False)  # READY, read from just after its watermark
    store.complete(b, watermark=W1 - US, finished=False)  # READY, nothing left in the window
    store.complete(c, watermark=T0 + timedelta(minutes=20), finished=True, children=[record(T0 + timedelta(minutes=20), ("c1", ("c",)), ("c2", ("c", "x")))])
    [d] = store.claim(lineage_id, window_end=W1, owner="w2", lease=LEASE, tokens=["d"])  # RUNNING
    for end in (W1, W1 + timedelta(hours=1)):
        rows = store.ready_tokens(lineage_id, end)
        assert store.ready_reads(lineage_id, end) == [(p.token, p.read_from) for p in rows]
        assert all(start.tzinfo is UTC for _, start in store.ready_reads(lineage_id, end))
    assert store.ready_reads(lineage_id, W1) == [
        ("e", T0 + timedelta(minutes=5)), ("a", T0 + timedelta(minutes=10) + US), ("c1", T0 + timedelta(minutes=20))
    ]  # fmt: skip
    assert store.held_tokens(lineage_id, W1) == ["d"]
    assert store.schedule(lineage_id, window_end=W1, owner="planner", lease=LEASE, limit=1) == ["e"]
    assert store.held_tokens(lineage_id, W1) == ["d", "e"]
    store.complete(d, watermark=W1 - US, finished=False)
    assert store.held_tokens(lineage_id, W1) == ["e"]
    assert store.lineage_start(lineage_id) == T0


def test_claim_can_be_restricted_to_named_tokens(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b", "c"))
    claims = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE, tokens=["c", "nope"])
    assert [c.token for c in claims] == ["c"]
    assert store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE, limit=0) == []


def test_complete_advances_the_watermark_publishes_files_and_releases(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    file = ManifestFile("orders/live/a/0.parquet", "a", T0, W1 - US, T0, W1, 10, 1000, "Orders")
    assert store.complete(claim, watermark=W1 - US, finished=False, files=[file], records=10) == []
    row = by_token(store, lineage_id)["a"]
    assert (row.state, row.watermark, row.lease_owner, row.lease_expires_at) == (State.READY, W1 - US, None, None)
    assert store.manifest(lineage_id) == [file]
    [attempt] = attempts(store, lineage_id, "a")
    assert (attempt.outcome, attempt.watermark_after, attempt.records, attempt.files) == ("COMPLETED", W1 - US, 10, 1)
    with pytest.raises(LeaseLost, match="no longer holds it"):
        store.complete(claim, watermark=W1 - US, finished=False)


def test_watermark_never_goes_backwards_and_a_retry_replaces_its_file(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    path = "lake/a/range.parquet"
    store.complete(claim, watermark=W1 - US, finished=False, files=[ManifestFile(path, "a", T0, W1 - US, T0, W1, 5, 50)])
    [claim] = store.claim(lineage_id, window_end=W1 + timedelta(hours=1), owner="w", lease=LEASE)
    retried = ManifestFile(path, "a", T0, W1 - US, T0, W1, 7, 70)
    store.complete(claim, watermark=T0, finished=False, files=[retried])
    assert by_token(store, lineage_id)["a"].watermark == W1 - US
    assert store.manifest(lineage_id) == [retried]
    rows = attempts(store, lineage_id, "a")
    assert [r.watermark_after for r in rows] == [W1 - US, W1 - US]


def test_manifest_filters_by_window(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    w2 = W1 + timedelta(hours=1)
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    first = ManifestFile("a/1.parquet", "a", T0, W1 - US, None, None, 1, 1)
    store.complete(claim, watermark=W1 - US, finished=False, files=[first], window_start=T0, window_end=W1)
    [claim] = store.claim(lineage_id, window_end=w2, owner="w", lease=LEASE)
    second = ManifestFile("a/2.parquet", "a", W1, w2 - US, W1, w2, 1, 1)
    store.complete(claim, watermark=w2 - US, finished=False, files=[second])
    assert [f.path for f in store.manifest(lineage_id, window_start=T0, window_end=W1)] == ["a/1.parquet"]
    assert [f.path for f in store.manifest(lineage_id, window_start=W1, window_end=w2)] == ["a/2.parquet"]
    assert [f.path for f in store.manifest(lineage_id, window_start=T0, window_end=w2)] == ["a/1.parquet", "a/2.parquet"]
    assert store.manifest(lineage_id, window_start=T0, window_end=W1)[0].window_start == T0


def test_split_children_are_ready_in_the_same_transaction(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("p",))
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    split_at = T0 + timedelta(minutes=20)
    promoted = store.complete(
        claim, watermark=split_at - US, finished=True, children=[record(split_at, ("c1", ("p",)), ("c2", ("p",)))]
    )
    assert promoted == ["c1", "c2"]
    rows = by_token(store, lineage_id)
    assert (rows["p"].state, rows["p"].end, rows["p"].children) == (State.FINISHED, split_at, ("c1", "c2"))
    for child in ("c1", "c2"):
        assert (rows[child].state, rows[child].start, rows[child].parents) == (State.READY, split_at, ("p",))
        assert rows[child].ready_at >= rows["p"].finished_at
    claims = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    assert [(c.token, c.read_from) for c in claims] == [("c1", split_at), ("c2", split_at)]


def test_merge_child_is_created_once_and_ready_after_all_parents_finish(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    merge_at = T0 + timedelta(minutes=30)
    merged = record(merge_at, ("m", ("a", "b")))
    claim_a, claim_b = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    assert store.complete(claim_a, watermark=merge_at - US, finished=True, children=[merged]) == []
    assert by_token(store, lineage_id)["m"].state is State.CREATED
    assert store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE) == []
    assert store.complete(claim_b, watermark=merge_at - US, finished=True, children=[merged]) == ["m"]
    rows = by_token(store, lineage_id)
    assert (rows["m"].state, rows["m"].parents, rows["m"].start) == (State.READY, ("a", "b"), merge_at)
    assert rows["m"].ready_at >= max(rows["a"].finished_at, rows["b"].finished_at)
    assert len(store.partitions(lineage_id)) == 3


def test_merge_child_waits_for_a_parent_the_lineage_does_not_know_yet(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "x"))
    later = T0 + timedelta(minutes=40)
    claim_a, claim_x = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    # a announces m whose other parent b is a child of x that nobody has read yet
    assert store.complete(claim_a, watermark=later - US, finished=True, children=[record(later, ("m", ("a", "b")))]) == []
    assert by_token(store, lineage_id)["m"].state is State.CREATED
    split = T0 + timedelta(minutes=10)
    assert store.complete(claim_x, watermark=split - US, finished=True, children=[record(split, ("b", ("x",)))]) == ["b"]
    assert by_token(store, lineage_id)["m"].state is State.CREATED
    [claim_b] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    assert store.complete(claim_b, watermark=later - US, finished=True, children=[record(later, ("m", ("a", "b")))]) == ["m"]


def test_expired_lease_is_reclaimed_and_the_old_holder_loses_it(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [stale] = store.claim(lineage_id, window_end=W1, owner="slow", lease=timedelta(0))
    [fresh] = store.claim(lineage_id, window_end=W1, owner="fast", lease=LEASE)
    assert (fresh.token, fresh.attempt, fresh.owner) == ("a", 2, "fast")
    with pytest.raises(LeaseLost, match=r"attempt 1 of slow no longer holds it \(now RUNNING, attempt 2, owner fast\)"):
        store.complete(stale, watermark=W1 - US, finished=True)
    with pytest.raises(LeaseLost):
        store.renew(stale, LEASE)
    with pytest.raises(LeaseLost):
        store.fail(stale, "late")
    renewed = store.renew(fresh, timedelta(hours=1))
    assert renewed.lease_expires_at > fresh.lease_expires_at
    store.complete(renewed, watermark=W1 - US, finished=False)
    outcomes = [(r.attempt, r.owner, r.outcome) for r in attempts(store, lineage_id, "a")]
    assert outcomes == [(1, "slow", "EXPIRED"), (2, "fast", "COMPLETED")]


def test_expire_leases_returns_abandoned_tokens_to_ready(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    store.claim(lineage_id, window_end=W1, owner="crashed", lease=timedelta(0), tokens=["a"])
    store.claim(lineage_id, window_end=W1, owner="alive", lease=LEASE, tokens=["b"])
    assert store.expire_leases(lineage_id) == 1
    assert store.expire_leases(lineage_id) == 0
    rows = by_token(store, lineage_id)
    assert (rows["a"].state, rows["a"].lease_owner, rows["b"].state) == (State.READY, None, State.RUNNING)
    assert [r.outcome for r in attempts(store, lineage_id, "a")] == ["EXPIRED"]


def test_fail_records_the_error_and_makes_the_token_ready_again(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    store.fail(claim, "DEADLINE_EXCEEDED reading partition")
    row = by_token(store, lineage_id)["a"]
    assert (row.state, row.last_error, row.lease_owner, row.watermark) == (
        State.READY, "DEADLINE_EXCEEDED reading partition", None, None,
    )
    [retry] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    assert retry.attempt == 2
    store.complete(retry, watermark=W1 - US, finished=False)
    assert by_token(store, lineage_id)["a"].last_error is None
    history = [(r.outcome, r.error) for r in attempts(store, lineage_id, "a")]
    assert history == [("FAILED", "DEADLINE_EXCEEDED reading partition"), ("COMPLETED", None)]


def test_scheduled_tokens_are_claimed_only_by_the_task_that_names_them(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    assert store.schedule(lineage_id, window_end=W1, owner="planner", lease=LEASE, limit=1) == ["a"]
    row = by_token(store, lineage_id)["a"]
    assert (row.state, row.scheduled_at is not None) == (State.SCHEDULED, True)
    assert [c.token for c in store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE)] == ["b"]
    [task] = store.claim(lineage_id, window_end=W1, owner="task-a", lease=LEASE, tokens=["a"])
    assert (task.token, task.attempt) == ("a", 1)


def test_bad_input_is_refused_clearly(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    with pytest.raises(ValueError, match="timezone-aware"):
        store.claim(lineage_id, window_end=datetime(2025, 3, 1, 1), owner="w", lease=LEASE)
    [claim] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    with pytest.raises(ValueError, match="belongs to token b, not a"):
        store.complete(claim, watermark=W1 - US, finished=False, files=[ManifestFile("x", "b", T0, T0, T0, W1, 1, 1)])
    ghost = Claim(lineage_id, "ghost", T0, None, "w", 1, W1)
    with pytest.raises(LeaseLost, match="unknown to the lineage"):
        store.complete(ghost, watermark=W1, finished=False)


def test_low_watermark_is_the_slowest_unfinished_partition(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    assert store.low_watermark(lineage_id) == T0 - US
    claim_a, claim_b = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    store.complete(claim_a, watermark=W1 - US, finished=False)
    store.complete(claim_b, watermark=T0 + timedelta(minutes=5), finished=False)
    assert store.low_watermark(lineage_id) == T0 + timedelta(minutes=5)
    [claim_b] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    split = T0 + timedelta(minutes=10)
    store.complete(claim_b, watermark=split - US, finished=True, children=[record(split, ("c", ("b",)))])
    assert store.low_watermark(lineage_id) == split - US


def test_mutable_partitions_start_ready_end_finished_and_keep_moves(store: MetadataStore) -> None:
    from spanner_cdc.model.records import PartitionEventRecord, PartitionStartRecord

    lineage_id = new_lineage(store, ("a",))
    (claim,) = store.claim(lineage_id, window_end=W1, owner="w1", lease=LEASE, limit=1)
    split_at = T0 + timedelta(minutes=5)
    started = [PartitionStartRecord(split_at, "00000000", ("b",))]
    moves = [PartitionEventRecord(split_at, "00000001", "a", (), ("b",))]
    ready = store.complete(claim, watermark=W1 - US, finished=False, started=started, moves=moves)
    assert ready == ["b"]  # READY at once: a started partition waits for no parent
    rows = by_token(store, lineage_id)
    assert (rows["b"].state, rows["b"].start, rows["b"].parents) == (State.READY, split_at, ())
    # b's own read sees the paired move-in and its end; the move is kept once, b is finished
    (claim_b,) = store.claim(lineage_id, window_end=W1, owner="w1", lease=LEASE, limit=1)
    ended = split_at + timedelta(minutes=1)
    assert store.complete(
        claim_b, watermark=ended, finished=True, moves=[PartitionEventRecord(split_at, "00000000", "b", ("a",), ())],
        started=started,  # announced again: nothing new
    ) == []  # fmt: skip
    rows = by_token(store, lineage_id)
    assert (rows["b"].state, rows["b"].watermark, rows["b"].end) == (State.FINISHED, ended, ended + US)
    with store._db.engine.connect() as conn:
        edges = conn.execute(
            sa.text("SELECT source_token, destination_token, moved_at FROM cdc_partition_moves WHERE lineage_id = :l"),
            {"l": lineage_id},
        ).all()
    assert [tuple(e) for e in edges] == [("a", "b", split_at)]
    from spanner_cdc.store.render import render

    graph = store.graph(lineage_id)
    assert graph.moves == (("a", "b", split_at),)
    text, dot = render(graph, "text"), render(graph, "dot")
    assert "key range moves: 1" in text and "2025-03-01T00:05:00" in text.split("key range moves: 1")[1]
    assert '"a" -> "b" [style=dashed' in dot
