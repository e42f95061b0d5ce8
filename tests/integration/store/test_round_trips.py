"""The batched transitions' sessions on a real Postgres: one statement per claim or plain landing, no nested
loops in their plans, and a lost session noticed (pinged when idle, a transaction run again)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from spanner_cdc.store import Completion, MetadataStore, State, database
from tests.integration.store.test_batches import file
from tests.integration.store.test_transitions import LEASE, T0, US, W1, attempts, by_token, new_lineage, record

pytestmark = pytest.mark.integration
SPLIT_AT = T0 + timedelta(minutes=20)
BACKEND_EXIT_S = 10.0


@contextmanager
def fresh(store: MetadataStore) -> Iterator[MetadataStore]:
    """A store of its own on the same database, so its pools hold only what the test made."""
    with MetadataStore.connect(store._db.engine.url.render_as_string(hide_password=False)) as other:
        yield other


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[str]]:
    """The statements the engine sends while the block runs."""
    seen: list[str] = []

    def record_statement(conn: object, cursor: object, statement: str, *args: object) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record_statement)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record_statement)


def test_batch_sessions_plan_without_nested_loops_and_the_others_with(store: MetadataStore) -> None:
    with fresh(store) as other:
        with other._db.batch_engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW enable_nestloop").scalar_one() == "off"
        with other._db.engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW enable_nestloop").scalar_one() == "on"


def test_psycopg2_plans_each_batch_statement_without_nested_loops_whatever_the_session_says(
    store: MetadataStore,
) -> None:
    """As behind a pooler in transaction mode, whose server sessions never saw the startup option."""
    if store._db.engine.dialect.driver != "psycopg2":
        pytest.skip("psycopg 3 binds on the server: one statement per message, the session option only")
    with fresh(store) as other:
        assert session_setting(other, "SET enable_nestloop = on") is None
        planned = other._db.statement(lambda conn: conn.exec_driver_sql("SHOW enable_nestloop").scalar_one())
        assert planned == "off"
        got = other._db.transaction(lambda conn: conn.exec_driver_sql("SHOW enable_nestloop").scalar_one(), batch=True)
        assert got == "off"
        assert session_setting(other, "SHOW enable_nestloop") == "on"  # SET LOCAL: nothing left on the session


def session_setting(store: MetadataStore, sql: str) -> str | None:
    """Run `sql` on the pooled batch session through the driver alone (no SQLAlchemy event), committed."""
    with store._db.batch_engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None
        cursor = dbapi.cursor()
        cursor.execute(sql)
        row = cursor.fetchone() if cursor.description else None
        dbapi.commit()
        return None if row is None else str(row[0])


def test_a_claim_and_a_plain_landing_are_one_statement_each(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a", "b"))
    with fresh(store) as run:
        run.claim(lineage_id, window_end=W1, owner="slow", lease=LEASE, limit=1)  # opens the sessions
        with store._db.engine.begin() as conn:
            conn.execute(sa.text("UPDATE cdc_partitions SET lease_expires_at = now() - interval '1 s' WHERE token = 'a'"))
        with statements(run._db.batch_engine) as batch:
            claims = run.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
            assert len(batch) == 1
            result = run.complete_many([Completion(c, W1 - US, False, files=(file(c.token, "1"),)) for c in claims])
            assert len(batch) == 2
    assert (result.landed, result.lost) == (("a", "b"), ())
    # the attempt the claim took over was ended by that same statement, saying why
    assert [(r.attempt, r.owner, r.outcome, r.error) for r in attempts(store, lineage_id, "a")] == [
        (1, "slow", "EXPIRED", "lease expired; reclaimed by w"), (2, "w", "COMPLETED", None),
    ]  # fmt: skip
    assert {t: r.state for t, r in by_token(store, lineage_id).items()} == {"a": State.READY, "b": State.READY}


def backend_pids(engine: sa.Engine) -> set[int]:
    """The backends of the engine's pooled sessions (each checked out once, then back in the pool)."""
    with engine.connect() as conn:
        return {conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()}


def terminate(store: MetadataStore, pids: set[int]) -> None:
    # autocommit: a transaction would see the activity it read first on every poll
    with store._db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        for pid in pids:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
        deadline = time.monotonic() + BACKEND_EXIT_S
        query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:p)")
        while conn.execute(query, {"p": list(pids)}).scalar_one() and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the terminated backends' exit


def test_a_landing_transaction_that_lost_its_session_is_run_again(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(database, "IDLE_PING_S", 3600.0)  # never pinged: the transaction meets the dead session
    lineage_id = new_lineage(store, ("a",))
    with fresh(store) as run:
        [claim] = run.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
        terminate(store, backend_pids(run._db.batch_engine))
        result = run.complete_many(
            [Completion(claim, SPLIT_AT - US, True, (record(SPLIT_AT, ("a1", ("a",))),), (file("a", "1"),))]
        )
    assert (result.landed, result.promoted, result.lost) == (("a",), ("a1",), ())
    rows = by_token(store, lineage_id)
    assert (rows["a"].state, rows["a1"].state) == (State.FINISHED, State.READY)


def test_an_idle_session_found_dead_is_replaced_before_a_claim(
    store: MetadataStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    lineage_id = new_lineage(store, ("a",))
    with fresh(store) as run:
        pids = backend_pids(run._db.batch_engine)
        terminate(store, pids)
        monkeypatch.setattr(database, "IDLE_PING_S", 0.0)  # idle long enough to be pinged
        [claim] = run.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
        assert claim.token == "a" and backend_pids(run._db.batch_engine).isdisjoint(pids)
