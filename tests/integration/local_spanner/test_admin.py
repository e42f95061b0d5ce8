"""Instances, databases and DDL on the local server, driven only through google-cloud-spanner."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions
from google.cloud import spanner
from google.cloud.spanner_admin_database_v1 import DatabaseDialect

from tests.fixtures.spanner import PROJECT, unique_database_id
from tests.integration.local_spanner.reading import query_partition

pytestmark = pytest.mark.integration

UPDATE_DDL_METADATA = "type.googleapis.com/google.spanner.admin.database.v1.UpdateDatabaseDdlMetadata"


def test_instance_create_exists_reload(spanner_env: str) -> None:
    client = spanner.Client(project=PROJECT)
    instance_id = unique_database_id("inst")
    instance = client.instance(instance_id, configuration_name=f"projects/{PROJECT}/instanceConfigs/emulator-config",
                               display_name="Test instance", node_count=1)
    assert not instance.exists()
    created = instance.create().result(30)
    assert created.name == f"projects/{PROJECT}/instances/{instance_id}"
    assert instance.exists()
    fresh = client.instance(instance_id)
    fresh.reload()
    assert fresh.display_name == "Test instance" and fresh.node_count == 1
    with pytest.raises(exceptions.AlreadyExists):
        instance.create().result(30)


def test_googlesql_database_ddl_reload_and_drop(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE Singers (SingerId INT64 NOT NULL, Name STRING(MAX)) PRIMARY KEY (SingerId)"])
    database.update_ddl([
        "CREATE CHANGE STREAM Names FOR Singers(Name) OPTIONS (value_capture_type = 'NEW_ROW')",
        "ALTER TABLE Singers ADD COLUMN Born DATE",
    ]).result(30)
    database.reload()
    assert database.database_dialect == DatabaseDialect.GOOGLE_STANDARD_SQL
    assert database.ddl_statements == (
        "CREATE TABLE Singers (\n  SingerId INT64 NOT NULL,\n  Name STRING(MAX),\n  Born DATE,\n) PRIMARY KEY(SingerId)",
        "CREATE CHANGE STREAM Names FOR Singers(Name) OPTIONS (value_capture_type = 'NEW_ROW')",
    )
    assert database.exists()
    database.drop()
    assert not database.exists()


def test_postgresql_database_gets_its_schema_after_creation(make_spanner_database: Any) -> None:
    database = make_spanner_database(
        ["create table users (id bigint primary key, name varchar(100), doc jsonb)",
         "CREATE CHANGE STREAM everything FOR ALL WITH (retention_period = '36h')"],
        dialect="POSTGRESQL",
    )
    other = spanner.Client(project=PROJECT).instance(database._instance.instance_id).database(database.database_id)
    assert other.database_dialect == DatabaseDialect.POSTGRESQL  # learnt from the server by reload()
    assert "CREATE CHANGE STREAM everything FOR ALL WITH (retention_period = '36h')" in other.ddl_statements
    with other.snapshot() as snapshot:
        rows = list(snapshot.execute_sql(
            "SELECT option_name, option_value FROM information_schema.change_stream_options WHERE change_stream_name = $1",
            params={"p1": "everything"}, param_types={"p1": spanner.param_types.STRING}))
    assert sorted(rows) == [["retention_period", "36h"]]  # the options the DDL set; not the defaults


def test_ddl_operations_tell_when_a_change_stream_was_created(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"])
    database.update_ddl(["CREATE CHANGE STREAM S FOR ALL"]).result(30)
    operations = [op for op in database.list_database_operations(filter_=f"metadata.@type:{UPDATE_DDL_METADATA}")]
    statements = {s: ts for op in operations for s, ts in zip(op.metadata.statements, op.metadata.commit_timestamps, strict=True)}
    assert set(statements) == {"CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE CHANGE STREAM S FOR ALL"}
    created = statements["CREATE CHANGE STREAM S FOR ALL"]
    assert created > statements["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"]
    (roots,) = query_partition(database, "S", created, created, None, postgres=False)
    assert roots["child_partitions_record"]["start_timestamp"] == created
    with pytest.raises(exceptions.OutOfRange, match="before change stream S was created"):
        query_partition(database, "S", created - timedelta(microseconds=1), created, None, postgres=False)
    with database.snapshot() as snapshot:
        names = list(snapshot.execute_sql(
            "SELECT CHANGE_STREAM_NAME FROM INFORMATION_SCHEMA.CHANGE_STREAMS WHERE CHANGE_STREAM_NAME = @name",
            params={"name": "S"}, param_types={"name": spanner.param_types.STRING}))
    assert names == [["S"]]


def test_bad_ddl_is_refused_and_changes_nothing(make_spanner_database: Any) -> None:
    database = make_spanner_database(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"])
    with pytest.raises(exceptions.InvalidArgument, match="Syntax error"):
        database.update_ddl(["CREATE TABLE U (K INT64 NOT NULL) PRIMARY KEY (K)", "CREATE TABEL V (K INT64) PRIMARY KEY (K)"]).result(30)
    with pytest.raises(exceptions.FailedPrecondition, match="Duplicate name in schema: T"):
        database.update_ddl(["CREATE TABLE T (K INT64 NOT NULL) PRIMARY KEY (K)"]).result(30)
    with pytest.raises(exceptions.NotFound, match="Table not found: Missing"):
        database.update_ddl(["CREATE CHANGE STREAM S FOR Missing"]).result(30)
    database.reload()
    assert database.ddl_statements == ("CREATE TABLE T (\n  K INT64 NOT NULL,\n) PRIMARY KEY(K)",)


def test_unknown_database_is_not_found(spanner_env: str, make_spanner_database: Any) -> None:
    make_spanner_database([])  # makes sure the instance exists
    client = spanner.Client(project=PROJECT)
    missing = client.instance("test-instance").database("nosuchdb")
    assert not missing.exists()
    with pytest.raises(exceptions.NotFound):
        missing.reload()
