"""The Airflow plugin, registered by the package's `airflow.plugins` entry point: the monitoring app in the API server."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from spanner_cdc.ui.airflow_glue import URL_PREFIX, build_app, external_views


class SpannerCdcPlugin(AirflowPlugin):
    name = "spanner_cdc"
    fastapi_apps = [{"app": build_app(), "url_prefix": URL_PREFIX, "name": "spanner-cdc monitoring"}]
    external_views = external_views()
