"""A second official client, the Node.js one (pinned in tests/node), against the local server in both dialects."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import GOOGLE_STANDARD_SQL, POSTGRESQL, create_database
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.heavy(25)]  # it mostly waits: started beside the busy modules, not last

NODE_DIR = Path(__file__).resolve().parents[2] / "node"
SCHEMAS = {
    GOOGLE_STANDARD_SQL: ["CREATE TABLE singers (id INT64 NOT NULL, name STRING(MAX), score INT64) PRIMARY KEY (id)",
                          "CREATE INDEX by_name ON singers (name)", "CREATE CHANGE STREAM s FOR ALL"],
    POSTGRESQL: ["CREATE TABLE singers (id bigint NOT NULL, name varchar, score bigint, PRIMARY KEY (id))",
                 "CREATE INDEX by_name ON singers (name)", "CREATE CHANGE STREAM s FOR ALL"],
}


@pytest.fixture(scope="module")
def node_client() -> Path:
    """The pinned @google-cloud/spanner installed by `npm ci` (once); skipped only on a machine without Node.js."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js is not installed: the second-client test needs node and npm")
    if not (NODE_DIR / "node_modules" / "@google-cloud" / "spanner").is_dir():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True, capture_output=True, timeout=600)
    return NODE_DIR / "client_check.js"


def run_node(script: Path, host: str, database_id: str, dialect: str) -> dict[str, Any]:
    env = {**os.environ, "SPANNER_EMULATOR_HOST": host}
    done = subprocess.run(["node", str(script), PROJECT, INSTANCE, database_id, dialect], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def mods(records: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    return sorted((r["mod_type"], json.dumps(r["keys"], sort_keys=True), json.dumps(r["new_values"], sort_keys=True),
                   json.dumps(r["old_values"], sort_keys=True)) for r in records)


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_node_client_writes_reads_the_past_queries_and_reads_the_change_stream(node_client: Path, spanner_env: str, dialect: str) -> None:
    database_id = unique_database_id("n")
    create_database(spanner_env, PROJECT, INSTANCE, database_id, SCHEMAS[dialect], dialect)
    seen = run_node(node_client, spanner_env, database_id, dialect)

    original = [{"id": i, "name": f"s{i}", "score": i * 10} for i in range(1, 7)]
    assert seen["dml_counts"] == [1, 2, 1]
    assert seen["past_query"] == original  # as committed by the first write, before the DML and the update
    assert seen["past_read"] == [{"id": r["id"], "name": r["name"]} for r in original]
    assert seen["now_query"] == [
        {"id": 1, "name": "s1", "score": 11}, {"id": 2, "name": "s2", "score": 21}, {"id": 3, "name": "renamed", "score": 30},
        {"id": 4, "name": "s4", "score": 40}, {"id": 5, "name": "s5", "score": 50}, {"id": 7, "name": "dml", "score": 70},
    ]
    assert seen["range_query"] == [{"id": 7}, {"id": 5}, {"id": 3}]
    assert seen["count"] == [{"n": 6}]
    assert seen["index_read"] == [{"name": "renamed", "id": 3}, {"name": "s1", "id": 1}, {"name": "s2", "id": 2}]
    assert seen["unknown_index"] == 5  # NOT_FOUND

    def values(**row: Any) -> dict[str, Any]:
        return {k: None if v is None else str(v) if k == "score" else v for k, v in row.items()}

    expected = [("INSERT", {"id": str(r["id"])}, values(name=r["name"], score=r["score"]), {}) for r in original]
    expected += [
        ("INSERT", {"id": "7"}, values(name="dml", score=70), {}),
        ("UPDATE", {"id": "1"}, values(score=11), values(score=10)),
        ("UPDATE", {"id": "2"}, values(score=21), values(score=20)),
        ("DELETE", {"id": "6"}, {}, values(name="s6", score=60)),
        ("UPDATE", {"id": "3"}, values(name="renamed"), values(name="s3")),
    ]
    assert mods(seen["records"]) == mods([{"mod_type": m, "keys": k, "new_values": n, "old_values": o} for m, k, n, o in expected])


SCHEMA_FEATURES = {
    GOOGLE_STANDARD_SQL: [
        "CREATE TABLE singers (singer_id INT64 NOT NULL, name STRING(MAX)) PRIMARY KEY (singer_id)",
        "CREATE TABLE albums (singer_id INT64 NOT NULL, album_id INT64 NOT NULL) PRIMARY KEY (singer_id, album_id), "
        "INTERLEAVE IN PARENT singers ON DELETE CASCADE",
        "CREATE TABLE tours (singer_id INT64 NOT NULL, tour_id INT64 NOT NULL) PRIMARY KEY (singer_id, tour_id), INTERLEAVE IN PARENT singers",
        "CREATE TABLE users (id INT64 NOT NULL, first_name STRING(MAX), last_name STRING(MAX), note STRING(MAX), "
        "full_name STRING(MAX) AS (first_name || ' ' || last_name) STORED) PRIMARY KEY (id)",
        "CREATE TABLE events (id INT64 NOT NULL, at TIMESTAMP) PRIMARY KEY (id), ROW DELETION POLICY (OLDER_THAN(at, INTERVAL 1 DAY))",
        "CREATE CHANGE STREAM everything FOR ALL OPTIONS (allow_txn_exclusion = true)",
        "CREATE CHANGE STREAM no_ttl FOR ALL OPTIONS (exclude_ttl_deletes = true)",
    ],
    POSTGRESQL: [
        "CREATE TABLE singers (singer_id bigint PRIMARY KEY, name text)",
        "CREATE TABLE albums (singer_id bigint NOT NULL, album_id bigint NOT NULL, PRIMARY KEY (singer_id, album_id)) "
        "INTERLEAVE IN PARENT singers ON DELETE CASCADE",
        "CREATE TABLE tours (singer_id bigint NOT NULL, tour_id bigint NOT NULL, PRIMARY KEY (singer_id, tour_id)) INTERLEAVE IN PARENT singers",
        "CREATE TABLE users (id bigint PRIMARY KEY, first_name text, last_name text, note text, "
        "full_name text GENERATED ALWAYS AS (first_name || ' ' || last_name) STORED)",
        "CREATE TABLE events (id bigint PRIMARY KEY, at timestamptz) TTL INTERVAL '1 days' ON at",
        "CREATE CHANGE STREAM everything FOR ALL WITH (allow_txn_exclusion = true)",
        "CREATE CHANGE STREAM no_ttl FOR ALL WITH (exclude_ttl_deletes = true)",
    ],
}


@pytest.mark.parametrize("dialect", [GOOGLE_STANDARD_SQL, POSTGRESQL])
def test_node_client_on_interleaving_generated_columns_ttl_exclusion_and_schema_versions(
    node_client: Path, local_spanner: Any, spanner_env: str, dialect: str
) -> None:
    from datetime import UTC, datetime, timedelta

    database_id = unique_database_id("n")
    database = create_database(spanner_env, PROJECT, INSTANCE, database_id, SCHEMA_FEATURES[dialect], dialect)
    start = datetime.now(UTC)
    with database.batch() as batch:
        batch.insert("events", ["id", "at"], [[1, start - timedelta(days=2)], [2, start]])
    local_spanner.control.sweep_ttl()
    done = subprocess.run(["node", str(node_client.parent / "schema_check.js"), PROJECT, INSTANCE, database_id, dialect,
                           start.isoformat().replace("+00:00", "Z")],
                          env={**os.environ, "SPANNER_EMULATOR_HOST": spanner_env}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)

    assert (seen["orphan"], seen["direct_generated_write"], seen["no_action"]) == (5, 3, 9)  # NOT_FOUND, INVALID_ARGUMENT, FAILED_PRECONDITION
    assert seen["users"] == [{"id": 1, "full_name": "Bea Lee"}, {"id": 3, "full_name": "Hid Den"}, {"id": 4, "full_name": "Cy Ko"}]
    assert seen["albums"] == [{"singer_id": 2, "album_id": 1}]
    assert seen["past_users"] == [{"id": 1, "note": "n1", "full_name": "Bea Lee"}]
    assert seen["past_columns"] == ["first_name", "full_name", "id", "last_name", "note"]
    assert seen["now_columns"] == ["first_name", "full_name", "id", "last_name"]

    def changes(stream: str) -> list[tuple[Any, ...]]:
        return sorted((r["table"], r["mod_type"], json.dumps(r["keys"], sort_keys=True), r["system"]) for r in seen[stream])

    cascade = [("albums", "DELETE", '{"album_id": "1", "singer_id": "1"}', False), ("albums", "DELETE", '{"album_id": "2", "singer_id": "1"}', False),
               ("singers", "DELETE", '{"singer_id": "1"}', False)]  # fmt: skip
    common = [*cascade, ("albums", "INSERT", '{"album_id": "1", "singer_id": "1"}', False), ("albums", "INSERT", '{"album_id": "1", "singer_id": "2"}', False),
              ("albums", "INSERT", '{"album_id": "2", "singer_id": "1"}', False), ("events", "INSERT", '{"id": "1"}', False),
              ("events", "INSERT", '{"id": "2"}', False), ("singers", "INSERT", '{"singer_id": "1"}', False),
              ("singers", "INSERT", '{"singer_id": "2"}', False), ("tours", "INSERT", '{"singer_id": "2", "tour_id": "1"}', False),
              ("users", "INSERT", '{"id": "1"}', False), ("users", "INSERT", '{"id": "4"}', False), ("users", "UPDATE", '{"id": "1"}', False)]  # fmt: skip
    assert changes("everything") == sorted([*common, ("events", "DELETE", '{"id": "1"}', True)])  # the excluded insert of user 3 left out
    assert changes("no_ttl") == sorted([*common, ("users", "INSERT", '{"id": "3"}', False)])  # no TTL delete; exclusion not allowed here
    cascade_transactions = {r["transaction"] for r in seen["everything"] if r["mod_type"] == "DELETE" and r["table"] in ("singers", "albums")}
    assert len(cascade_transactions) == 1
    update = next(r for r in seen["everything"] if r["mod_type"] == "UPDATE")
    assert update["new_values"] == {"first_name": "Bea", "full_name": "Bea Lee"}
