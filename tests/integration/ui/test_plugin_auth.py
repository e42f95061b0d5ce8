"""The plugin inside a real `airflow api-server`: mounted, linked, refused without a valid Airflow login."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import jwt
import pytest

from tests.fixtures.airflow_ui import STORE_PASSWORD, AirflowServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATHS = (
    "/spanner-cdc/",
    "/spanner-cdc/streams/orders",
    "/spanner-cdc/api/lineages",
    "/spanner-cdc/api/streams/orders",
    "/spanner-cdc/metrics",
    "/spanner-cdc/dags/spanner_cdc_hourly__orders",
    "/spanner-cdc/dags/spanner_cdc_backfill/runs/manual__1",
)


def get(server: AirflowServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(server.base_url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def test_anonymous_requests_are_refused(airflow_ui_server: AirflowServer) -> None:
    for path in PATHS:
        status, body, _ = get(airflow_ui_server, path)
        assert status == 401, (path, status)
        assert "data-token" not in body and '"partitions"' not in body
    # A browser is sent to Airflow's login, which brings it back to the page it asked for.
    status, body, _ = get(airflow_ui_server, "/spanner-cdc/streams/orders?namespace=live")
    assert status == 401 and "/auth/login?next=%2Fspanner-cdc%2Fstreams%2Forders%3Fnamespace%3Dlive" in body


def test_forged_or_garbage_tokens_are_refused(airflow_ui_server: AirflowServer) -> None:
    forged = jwt.encode({"sub": "viewer", "role": "ADMIN"}, "not-the-server-secret-" * 4, algorithm="HS512")
    for token in ("garbage", forged):
        for path in PATHS:
            status, _, _ = get(airflow_ui_server, path, {"Authorization": f"Bearer {token}"})
            assert status in (401, 403), (path, token, status)


def test_a_logged_in_user_reads_json_metrics_and_the_page(airflow_ui_server: AirflowServer) -> None:
    token = airflow_ui_server.token()
    bearer = {"Authorization": f"Bearer {token}"}
    status, body, _ = get(airflow_ui_server, "/spanner-cdc/api/streams/orders", bearer)
    assert status == 200
    doc = json.loads(body)
    assert {(e["parent"], e["child"]) for e in doc["edges"]} == {("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")}
    assert {p["token"]: p["state"] for p in doc["partitions"]} == {
        "A": "FINISHED", "B": "FINISHED", "C": "FINISHED", "D": "RUNNING", "Z": "READY"
    }
    assert [w["state"] for w in doc["windows"]] == ["COMPLETE", "COMPLETE", "OPEN"]
    status, metrics, headers = get(airflow_ui_server, "/spanner-cdc/metrics", bearer)
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'spanner_cdc_records_landed_total{stream="orders",namespace="live"} 195' in metrics
    # The browser carries the same JWT in Airflow's session cookie.
    status, page, _ = get(airflow_ui_server, "/spanner-cdc/streams/orders", {"Cookie": f"_token={token}"})
    assert status == 200 and 'data-token="D"' in page
    assert STORE_PASSWORD not in page and "postgres:***@" in page


def test_plugin_is_registered_with_its_app_and_views(airflow_ui_server: AirflowServer) -> None:
    bearer = {"Authorization": f"Bearer {airflow_ui_server.token()}"}
    status, body, _ = get(airflow_ui_server, "/api/v2/plugins", bearer)
    assert status == 200
    (plugin,) = [p for p in json.loads(body)["plugins"] if p["name"] == "spanner_cdc"]
    assert [a["url_prefix"] for a in plugin["fastapi_apps"]] == ["/spanner-cdc"]
    views = {v["destination"]: v["href"] for v in plugin["external_views"]}
    assert views == {
        "nav": "/spanner-cdc/",
        "dag": "/spanner-cdc/dags/{DAG_ID}",
        "dag_run": "/spanner-cdc/dags/{DAG_ID}/runs/{RUN_ID}",
    }
    status, _, _ = get(airflow_ui_server, "/spanner-cdc/dags/spanner_cdc_hourly__orders", bearer)
    assert status == 200  # followed the redirect to the live lineage's page


def test_the_server_log_holds_no_store_password(airflow_ui_server: AirflowServer) -> None:
    get(airflow_ui_server, "/spanner-cdc/streams/orders?namespace=missing",
        {"Authorization": f"Bearer {airflow_ui_server.token()}"})
    log = airflow_ui_server.log_path.read_text()
    assert "/spanner-cdc/" in log  # the access log did record our requests
    assert STORE_PASSWORD not in log


def test_a_window_links_to_its_run_on_airflows_pages(airflow_ui_server: AirflowServer) -> None:
    """The link asks Airflow's database for the run of the window's logical date (none here: the scheduler's id)."""

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    start = "2024-05-01T12:00:00+00:00"
    request = urllib.request.Request(
        airflow_ui_server.base_url + "/spanner-cdc/streams/orders/window-run?start=" + urllib.parse.quote(start),
        headers={"Authorization": f"Bearer {airflow_ui_server.token()}"},
    )
    try:
        urllib.request.build_opener(Keep).open(request, timeout=60)
        raise AssertionError("no redirect")
    except urllib.error.HTTPError as exc:
        assert exc.code == 307, exc.read().decode()
        location = urllib.parse.unquote(exc.headers["location"])
    assert location == f"/dags/spanner_cdc_hourly__orders/runs/scheduled__{start}"
