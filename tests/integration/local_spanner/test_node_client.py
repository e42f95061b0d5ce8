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

pytestmark = pytest.mark.integration

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
