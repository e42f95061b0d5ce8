"""Airflow connections -> Settings: what each connection fills in, and clear errors for bad ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.orchestration import connections
from spanner_cdc.settings import Settings


@dataclass
class Conn:
    conn_type: str
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    conn_id: str = "c"

    @property
    def extra_dejson(self) -> dict[str, Any]:
        return self.extra


def test_postgres_connection_becomes_a_psycopg2_url_with_quoted_credentials() -> None:
    conn = Conn("postgres", host="db.internal", port=5433, login="cdc", password="p@ss/word", schema="lineage")
    assert connections.metadata_url_from(conn) == "postgresql+psycopg2://cdc:p%40ss%2Fword@db.internal:5433/lineage"


def test_postgres_connection_extras_become_query_parameters() -> None:
    conn = Conn("postgres", host="db", extra={"sslmode": "require"})
    assert connections.metadata_url_from(conn) == "postgresql+psycopg2://db/spanner_cdc?sslmode=require"


def test_postgres_connection_password_with_every_character_that_needs_quoting() -> None:
    conn = Conn("postgres", host="db", port=5432, login="cdc user", password="p@ss:w/rd% ?#&=", schema="my db",
                extra={"sslmode": "prefer", "options": "-c search_path=cdc"})
    assert connections.metadata_url_from(conn) == (
        "postgresql+psycopg2://cdc%20user:p%40ss%3Aw%2Frd%25%20%3F%23%26%3D@db:5432/my%20db"
        "?options=-c%20search_path%3Dcdc&sslmode=prefer"
    )


def test_postgres_connection_to_a_unix_socket_directory() -> None:
    conn = Conn("postgres", host="/var/run/postgresql", port=5433, login="cdc", password="pw", schema="lineage")
    assert connections.metadata_url_from(conn) == (
        "postgresql+psycopg2://cdc:pw@/lineage?host=/var/run/postgresql&port=5433"
    )


def test_postgres_connection_extras_of_the_hook_are_ignored_and_unknown_ones_refused() -> None:
    hook_only = Conn("postgres", host="db", extra={"cursor": "dictcursor", "sslmode": "disable"})
    assert connections.metadata_url_from(hook_only) == "postgresql+psycopg2://db/spanner_cdc?sslmode=disable"
    with pytest.raises(ConfigError) as raised:
        connections.metadata_url_from(Conn("postgres", host="db", extra={"iam": True}, conn_id="spanner_cdc_metadata"))
    assert raised.value.field == "connection spanner_cdc_metadata: extra"
    assert raised.value.value == ["iam"]


def test_metadata_connection_must_be_postgres() -> None:
    with pytest.raises(ConfigError) as raised:
        connections.metadata_url_from(Conn("mysql", host="db", conn_id="spanner_cdc_metadata"))
    assert raised.value.field == "connection spanner_cdc_metadata: conn_type"


def test_spanner_connection_extras_and_emulator_host() -> None:
    conn = Conn("generic", host="spanner-emulator", port=9010, extra={"project": "p", "instance": "i", "database": "d"})
    assert connections.spanner_values_from(conn) == {
        "project": "p", "instance": "i", "database": "d", "emulator_host": "spanner-emulator:9010",
    }


def test_spanner_connection_without_host_is_real_spanner() -> None:
    assert "emulator_host" not in connections.spanner_values_from(Conn("generic", extra={"project": "p"}))


def test_spanner_connection_unknown_extra_is_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        connections.spanner_values_from(Conn("generic", extra={"projet": "p"}))
    assert "project" in raised.value.accepted


@pytest.mark.parametrize(
    ("conn", "master"),
    [
        (Conn("spark", host="spark://master", port=7077), "spark://master:7077"),
        (Conn("spark", host="master", port=7077), "spark://master:7077"),
        (Conn("spark", host="local[*]"), "local[*]"),
        (Conn("spark_connect", host="connect", port=15002), "sc://connect:15002"),
        (Conn("spark_connect", host="sc://connect", port=15002, login="me"), "sc://connect:15002/;user_id=me"),
    ],
)
def test_spark_connections_of_the_provider(conn: Conn, master: str) -> None:
    assert connections.spark_master_from(conn) == master


def test_apply_connections_validates_like_the_setting_it_fills() -> None:
    base = Settings()
    resolved = connections.apply_connections(
        base,
        metadata=Conn("postgres", host="db", login="u", schema="m"),
        spanner=Conn("generic", extra={"project": "p", "dialect": "postgresql"}),
        spark=Conn("spark_connect", host="connect", port=15002),
    )
    assert resolved.metadata_url == "postgresql+psycopg2://u@db/m"
    assert resolved.project == "p"
    assert resolved.dialect == "POSTGRESQL"
    assert resolved.spark_master == "sc://connect:15002"
    assert resolved.instance == base.instance  # untouched where no connection says otherwise
    with pytest.raises(ConfigError) as raised:
        connections.apply_connections(base, spark=Conn("spark", host="yarn", conn_id="spanner_cdc_spark"))
    assert raised.value.field == "connection spanner_cdc_spark"


def test_no_connections_changes_nothing() -> None:
    base = Settings(project="x")
    assert connections.apply_connections(base) == base


def test_connection_ids_can_be_renamed_by_environment() -> None:
    assert connections.conn_id("spanner_cdc_spark", {"SPANNER_CDC_SPARK": "spark_default"}) == "spark_default"
    assert connections.conn_id("spanner_cdc_spark", {}) == "spanner_cdc_spark"
