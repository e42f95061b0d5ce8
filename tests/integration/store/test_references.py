"""The references of attempts and manifest rows on a real Postgres, checked once per statement
(sql/0007_alter_references_to_statement_checks.sql): what a foreign key refused is refused, what it cascaded cascades, and it locks what it checks."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from spanner_cdc.store import Completion, MetadataStore
from tests.integration.store.test_batches import file
from tests.integration.store.test_transitions import LEASE, US, W1, new_lineage

pytestmark = pytest.mark.integration
FOREIGN_KEY_VIOLATION = "23503"
LOCK_NOT_AVAILABLE = "55P03"
ATTEMPT = (
    "INSERT INTO cdc_attempts (lineage_id, token, attempt, owner, read_from) "
    "VALUES (:lineage_id, :token, 9, 'w', now())"
)
MANIFEST = (
    "INSERT INTO cdc_manifest (lineage_id, path, token, range_start, range_end, rows, bytes, attempt) "
    "VALUES (:lineage_id, :path, 'a', now(), now(), 1, 1, 1)"
)


def sqlstate(exc: sa.exc.DBAPIError) -> str | None:
    """psycopg2 names it pgcode, psycopg 3 sqlstate."""
    return getattr(exc.orig, "pgcode", None) or getattr(exc.orig, "sqlstate", None)


def refused(store: MetadataStore, sql: str, params: dict[str, object]) -> str:
    """The message of the error that refused the statement (asserted to be a foreign key violation)."""
    with pytest.raises(sa.exc.DBAPIError) as caught:
        with store._db.engine.begin() as conn:
            conn.execute(sa.text(sql), params)
    assert sqlstate(caught.value) == FOREIGN_KEY_VIOLATION
    return str(caught.value.orig)


def test_an_attempt_or_a_manifest_row_naming_nothing_is_refused(store: MetadataStore) -> None:
    lineage_id = new_lineage(store, ("a",))
    message = refused(store, ATTEMPT, {"lineage_id": lineage_id, "token": "nope"})
    assert f"names no partition: lineage {lineage_id}, token nope" in message
    assert "names no lineage: 999999" in refused(store, MANIFEST, {"lineage_id": 999_999, "path": "x"})
    with store._db.engine.begin() as conn:  # what exists is accepted
        conn.execute(sa.text(ATTEMPT), {"lineage_id": lineage_id, "token": "a"})
        conn.execute(sa.text(MANIFEST), {"lineage_id": lineage_id, "path": "lake/a/x.parquet"})


def test_keys_never_change(store: MetadataStore) -> None:
    """Not even to another existing key, which a foreign key allowed: spanner-cdc never changes them."""
    lineage_id, other = new_lineage(store, ("a", "b")), new_lineage(store, ("a",))
    [claim, _] = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
    store.complete_many([Completion(claim, W1 - US, False, files=(file("a", "1"),))])
    for sql in (
        "UPDATE cdc_attempts SET token = 'b' WHERE lineage_id = :l",
        "UPDATE cdc_partitions SET token = 'c' WHERE lineage_id = :l AND token = 'a'",
        "UPDATE cdc_manifest SET lineage_id = :o WHERE lineage_id = :l",
        "UPDATE cdc_lineages SET id = id + 1000000 WHERE id = :l",
    ):
        assert "never changes" in refused(store, sql, {"l": lineage_id, "o": other})


def test_deleting_a_lineage_deletes_its_partitions_attempts_and_manifest(store: MetadataStore) -> None:
    kept, dropped = new_lineage(store, ("a",)), new_lineage(store, ("a", "b"))
    for lineage_id in (kept, dropped):
        claims = store.claim(lineage_id, window_end=W1, owner="w", lease=LEASE)
        store.complete_many([Completion(c, W1 - US, False, files=(file(c.token, "1"),)) for c in claims])
    count = "SELECT lineage_id, count(*) FROM {} WHERE lineage_id = ANY(:ids) GROUP BY lineage_id"
    tables = ("cdc_partitions", "cdc_attempts", "cdc_manifest")
    with store._db.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM cdc_lineages WHERE id = :l"), {"l": dropped})
        left = {t: dict(conn.execute(sa.text(count.format(t)), {"ids": [kept, dropped]}).all()) for t in tables}
    assert left == {t: {kept: 1} for t in tables}


def test_a_checked_partition_is_locked_until_the_insert_commits(store: MetadataStore) -> None:
    """As a foreign key does: a delete of the partition an uncommitted attempt names has to wait."""
    lineage_id = new_lineage(store, ("a",))
    with store._db.engine.connect() as inserting, store._db.engine.connect() as deleting:
        inserting.execute(sa.text(ATTEMPT), {"lineage_id": lineage_id, "token": "a"})  # left uncommitted
        deleting.execute(sa.text("SET LOCAL lock_timeout = '100ms'"))
        with pytest.raises(sa.exc.DBAPIError) as caught:
            deleting.execute(sa.text("DELETE FROM cdc_partitions WHERE lineage_id = :l"), {"l": lineage_id})
        assert sqlstate(caught.value) == LOCK_NOT_AVAILABLE
        inserting.rollback()
