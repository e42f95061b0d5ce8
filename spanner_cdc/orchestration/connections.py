"""Airflow connections -> Settings: the metadata store, Spanner and Spark, each optional (env defaults otherwise)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from spanner_cdc.errors import ConfigError
from spanner_cdc.settings import Settings, load_settings
from spanner_cdc.store.url import require_metadata_url
from spanner_cdc.stream_config import StreamConfig, load_streams

log = logging.getLogger(__name__)

# Connection ids; each can be renamed with the environment variable of the same name in upper case.
METADATA_CONN_ID = "spanner_cdc_metadata"
SPANNER_CONN_ID = "spanner_cdc_spanner"
SPARK_CONN_ID = "spanner_cdc_spark"
SPANNER_EXTRA_KEYS = ("project", "instance", "database", "dialect", "emulator_host")
# What a `postgres` connection's extras may set for the store: libpq's connection parameters.
LIBPQ_PARAMS = (
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword", "sslsni", "sslcompression",
    "channel_binding", "gssencmode", "krbsrvname", "connect_timeout", "application_name", "options",
    "client_encoding", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count",
    "tcp_user_timeout", "target_session_attrs", "passfile", "service",
)  # fmt: skip
# Extras the Airflow Postgres hook reads for itself (they change nothing for a connection made elsewhere).
POSTGRES_HOOK_ONLY_EXTRAS = ("cursor", "enable_log_db_messages", "sqlalchemy_scheme", "sqlalchemy_query")


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
    """A Postgres connection as a SQLAlchemy URL (psycopg2 driver), credentials quoted, extras as libpq parameters.

    A host that is a directory (`/var/run/postgresql`) is a Unix socket: it goes in `?host=`, as libpq wants.
    """
    if conn.conn_type not in ("postgres", "postgresql"):
        raise ConfigError(f"connection {conn.conn_id}: conn_type", conn.conn_type, "postgres")
    if not conn.host:
        raise ConfigError(f"connection {conn.conn_id}: host", conn.host, "the Postgres host name or socket directory")
    auth = quote(conn.login or "", safe="")
    if conn.password:
        auth += ":" + quote(conn.password, safe="")
    params = _libpq_params(conn)
    netloc = f"{auth}@" if auth else ""
    if conn.host.startswith("/"):
        params = {"host": conn.host, **({"port": str(conn.port)} if conn.port else {}), **params}
    else:
        netloc += conn.host + (f":{conn.port}" if conn.port else "")
    database = quote(conn.schema or "spanner_cdc", safe="")
    query = urlencode(sorted(params.items()), quote_via=quote, safe="/")
    return f"postgresql+psycopg2://{netloc}/{database}" + (f"?{query}" if query else "")


def _libpq_params(conn: ConnectionLike) -> dict[str, str]:
    """The extras that are libpq connection parameters; the Postgres hook's own display keys are ignored."""
    extra = {k: v for k, v in conn.extra_dejson.items() if k not in POSTGRES_HOOK_ONLY_EXTRAS and v not in (None, "")}
    unknown = sorted(set(extra) - set(LIBPQ_PARAMS))
    if unknown:
        raise ConfigError(f"connection {conn.conn_id}: extra", unknown, "libpq parameters such as sslmode, sslrootcert")
    return {key: str(value) for key, value in extra.items()}


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
    """The configured stream `stream_name` and its Settings: stream table > connections > env > config file.

    A task never starts a Postgres of its own: no metadata store URL is StoreNotConfigured, before
    anything is read (a worker's private store would split the lineage across machines).
    """
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
    require_metadata_url(settings.metadata_url)
    return config, settings
