"""Airflow plugin: mounts the spanner-cdc monitoring app in the API server and links it from the UI."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from spanner_cdc.ui.airflow_glue import URL_PREFIX, build_app, external_views


class SpannerCdcPlugin(AirflowPlugin):
    name = "spanner_cdc"
    fastapi_apps = [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "spanner-cdc monitoring"}]
    external_views = external_views()
