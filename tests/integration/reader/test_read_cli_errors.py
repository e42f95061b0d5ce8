"""`spanner-cdc read` with bad input, through the CLI: one clear stderr line and a non-zero exit each."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.heavy(12)]  # it mostly waits: started beside the busy modules, not last

DDL = {
    "GOOGLE_STANDARD_SQL": [
        "CREATE TABLE Orders (Id INT64 NOT NULL, Note STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE CHANGE STREAM OrdersStream FOR ALL",
    ],
    "POSTGRESQL": [
        "create table orders (id bigint primary key, note varchar)",
        "CREATE CHANGE STREAM OrdersStream FOR ALL",
    ],
}


STREAM = {"GOOGLE_STANDARD_SQL": "OrdersStream", "POSTGRESQL": "ordersstream"}  # PostgreSQL folds unquoted names


@pytest.fixture(scope="module")
def databases(local_spanner: LocalSpanner) -> Iterator[dict[str, str]]:
    ids = {}
    for dialect, ddl in DDL.items():
        ids[dialect] = unique_database_id("cli")
        create_database(local_spanner.host, PROJECT, INSTANCE, ids[dialect], ddl, dialect)
    yield ids


def run_read(server: LocalSpanner | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANNER_CDC_")}
    # without a server: an address nothing listens on, so any contact would fail differently
    env["SPANNER_EMULATOR_HOST"] = server.host if server else "127.0.0.1:9"
    command = [sys.executable, "-m", "spanner_cdc", "read", "--project", PROJECT, "--instance", INSTANCE, *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)


def assert_one_error_line(result: subprocess.CompletedProcess[str], exit_code: int, *fragments: str) -> str:
    assert result.returncode == exit_code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("spanner-cdc: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""
    return lines[0]


GOOD = ["--database", "d", "--stream", "OrdersStream", "--start", "2024-01-01T00:00:00Z"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ([*GOOD, "--heartbeat-ms", "999"], ["invalid --heartbeat-ms=999: expected an integer in [1000, 300000]"]),
        ([*GOOD, "--end", "2023-12-31T23:59:59Z"],
         ["--end 2023-12-31T23:59:59.000000Z is before --start 2024-01-01T00:00:00.000000Z", "must be at or after --start"]),
        (["--database", "d", "--stream", "Orders'Stream", "--start", "now"], ["invalid --stream=\"Orders'Stream\"", "identifier"]),
        (["--database", "d", "--stream", "Orders Stream", "--start", "now"], ["invalid --stream='Orders Stream'", "identifier"]),
        (["--database", "d", "--stream", "OrdersStream", "--start", "01/01/2024"], ["invalid --start='01/01/2024'", "RFC 3339"]),
        (["--database", "d", "--start", "now"], ["invalid --stream=None", "name of a change stream"]),
    ],
)  # fmt: skip
def test_bad_flags_fail_before_contacting_spanner(args: list[str], fragments: list[str]) -> None:
    assert_one_error_line(run_read(None, *args), 2, *fragments)


@pytest.mark.parametrize("dialect", list(DDL))
def test_unknown_stream(local_spanner: LocalSpanner, databases: dict[str, str], dialect: str) -> None:
    result = run_read(local_spanner, "--database", databases[dialect], "--stream", "NoSuchStream", "--start", "now")
    line = assert_one_error_line(result, 1, "change stream NoSuchStream does not exist in database")
    assert databases[dialect] in line


@pytest.mark.parametrize("dialect", list(DDL))
@pytest.mark.parametrize("days_back", [2, 365 * 20])
def test_start_before_the_streams_creation_says_so(local_spanner: LocalSpanner, databases: dict[str, str], dialect: str, days_back: int) -> None:
    # the stream was created minutes ago: 2 days back is inside its retention (7d by default), and what stops the
    # read is its creation, not the retention
    start = (datetime.now(UTC) - timedelta(days=days_back)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = run_read(local_spanner, "--database", databases[dialect], "--stream", STREAM[dialect], "--start", start, "--all-partitions")
    line = assert_one_error_line(
        result, 1, f"{STREAM[dialect]} None: the window start ", "precedes the change stream's creation (at ",
        f"[stream {STREAM[dialect]}: retention_period 7d, created ", "start at or after the stream's creation",
    )
    assert "retention period" not in line


def test_postgresql_stream_name_in_the_wrong_case_gets_a_hint(local_spanner: LocalSpanner, databases: dict[str, str]) -> None:
    result = run_read(local_spanner, "--database", databases["POSTGRESQL"], "--stream", "OrdersStream", "--start", "now")
    assert_one_error_line(result, 1, "change stream OrdersStream does not exist", "did you mean ordersstream?")


def test_unknown_database(local_spanner: LocalSpanner, databases: dict[str, Any]) -> None:
    result = run_read(local_spanner, "--database", "nosuchdb", "--stream", "OrdersStream", "--start", "now")
    assert_one_error_line(result, 1, "does not exist", "nosuchdb")


def test_unknown_token(local_spanner: LocalSpanner, databases: dict[str, str]) -> None:
    # an end far enough ahead that a slow CLI start under load still parses `--start now` before it
    end = (datetime.now(UTC) + timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = run_read(local_spanner, "--database", databases["GOOGLE_STANDARD_SQL"], "--stream", "OrdersStream",
                      "--start", "now", "--end", end, "--token", "no-such-token")  # fmt: skip
    assert_one_error_line(result, 1, "OrdersStream no-such-token: ")
