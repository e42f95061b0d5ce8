"""`spanner-cdc db` and `spanner-cdc lineage` run as a user runs them: `python -m spanner_cdc ...` subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.model.records import ChildPartition, ChildPartitionsRecord
from spanner_cdc.store import MetadataStore, functions, migrations

pytestmark = pytest.mark.integration

T0 = datetime(2025, 3, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    return subprocess.run(
        [sys.executable, "-m", "spanner_cdc", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_unreachable_store_is_one_line_saying_how_to_point_elsewhere() -> None:
    result = cli("db", "upgrade", "--metadata-url", "postgresql://nobody@127.0.0.1:1/x")
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("spanner-cdc: error: metadata store at postgresql://nobody@127.0.0.1:1/x is unreachable (")
    assert lines[0].endswith("point to another with --metadata-url (or SPANNER_CDC_METADATA_URL)")


def test_upgrade_status_and_missing_schema_through_the_cli(empty_database: Callable[[], str]) -> None:
    url = empty_database()
    missing = cli("lineage", "show", "--stream", "orders", "--metadata-url", url)
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith("has no spanner-cdc schema: run `spanner-cdc db upgrade`")
    status = cli("db", "status", "--metadata-url", url)
    assert status.returncode == 1
    names = [m.name for m in migrations.discover()]
    assert f"pending migrations: {', '.join(names)}: run `spanner-cdc db upgrade`" in status.stdout

    upgraded = cli("db", "upgrade", "--metadata-url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"applied {', '.join(names)}; schema version {migrations.SCHEMA_VERSION}" in upgraded.stdout
    again = cli("db", "upgrade", "--metadata-url", url)
    assert again.returncode == 0 and "is up to date" in again.stdout
    status = cli("db", "status", "--metadata-url", url)
    assert status.returncode == 0, status.stdout
    version = migrations.SCHEMA_VERSION
    assert f"schema version: {version} (this code needs {version})" in status.stdout
    assert f"  applied {names[-1]} at " in status.stdout
    with MetadataStore.connect(url) as store:  # as a store another release upgraded: this release's functions absent
        with store._db.engine.begin() as conn:
            conn.exec_driver_sql(f"DROP FUNCTION {functions.LAND_MANY_FUNCTION.name}(json, bigint, json)")
    status = cli("db", "status", "--metadata-url", url)
    assert status.returncode == 1
    hint = f"missing functions of this release: {functions.LAND_MANY_FUNCTION.name}: run `spanner-cdc db upgrade`"
    assert hint in status.stdout
    assert cli("db", "upgrade", "--metadata-url", url).returncode == 0
    assert cli("db", "status", "--metadata-url", url).returncode == 0

    not_found = cli("lineage", "show", "--stream", "orders", "--namespace", "backfill_1", "--metadata-url", url)
    assert not_found.returncode == 1
    assert len(not_found.stderr.strip().splitlines()) == 1
    assert "no lineage for stream 'orders' in namespace 'backfill_1'" in not_found.stderr


def test_lineage_show_in_every_format(pg_url: str) -> None:
    with MetadataStore.connect(pg_url) as store:
        store.upgrade()
        lineage = store.ensure_lineage("orders", "live", database="cdc")
        store.bootstrap(lineage.id, T0, [ChildPartition("a", ()), ChildPartition("b", ())])
        claim_a, claim_b = store.claim(lineage.id, window_end=T0 + timedelta(hours=1), owner="w", lease=timedelta(0))
        merge = T0 + timedelta(minutes=30)
        merged = ChildPartitionsRecord(merge, "1", (ChildPartition("m", ("a", "b")),))
        store.complete(claim_a, watermark=merge - US, finished=True, children=[merged])
        store.complete(claim_b, watermark=merge - US, finished=True, children=[merged])

    text = cli("lineage", "show", "--stream", "orders", "--metadata-url", pg_url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "lineage orders/live (id 1, database cdc): 3 partitions (1 READY, 2 FINISHED)"
    assert lines[1].startswith("low watermark 2025-03-01T00:29:59.999999Z (lag ")
    assert lines[2].startswith("a  FINISHED  start 2025-03-01T00:00:00Z  end 2025-03-01T00:30:00Z")
    assert lines[3].startswith("└─ m  READY  start 2025-03-01T00:30:00Z  watermark -  lag ")
    assert lines[4].startswith("b  FINISHED")
    assert lines[5] == "└─ m  (merge child, shown above)"

    as_json = cli("lineage", "show", "--stream", "orders", "--format", "json", "--metadata-url", pg_url)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert [(p["token"], p["state"]) for p in doc["partitions"]] == [("a", "FINISHED"), ("b", "FINISHED"), ("m", "READY")]
    assert doc["edges"] == [{"parent": "a", "child": "m"}, {"parent": "b", "child": "m"}]

    dot = cli("lineage", "show", "--stream", "orders", "--format", "dot", "--metadata-url", pg_url)
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout.startswith('digraph "orders/live" {')
    assert '"a" -> "m";' in dot.stdout and '"b" -> "m";' in dot.stdout

    listing = cli("lineage", "list", "--metadata-url", pg_url)
    assert listing.returncode == 0, listing.stderr
    assert listing.stdout.startswith("orders/live\tid 1\tdatabase cdc\tlow watermark 2025-03-01T00:29:59.999999Z")

    no_stream = cli("lineage", "show", "--metadata-url", pg_url)
    assert no_stream.returncode == 2
    assert "--stream" in no_stream.stderr
