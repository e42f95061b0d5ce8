"""Ties the UI app to Airflow 3's API server: its authenticated user, its auth manager and its navigation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from fastapi import FastAPI

    from spanner_cdc.ui.app import StoreTarget

URL_PREFIX = "/spanner-cdc"  # app.PLUGIN_PREFIX
FORBIDDEN = "reading the spanner-cdc lineage needs permission to read DAG runs"


def airflow_authorize() -> Callable[..., None]:
    """A FastAPI dependency: the caller must be an authenticated Airflow user allowed to read DAG runs.

    Plugin apps are mounted without any protection, so every route depends on this. Airflow's own
    `get_user` (compat.airflow) resolves the JWT from the Authorization header or the UI's session cookie (401 when
    missing or expired, 403 when invalid); the auth manager then decides on DAG-run read access.
    """
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from fastapi import Depends, HTTPException

    from spanner_cdc.compat.airflow import api_server_user

    def authorize(user: Any = Depends(api_server_user())) -> None:  # noqa: B008 - FastAPI's dependency idiom
        allowed = get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, user=user)
        if not allowed:
            raise HTTPException(status_code=403, detail=FORBIDDEN)

    return authorize


def _login_url(next_path: str) -> str:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager().get_url_login(next_url=next_path)


def _base_path() -> str:
    """The API server's path prefix from [api] base_url, so links work behind a reverse proxy path."""
    from airflow.configuration import conf

    return urlsplit(conf.get("api", "base_url", fallback="") or "").path.rstrip("/")


def _metadata_connection() -> Any:
    """The metadata store's Airflow connection (the DAGs' own source of truth), or None when not defined."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    from spanner_cdc.orchestration.connections import METADATA_CONN_ID, conn_id

    try:
        return Connection.get_connection_from_secrets(conn_id(METADATA_CONN_ID))
    except AirflowNotFoundException:
        return None


def connect() -> StoreTarget:
    """Resolve the store like the DAGs do: SPANNER_CDC_* settings, then the metadata connection on top."""
    from spanner_cdc.orchestration.connections import apply_connections
    from spanner_cdc.settings import load_settings
    from spanner_cdc.store import open_store
    from spanner_cdc.stream_config import load_streams
    from spanner_cdc.ui.app import StoreTarget

    settings = apply_connections(load_settings({}), metadata=_metadata_connection())
    names = {name: config.change_stream for name, config in load_streams(settings).items()}
    return StoreTarget(
        url=settings.metadata_url, open=lambda: open_store(settings), stream_names=names, headroom_warning=settings.headroom_warning,
        find_run=find_run,
    )


def find_run(dag_id: str, logical_date: datetime) -> str | None:
    """The newest run of `dag_id` at `logical_date` in Airflow's database (the scheduler's, or one dag.test made)."""
    from spanner_cdc.compat.airflow import run_id_at

    return run_id_at(dag_id, logical_date)


def build_app() -> FastAPI:
    """The app the plugin mounts at URL_PREFIX; nothing is read or connected until the first request."""
    from spanner_cdc.ui.app import create_app

    return create_app(authorize=airflow_authorize(), connect=connect, login_url=_login_url)


def external_views() -> list[dict[str, Any]]:
    """Navigation entry plus a Lineage tab on DAGs and DAG runs; the UI embeds each href in an iframe."""
    prefix = _base_path() + URL_PREFIX
    return [
        {
            "name": "Spanner CDC lineage",
            "href": f"{prefix}/",
            "url_route": "spanner-cdc",
            "destination": "nav",
            "category": "browse",
        },
        {
            "name": "Partition lineage",
            "href": prefix + "/dags/{DAG_ID}",
            "url_route": "spanner-cdc-dag",
            "destination": "dag",
        },
        {
            "name": "Partition lineage",
            "href": prefix + "/dags/{DAG_ID}/runs/{RUN_ID}",
            "url_route": "spanner-cdc-dag-run",
            "destination": "dag_run",
        },
    ]
