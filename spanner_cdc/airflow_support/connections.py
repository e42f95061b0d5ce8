"""Airflow connections -> Settings: the metadata store, Spanner and Spark, each optional (env defaults otherwise)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote

from spanner_cdc.errors import ConfigError
from spanner_cdc.settings import Settings, load_settings
from spanner_cdc.streams import StreamConfig, load_streams

log = logging.getLogger(__name__)

# Connection ids; each can be renamed with the environment variable of the same name in upper case.
METADATA_CONN_ID = "spanner_cdc_metadata"
SPANNER_CONN_ID = "spanner_cdc_spanner"
SPARK_CONN_ID = "spanner_cdc_spark"
SPANNER_EXTRA_KEYS = ("project", "instance", "database", "dialect", "emulator_host")


class ConnectionLike(Protocol):
    conn_id: str
    conn_type: str
    host: str | None
    port: int | None
    login: str | None
    password: str | None
    schema: str | None

    @property
    def extra_dejson(self) -> dict[str, Any]: ...


def metadata_url_from(conn: ConnectionLike) -> str:
    """A Postgres connection as a SQLAlchemy URL (psycopg2 driver), credentials quoted."""
    if conn.conn_type not in ("postgres", "postgresql"):
        raise ConfigError(f"connection {conn.conn_id}: conn_type", conn.conn_type, "postgres")
    if not conn.host:
        raise ConfigError(f"connection {conn.conn_id}: host", conn.host, "the Postgres host name")
    auth = ""
    if conn.login:
        auth = quote(conn.login, safe="")
        if conn.password:
            auth += ":" + quote(conn.password, safe="")
        auth += "@"
    port = f":{conn.port}" if conn.port else ""
    database = conn.schema or "spanner_cdc"
    query = "&".join(f"{quote(str(k))}={quote(str(v))}" for k, v in sorted(conn.extra_dejson.items()))
    return f"postgresql+psycopg2://{auth}{conn.host}{port}/{database}" + (f"?{query}" if query else "")


def spanner_values_from(conn: ConnectionLike) -> dict[str, Any]:
    """Project / instance / database / dialect / emulator host from the extras; host:port is the emulator."""
    extra = conn.extra_dejson
    unknown = sorted(set(extra) - set(SPANNER_EXTRA_KEYS))
    if unknown:
        raise ConfigError(f"connection {conn.conn_id}: extra", unknown, "keys among " + ", ".join(SPANNER_EXTRA_KEYS))
    values = {key: extra[key] for key in SPANNER_EXTRA_KEYS if extra.get(key) not in (None, "")}
    if conn.host and "emulator_host" not in values:
        values["emulator_host"] = f"{conn.host}:{conn.port}" if conn.port else conn.host
    return values


def spark_master_from(conn: ConnectionLike) -> str:
    """The Spark provider's connections: `spark` (a master URL) or `spark_connect` (a Connect server)."""
    host = (conn.host or "").strip()
    if conn.conn_type == "spark_connect":
        if "://" not in host:
            host = f"sc://{host}"
        if conn.port:
            host = f"{host}:{conn.port}"
        params = []
        if conn.login:
            params.append(f"user_id={quote(conn.login)}")
        if conn.password:
            params.append(f"token={quote(conn.password)}")
        if conn.extra_dejson.get("use_ssl") is not None:
            params.append(f"use_ssl={quote(str(conn.extra_dejson['use_ssl']))}")
        return host + ("/;" + ";".join(params) if params else "")
    if conn.conn_type == "spark":
        if not host.startswith(("local", "spark://")):
            host = f"spark://{host}"
        return f"{host}:{conn.port}" if conn.port else host
    raise ConfigError(f"connection {conn.conn_id}: conn_type", conn.conn_type, "spark or spark_connect")


def apply_connections(
    base: Settings,
    *,
    metadata: ConnectionLike | None = None,
    spanner: ConnectionLike | None = None,
    spark: ConnectionLike | None = None,
) -> Settings:
    """`base` with the values the given connections define, each validated like the setting it fills."""
    raw: dict[str, tuple[str, Any]] = {}
    if metadata is not None:
        raw["metadata_url"] = (f"connection {metadata.conn_id}", metadata_url_from(metadata))
    if spanner is not None:
        for key, value in spanner_values_from(spanner).items():
            raw[key] = (f"connection {spanner.conn_id}: {key}", value)
    if spark is not None:
        raw["spark_master"] = (f"connection {spark.conn_id}", spark_master_from(spark))
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    values = {name: fields[name].metadata["parse"](label, value) for name, (label, value) in raw.items()}
    return dataclasses.replace(base, **values)


def conn_id(default: str, env: Mapping[str, str] | None = None) -> str:
    return (os.environ if env is None else env).get(default.upper(), default)


def fetch_connection(connection_id: str) -> ConnectionLike | None:
    """The Airflow connection, or None when it is not defined (then the env defaults apply)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(connection_id)  # type: ignore[return-value]
    except AirflowNotFoundException:
        return None


def stream_settings(stream_name: str, *, namespace: str | None = None, **overrides: Any) -> tuple[StreamConfig, Settings]:
    """The configured stream `stream_name` and its Settings: stream table > connections > env > config file."""
    base = load_settings({})
    streams = load_streams(base)
    if stream_name not in streams:
        raise ConfigError("stream", stream_name, "one of the configured streams: " + (", ".join(streams) or "none"))
    base = apply_connections(
        base,
        metadata=fetch_connection(conn_id(METADATA_CONN_ID)),
        spanner=fetch_connection(conn_id(SPANNER_CONN_ID)),
        spark=fetch_connection(conn_id(SPARK_CONN_ID)),
    )
    config = streams[stream_name]
    settings = config.settings(base)
    if namespace is not None:
        overrides["namespace"] = namespace
    if overrides:
        settings = dataclasses.replace(settings, **overrides)
    return config, settings
