"""Snapshots of the kinds of stream Spanner documents: FOR ALL, column-limited in the PostgreSQL dialect, and none."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spanner_cdc.cli.main import main
from spanner_cdc.extract.snapshot import run_snapshot
from spanner_cdc.lake.layout import LakeLayout
from tests.integration.extract.test_snapshot import lake_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(10)]


def test_postgresql_column_limited_stream_snapshots_only_its_columns(make_spanner_database: Any, extract_settings: Any, spark: Any) -> None:
    # all_columns is 'NO' (text) in PostgreSQL: read as a truth value it would copy the columns the stream leaves out
    database = make_spanner_database([
        "CREATE TABLE accounts (id bigint NOT NULL PRIMARY KEY, owner varchar, secret varchar)",
        "CREATE TABLE events (id bigint NOT NULL PRIMARY KEY, kind varchar)",
        "CREATE CHANGE STREAM limited FOR accounts(owner), events",
    ], dialect="POSTGRESQL")  # fmt: skip
    with database.batch() as batch:
        batch.insert("accounts", ["id", "owner", "secret"], [[i, f"o{i}", "s"] for i in range(4)])
        batch.insert("events", ["id", "kind"], [[1, "open"]])
    settings = extract_settings(database.database_id, "limited", dialect="auto")
    summary = run_snapshot(settings, at=batch.committed)
    rows = lake_rows(LakeLayout(settings.output_root, "limited", settings.namespace))
    assert summary.tables == {"accounts": 4, "events": 1}
    accounts = sorted((json.loads(r["keys"])["id"], json.loads(r["new_values"])) for r in rows if r["object"] == "accounts")
    assert accounts == [(str(i), {"owner": f"o{i}"}) for i in range(4)]
    assert [json.loads(r["new_values"]) for r in rows if r["object"] == "events"] == [{"kind": "open"}]


def test_a_snapshot_of_a_stream_that_watches_no_table_is_an_error_in_one_line(
    make_spanner_database: Any, extract_settings: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    database = make_spanner_database(["CREATE CHANGE STREAM Nothing FOR ALL"])  # a database without tables
    settings = extract_settings(database.database_id, "Nothing")
    argv = ["snapshot", "--stream", "Nothing", "--namespace", settings.namespace, "--output-root", str(settings.output_root),
            "--project", settings.project, "--instance", settings.instance, "--database", settings.database,
            "--metadata-url", settings.metadata_url, "--json"]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("spanner-cdc: error:")]
    assert code != 0 and captured.out == "" and "Traceback" not in captured.err, captured.err
    assert len(lines) == 1 and "change stream Nothing watches no table" in lines[0] and "nothing to snapshot" in lines[0]
