"""The Spanner client adapter against the local server: dialect detection and stream metadata, both dialects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.errors import NotFound
from spanner_cdc.settings import Settings
from spanner_cdc.source.client import detect_dialect, open_database, stream_metadata
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = pytest.mark.integration

CASES = {
    "GOOGLE_STANDARD_SQL": (
        ["CREATE TABLE T (A INT64 NOT NULL, B STRING(MAX)) PRIMARY KEY (A)",
         "CREATE CHANGE STREAM Plain FOR ALL",
         "CREATE CHANGE STREAM Tuned FOR T OPTIONS (retention_period = '36h', value_capture_type = 'NEW_ROW')"],
        "Plain", "Tuned",
    ),
    "POSTGRESQL": (
        ["create table t (a bigint primary key, b varchar)",
         "CREATE CHANGE STREAM plain FOR ALL",
         "CREATE CHANGE STREAM tuned FOR t WITH (retention_period = '36h', value_capture_type = 'NEW_ROW')"],
        "plain", "tuned",
    ),
}  # fmt: skip


@pytest.mark.parametrize("dialect", list(CASES))
def test_dialect_and_stream_metadata(local_spanner: LocalSpanner, dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", local_spanner.host)  # open_database sets it; undone after the test
    ddl, plain, tuned = CASES[dialect]
    database_id = unique_database_id("sc")
    before = datetime.now(UTC) - timedelta(seconds=5)
    create_database(local_spanner.host, PROJECT, INSTANCE, database_id, ddl, dialect)
    settings = Settings(project=PROJECT, instance=INSTANCE, database=database_id, emulator_host=local_spanner.host)
    database = open_database(settings)
    assert database.name == f"projects/{PROJECT}/instances/{INSTANCE}/databases/{database_id}"
    assert detect_dialect(database) == dialect
    assert detect_dialect(database, "auto") == dialect  # cached: once per database

    default = stream_metadata(database, plain, dialect)
    assert (default.name, default.retention, default.value_capture_type) == (plain, timedelta(days=7), "OLD_AND_NEW_VALUES")
    options = stream_metadata(database, tuned, dialect)
    assert (options.retention, options.value_capture_type) == (timedelta(hours=36), "NEW_ROW")
    for meta in (default, options):
        assert meta.created_at is not None and before <= meta.created_at <= datetime.now(UTC) + timedelta(seconds=5)

    with pytest.raises(NotFound, match=f"change stream Nope does not exist in database {database.name}"):
        stream_metadata(database, "Nope", dialect)


def test_unknown_database_is_not_found(local_spanner: LocalSpanner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", local_spanner.host)  # open_database sets it; undone after the test
    settings = Settings(project=PROJECT, instance=INSTANCE, database="nosuch", emulator_host=local_spanner.host)
    with pytest.raises(NotFound, match="detecting the SQL dialect: .*databases/nosuch at .* does not exist"):
        detect_dialect(open_database(settings))
