"""Claims tied to the life of the run that holds them: a dead run's tokens are claimable at once, a live one's never."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.model.records import ChildPartition
from spanner_cdc.store import LeaseLost, MetadataStore, State
from spanner_cdc.store.liveness import LIVENESS_LOCK_CLASS

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2025, 3, 1, tzinfo=UTC)
W1 = T0 + timedelta(hours=1)
US = timedelta(microseconds=1)
LEASE = timedelta(seconds=300)  # the default lease: nothing in these tests waits for it
BACKEND_EXIT_S = 10.0  # how long a killed process's backend may take to notice its socket closed


def new_lineage(store: MetadataStore, roots: tuple[str, ...]) -> int:
    lineage = store.ensure_lineage("live_" + uuid.uuid4().hex[:8], "live")
    store.bootstrap(lineage.id, T0, [ChildPartition(t, ()) for t in roots])
    return lineage.id


def lock_holders(store: MetadataStore, key: int) -> list[int]:
    """Backend pids holding `key`'s liveness lock."""
    with store._db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = :c AND objid = :k "
                    "AND objsubid = 2 AND granted"
                ),
                {"c": LIVENESS_LOCK_CLASS, "k": key},
            ).scalars()
        )


def backend_alive(store: MetadataStore, pid: int) -> bool:
    with store._db.engine.connect() as conn:
        return bool(conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :p"), {"p": pid}).scalar_one())


def attempts(store: MetadataStore, lineage_id: int) -> list[Any]:
    with store._db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text("SELECT token, attempt, owner, outcome, error FROM cdc_attempts WHERE lineage_id = :l ORDER BY token, attempt"),
                {"l": lineage_id},
            )
        )


@pytest.fixture
def holder(store: MetadataStore) -> Iterator[Any]:
    """start(lineage_id, owner) -> (process, report): a real process that claims with the 300 s lease and stays alive."""
    started: list[subprocess.Popen[str]] = []

    def start(lineage_id: int, owner: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        url = store._db.engine.url.render_as_string(hide_password=False)
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.store.claim_holder", url, str(lineage_id), W1.isoformat(), owner],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        started.append(process)
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, f"the claiming process died: {process.communicate()[1][-2000:]}"
        return process, json.loads(line)

    yield start
    for process in started:
        process.kill()
        process.communicate()


def test_a_live_runs_claims_are_not_claimable_by_another(store: MetadataStore, holder: Any) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    process, report = holder(lineage_id, "alive")
    assert report["tokens"] == ["a", "b"]
    assert store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE) == []
    assert store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE, tokens=["a", "b"]) == []
    assert store.expire_leases(lineage_id) == 0
    assert process.poll() is None
    assert {p.token: (p.state, p.lease_owner) for p in store.partitions(lineage_id)} == {
        "a": (State.RUNNING, "alive"), "b": (State.RUNNING, "alive"),
    }  # fmt: skip


def test_a_sigkilled_runs_claims_are_claimable_at_once(store: MetadataStore, holder: Any) -> None:
    lineage_id = new_lineage(store, ("a", "b", "c"))
    process, report = holder(lineage_id, "doomed")
    [pid] = lock_holders(store, report["key"])
    assert store.claim(lineage_id, window_end=W1, owner="rerun", lease=LEASE) == []
    process.send_signal(signal.SIGKILL)
    process.wait()
    # the kernel closes the dead process's socket; its backend reads EOF and exits, dropping the lock
    deadline = time.monotonic() + BACKEND_EXIT_S
    while lock_holders(store, report["key"]) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling another process's exit
    assert lock_holders(store, report["key"]) == [], "the killed process's backend kept its liveness lock"
    assert not backend_alive(store, pid)
    claims = store.claim(lineage_id, window_end=W1, owner="rerun", lease=LEASE)
    assert [(c.token, c.attempt) for c in claims] == [("a", 2), ("b", 2), ("c", 2)]
    assert all(c.lease_expires_at > datetime.now(UTC) + LEASE - timedelta(minutes=1) for c in claims)
    history = [(r.token, r.attempt, r.owner, r.outcome, r.error) for r in attempts(store, lineage_id)]
    died = "its run died (liveness lock free); reclaimed by rerun"
    assert history == [
        ("a", 1, "doomed", "EXPIRED", died), ("a", 2, "rerun", "RUNNING", None),
        ("b", 1, "doomed", "EXPIRED", died), ("b", 2, "rerun", "RUNNING", None),
        ("c", 1, "doomed", "EXPIRED", died), ("c", 2, "rerun", "RUNNING", None),
    ]  # fmt: skip


def test_expire_leases_releases_a_dead_runs_tokens_and_says_why(store: MetadataStore, holder: Any) -> None:
    lineage_id = new_lineage(store, ("a",))
    process, report = holder(lineage_id, "doomed")
    process.kill()
    process.wait()
    deadline = time.monotonic() + BACKEND_EXIT_S
    while lock_holders(store, report["key"]) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling another process's exit
    assert store.expire_leases(lineage_id) == 1
    [row] = store.partitions(lineage_id)
    assert (row.state, row.lease_owner) == (State.READY, None)
    assert [(r.outcome, r.error) for r in attempts(store, lineage_id)] == [("EXPIRED", "its run died (liveness lock free)")]


def test_closing_the_store_frees_what_its_owner_still_holds(store: MetadataStore) -> None:
    """Freed when close returns, not when the closed session's backend gets round to exiting."""
    lineage_id = new_lineage(store, ("a",))
    url = store._db.engine.url.render_as_string(hide_password=False)
    with MetadataStore.connect(url) as other:
        [claim] = other.claim(lineage_id, window_end=W1, owner="leaving", lease=LEASE)
        key = other._liveness.key("leaving")
        assert store.claim(lineage_id, window_end=W1, owner="next", lease=LEASE) == []
    assert lock_holders(store, key) == []
    [taken] = store.claim(lineage_id, window_end=W1, owner="next", lease=LEASE)
    assert (taken.token, taken.attempt) == ("a", 2)


def test_a_lease_only_claim_waits_for_its_lease(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    url = store._db.engine.url.render_as_string(hide_password=False)
    with MetadataStore.connect(url) as other:
        other.claim(lineage_id, window_end=W1, owner="pooled", lease=LEASE, liveness=False)
    assert store.claim(lineage_id, window_end=W1, owner="next", lease=LEASE) == []
    assert store.expire_leases(lineage_id) == 0


def test_a_lost_liveness_connection_is_noticed_and_its_lock_taken_again(store: MetadataStore) -> None:
    """As after a Postgres restart: until the run re-takes its lock its tokens look dead, and a token taken
    over meanwhile cannot be committed by the old holder."""
    lineage_id = new_lineage(store, ("a", "b"))
    url = store._db.engine.url.render_as_string(hide_password=False)
    with MetadataStore.connect(url) as run:
        first, second = run.claim(lineage_id, window_end=W1, owner="run", lease=LEASE)
        key = run._liveness.key("run")
        [pid] = lock_holders(store, key)
        with store._db.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
        deadline = time.monotonic() + BACKEND_EXIT_S
        while lock_holders(store, key) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the terminated backend's exit
        [taken] = store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE, limit=1)
        assert (taken.token, taken.attempt) == (first.token, 2)
        run.keep_alive()
        [new_pid] = lock_holders(store, key)
        assert new_pid != pid
        assert store.claim(lineage_id, window_end=W1, owner="other", lease=LEASE) == []  # `second` is alive again
        with pytest.raises(LeaseLost):
            run.complete(first, watermark=W1 - US, finished=False)
        run.complete(second, watermark=W1 - US, finished=False)
