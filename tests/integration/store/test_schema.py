"""Schema migrations on a real Postgres: upgrade, version checks, missing schema, unreachable store."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from spanner_cdc.errors import SchemaOutdated, StoreUnreachable
from spanner_cdc.settings import load_settings
from spanner_cdc.store import MetadataStore, functions, migrations, open_store

pytestmark = pytest.mark.integration


def test_missing_schema_says_to_upgrade(empty_database: Callable[[], str]) -> None:
    url = empty_database()
    with MetadataStore.connect(url) as store:
        with pytest.raises(SchemaOutdated, match=r"has no spanner-cdc schema: run `spanner-cdc db upgrade`"):
            store.check_schema()
        # a caller that skipped the check gets the same advice from the first query
        with pytest.raises(SchemaOutdated, match=r"run `spanner-cdc db upgrade`"):
            store.lineages()
    with pytest.raises(SchemaOutdated, match="db upgrade"):
        open_store(load_settings({"metadata_url": url}, env={}))


def test_upgrade_applies_every_migration_once(empty_database: Callable[[], str]) -> None:
    url = empty_database()
    with MetadataStore.connect(url) as store:
        assert store.upgrade() == [m.name for m in migrations.discover()]
        assert store.upgrade() == []
        store.check_schema()
        assert store.schema_version() == migrations.SCHEMA_VERSION
        assert [name for _, name, _ in store.applied_migrations()] == [m.name for m in migrations.discover()]
    with open_store(load_settings({"metadata_url": url}, env={})) as opened:
        assert opened.lineages() == []


def test_an_older_schema_refuses_to_run(empty_database: Callable[[], str]) -> None:
    url = empty_database()
    with MetadataStore.connect(url) as store:
        assert migrations.upgrade(store._db, migrations.discover()[:1]) == ["0001_create_lineage_tables"]
        with pytest.raises(
            SchemaOutdated,
            match=rf"schema version 1, this code needs {migrations.SCHEMA_VERSION}: run `spanner-cdc db upgrade`",
        ):
            store.check_schema()
        assert store.upgrade() == [m.name for m in migrations.discover()[1:]]
        store.check_schema()


def test_a_newer_schema_asks_for_newer_code(empty_database: Callable[[], str]) -> None:
    with MetadataStore.connect(empty_database()) as store:
        store.upgrade()
        with pytest.raises(SchemaOutdated, match="newer than this code's 1: upgrade spanner-cdc"):
            migrations.check(store._db, expected=1)


def test_concurrent_upgrades_apply_each_migration_once(empty_database: Callable[[], str]) -> None:
    url = empty_database()
    results: list[list[str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def upgrade() -> None:
        try:
            with MetadataStore.connect(url) as store:
                barrier.wait()
                results.append(store.upgrade())
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=upgrade) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results, key=len) == [[], [], [m.name for m in migrations.discover()]]


def test_unreachable_store_says_how_to_point_elsewhere() -> None:
    with pytest.raises(StoreUnreachable) as caught:
        MetadataStore.connect("postgresql://nobody:hunter2@127.0.0.1:1/x")
    message = str(caught.value)
    assert message.startswith("metadata store at postgresql://nobody:***@127.0.0.1:1/x is unreachable (")
    assert message.endswith("start it, or point to another with metadata_url (or SPANNER_CDC_METADATA_URL)")
    assert "hunter2" not in message
    assert "\n" not in message


def test_upgrade_from_version_2_fills_read_from_for_existing_partitions(empty_database: Callable[[], str]) -> None:
    from spanner_cdc.lineage import rules

    with MetadataStore.connect(empty_database()) as store:
        migrations.upgrade(store._db, migrations.discover()[:2])
        with store._db.engine.begin() as conn:
            conn.execute(sa.text("INSERT INTO cdc_lineages (stream, namespace) VALUES ('s', 'live')"))
            conn.execute(
                sa.text(
                    "INSERT INTO cdc_partitions (lineage_id, token, partition_start, state, watermark) VALUES "
                    "(1, 'unread', '2025-01-01T00:00:00Z', 'READY', NULL), "
                    "(1, 'landed', '2025-01-01T00:00:00Z', 'READY', '2025-01-01T00:59:59.999999Z')"
                )
            )
        store.upgrade()
        with store._db.engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT token, partition_start, watermark, read_from FROM cdc_partitions"))
            found = {r.token: (r.read_from, rules.read_from(r.watermark, r.partition_start)) for r in rows}
        assert found["unread"][0] == found["unread"][1]
        assert found["landed"][0] == found["landed"][1]
        assert found["landed"][0].hour == 1


def test_a_store_without_this_releases_functions_says_to_upgrade(empty_database: Callable[[], str]) -> None:
    """As a store upgraded by another release (store/functions.py): checked, and the claim that needs one says so."""
    with MetadataStore.connect(empty_database()) as store:
        store.upgrade()
        store.check_schema()
        land = functions.LAND_MANY_FUNCTION
        with store._db.engine.begin() as conn:
            for function in functions.FUNCTIONS:
                arguments = ", ".join(functions.PARAMETER_TYPES[p] for p in function.parameters)
                conn.exec_driver_sql(f"DROP FUNCTION {function.name}({arguments})")
        with pytest.raises(
            SchemaOutdated,
            match=rf"lacks the functions .*\({functions.CLAIM_ANY_FUNCTION.name}, .*{land.name}\): run `spanner-cdc db upgrade`",
        ):
            store.check_schema()
        lineage = store.ensure_lineage("s", "live")
        with pytest.raises(SchemaOutdated, match=r"lacks a function of this release .*: run `spanner-cdc db upgrade`"):
            store.claim(lineage.id, window_end=datetime(2025, 1, 1, tzinfo=UTC), owner="w", lease=timedelta(minutes=1))
        assert store.upgrade() == []  # no migration is pending: the functions alone are installed again
        store.check_schema()
        assert (
            store.claim(lineage.id, window_end=datetime(2025, 1, 1, tzinfo=UTC), owner="w", lease=timedelta(minutes=1))
            == []
        )
        with store._db.engine.connect() as conn:
            assert functions.missing(conn) == []
            assert (
                conn.execute(sa.text("SELECT count(*) FROM pg_proc WHERE proname = :n"), {"n": land.name}).scalar_one()
                == 1
            )
