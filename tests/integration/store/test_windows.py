"""Window completeness and closing on a real Postgres."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from spanner_cdc.errors import NotFound, StoreError
from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import MetadataStore
from spanner_cdc.store.manifest import WINDOW_LOCK_CLASS

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, tzinfo=UTC)
US = timedelta(microseconds=1)
W1 = T0 + timedelta(hours=1)
W2 = W1 + timedelta(hours=1)
LEASE = timedelta(minutes=5)


def test_window_completes_only_when_every_alive_partition_is_done(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("orders", "live")
    store.bootstrap(lineage.id, T0, [ChildPartition("a", ()), ChildPartition("b", ())])
    opened = store.open_window(lineage.id, T0, W1)
    assert (opened.state, opened.closed_at) == ("OPEN", None)
    status = store.window_status(lineage.id, T0, W1)
    assert (status.complete, status.partitions, dict(status.pending)) == (False, 2, {"READY": ("a", "b")})

    claim_a, claim_b = store.claim(lineage.id, window_end=W1, owner="w", lease=LEASE)
    split = T0 + timedelta(minutes=50)
    store.complete(
        claim_a,
        watermark=split - US,
        finished=True,
        children=[ChildPartitionsRecord(split, "1", (ChildPartition("c", ("a",)),))],
    )
    store.complete(claim_b, watermark=W1 - US, finished=False)
    status = store.window_status(lineage.id, T0, W1)
    assert (status.complete, dict(status.pending), status.pending_count) == (False, {"READY": ("c",)}, 1)
    with pytest.raises(StoreError, match=r"is not complete: 1 of 3 partitions pending \(READY: c\)"):
        store.close_window(lineage.id, T0, W1, records=0, files=0, transaction_check={}, marker_path=None)

    [claim_c] = store.claim(lineage.id, window_end=W1, owner="w", lease=LEASE)
    assert claim_c.read_from == split
    store.complete(claim_c, watermark=W1 - US, finished=False)
    assert store.window_status(lineage.id, T0, W1).complete
    # the next window still waits for every live partition
    assert dict(store.window_status(lineage.id, W1, W2).pending) == {"READY": ("b", "c")}

    closed = store.close_window(
        lineage.id, T0, W1, records=12, files=3, transaction_check={"split_transactions": 0}, marker_path="_windows/1"
    )
    assert (closed.state, closed.records, closed.files, closed.marker_path) == ("COMPLETE", 12, 3, "_windows/1")
    assert closed.transaction_check == {"split_transactions": 0}
    assert closed.opened_at == opened.opened_at and closed.closed_at is not None
    again = store.close_window(lineage.id, T0, W1, records=99, files=9, transaction_check={}, marker_path=None)
    assert again == closed, "closing twice keeps the first close"
    assert store.window_status(lineage.id, T0, W1).closed
    assert [(w.start, w.end, w.state) for w in store.windows(lineage.id)] == [(T0, W1, "COMPLETE")]


def test_a_window_before_the_lineage_starts_is_never_complete(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("late", "live")
    store.bootstrap(lineage.id, W1, [ChildPartition("a", ())])
    status = store.window_status(lineage.id, T0, W1)
    assert (status.complete, status.partitions) == (False, 0)
    with pytest.raises(StoreError, match="no partition covers it"):
        store.close_window(lineage.id, T0, W1, records=0, files=0, transaction_check={}, marker_path=None)


def test_lineages_are_per_stream_and_namespace(store: MetadataStore) -> None:
    live = store.ensure_lineage("payments", "live", database="cdc")
    backfill = store.ensure_lineage("payments", "backfill_20250301", database="cdc")
    assert live.id != backfill.id
    assert store.ensure_lineage("payments", "live") == live
    assert store.get_lineage("payments", "live") == live
    assert store.lineage(backfill.id) == backfill
    assert {"payments/live", "payments/backfill_20250301"} <= {lin.name for lin in store.lineages()}
    with pytest.raises(StoreError, match="belongs to Spanner database 'cdc', not 'other'"):
        store.ensure_lineage("payments", "live", database="other")


def test_missing_lineage_is_a_clear_not_found(store: MetadataStore) -> None:
    store.ensure_lineage("known", "live")
    with pytest.raises(NotFound, match=r"no lineage for stream 'unknown' in namespace 'live' .*known lineages: .*known/live"):
        store.get_lineage("unknown", "live")
    with pytest.raises(NotFound, match="no lineage with id 999999"):
        store.window_status(999999, T0, W1)
    with pytest.raises(NotFound, match="no lineage with id 999999"):
        store.graph(999999)
    with pytest.raises(NotFound, match="no lineage with id 999999"):
        store.bootstrap(999999, T0, [ChildPartition("a", ())])


def test_graph_reads_nodes_edges_and_windows(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("graphed", "live")
    store.bootstrap(lineage.id, T0, [ChildPartition("a", ())])
    [claim] = store.claim(lineage.id, window_end=W1, owner="w", lease=LEASE)
    split = T0 + timedelta(minutes=5)
    record = ChildPartitionsRecord(split, "1", (ChildPartition("b", ("a",)), ChildPartition("c", ("a",))))
    store.complete(claim, watermark=split - US, finished=True, children=[record])
    graph = store.graph(lineage.id)
    assert graph.lineage == lineage
    assert [n.token for n in graph.nodes] == ["a", "b", "c"]
    assert graph.edges == (("a", "b"), ("a", "c"))
    assert graph.low_watermark == split - US
    assert graph.windows == ()


def test_window_lock_lets_one_closer_in_at_a_time(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("locked", "live")
    url = store._db.engine.url.render_as_string(hide_password=False)
    entered = threading.Event()

    def second_closer() -> None:
        with MetadataStore.connect(url) as other, other.window_lock(lineage.id, T0, W1):
            entered.set()

    def waiting() -> int:
        with store._db.engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = :c AND NOT granted"),
                    {"c": WINDOW_LOCK_CLASS},
                ).scalar_one()
            )

    with store.window_lock(lineage.id, T0, W1):
        with store.window_lock(lineage.id, W1, W2):
            pass  # another window's lock is another lock
        thread = threading.Thread(target=second_closer)
        thread.start()
        deadline = time.monotonic() + 10
        while not waiting() and time.monotonic() < deadline:
            time.sleep(0.02)  # polling the other thread's lock request
        assert waiting() == 1 and not entered.is_set()
    thread.join(timeout=30)
    assert entered.is_set() and waiting() == 0


def test_a_failed_check_is_kept_on_the_open_window_until_a_passing_close_replaces_it(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("orders", "failing")
    store.open_window(lineage.id, T0, W1)
    store.record_failed_check(lineage.id, T0, W1, {"ok": False, "mismatched": 2})
    [window] = store.windows(lineage.id)
    assert (window.state, window.transaction_check) == ("OPEN", {"ok": False, "mismatched": 2})
    store.bootstrap(lineage.id, T0, [ChildPartition("a", ())])
    [claim] = store.claim(lineage.id, window_end=W1, owner="w", lease=LEASE)
    store.complete(claim, watermark=W1 - US, finished=False)
    store.close_window(lineage.id, T0, W1, records=1, files=1, transaction_check={"ok": True}, marker_path="m")
    store.record_failed_check(lineage.id, T0, W1, {"ok": False})  # a closed window's check is never replaced
    assert [w.transaction_check for w in store.windows(lineage.id)] == [{"ok": True}]


def test_the_streams_retention_is_kept_with_the_lineage(store: MetadataStore) -> None:
    lineage = store.ensure_lineage("orders", "kept")
    assert lineage.retention_period_s is None
    store.record_retention(lineage.id, timedelta(days=1))
    assert store.get_lineage("orders", "kept").retention_period_s == 86_400
    store.record_retention(lineage.id, timedelta(hours=36))  # the stream's option was changed
    assert [ln.retention_period_s for ln in store.lineages() if ln.namespace == "kept"] == [129_600]
    with pytest.raises(ValueError, match="positive"):
        store.record_retention(lineage.id, timedelta(0))
