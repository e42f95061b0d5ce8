"""The UI app over HTTP (in-process): every route guarded, pages and JSON built from the store, errors redacted."""

from __future__ import annotations

import dataclasses
import html
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import datetime
from urllib.parse import quote

import pytest
from fastapi import Header, HTTPException
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from spanner_cdc.errors import StoreUnreachable
from spanner_cdc.ui.app import StoreTarget, create_app
from tests.unit.ui.sample import HOUR, NOW, T0, FakeStore

URL = "postgresql+psycopg2://cdc:Pa55word@db.internal:5432/meta"
AUTH = {"X-Test-User": "alice"}


def authorize(x_test_user: str | None = Header(default=None)) -> None:
    """Stands in for Airflow's JWT check: no header is 401, user `mallory` is 403."""
    if x_test_user is None:
        raise HTTPException(status_code=401, detail="Not authenticated")
    if x_test_user == "mallory":
        raise HTTPException(status_code=403, detail="Forbidden")


def make_client(store: FakeStore, now: datetime = NOW) -> TestClient:
    app = create_app(
        authorize=authorize,
        connect=lambda: StoreTarget(url=URL, open=lambda: store, stream_names={"shop": "orders"}),
        login_url=lambda path: f"/auth/login?next={path}",
        clock=lambda: now,
    )
    return TestClient(app)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def client(store: FakeStore) -> Iterator[TestClient]:
    with make_client(store) as client:
        yield client


def _paths(client: TestClient) -> list[str]:
    paths = [r.path.replace("{stream}", "orders").replace("{dag_id}", "d").replace("{run_id}", "r")
             for r in client.app.routes if isinstance(r, APIRoute)]  # type: ignore[attr-defined]
    assert len(paths) >= 7
    return paths


def test_every_route_refuses_an_anonymous_request(client: TestClient) -> None:
    for path in _paths(client):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 401, path
        assert "FINISHED" not in response.text and "data-token" not in response.text
    # No unguarded schema or docs routes either.
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code in (401, 404)


def test_every_route_refuses_a_user_without_permission(client: TestClient) -> None:
    for path in _paths(client):
        assert client.get(path, headers={"X-Test-User": "mallory"}, follow_redirects=False).status_code == 403


def test_an_anonymous_browser_gets_a_login_link(client: TestClient) -> None:
    response = client.get("/streams/orders?namespace=live")
    assert response.status_code == 401
    assert 'href="/auth/login?next=/streams/orders?namespace=live"' in response.text


def test_stream_page_shows_graph_windows_and_no_credentials(client: TestClient) -> None:
    response = client.get("/streams/orders", headers=AUTH)
    assert response.status_code == 200
    html = response.text
    svg = html[html.index("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"lineage\""):]
    svg = svg[: svg.index("</svg>") + 6]
    tokens = {g.get("data-token") for g in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}g")} - {None}
    assert tokens == {"A", "B", "C", "D"}
    assert html.count('data-complete="true"') == 2 and html.count('data-complete="false"') == 1
    assert "Nothing stuck." in html
    assert "cdc:***@db.internal" in html and "Pa55word" not in html


def test_index_summarises_each_lineage(client: TestClient) -> None:
    html = client.get("/", headers=AUTH).text
    row = html[html.index('<tr data-stream="orders" data-namespace="live">'):]
    row = row[: row.index("</tr>")]
    assert "1 ready · 3 finished" in row and "2 / 3" in row and 'href="/streams/orders?namespace=live"' in row


def test_json_document_carries_lag_edges_and_windows(client: TestClient) -> None:
    doc = client.get("/api/streams/orders", headers=AUTH).json()
    assert doc["lineage"]["stream"] == "orders"
    assert {(e["parent"], e["child"]) for e in doc["edges"]} == {("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")}
    by_token = {p["token"]: p for p in doc["partitions"]}
    assert by_token["D"]["merge"] and by_token["A"]["split"] and by_token["D"]["lag_seconds"] == 3600.0
    assert [w["state"] for w in doc["windows"]] == ["COMPLETE", "COMPLETE", "OPEN"]
    assert doc["stuck"] == []
    assert client.get("/api/lineages", headers=AUTH).json()[0]["namespace"] == "live"


def test_missing_lineage_is_a_404_in_both_forms(client: TestClient) -> None:
    assert client.get("/api/streams/nope", headers=AUTH).status_code == 404
    page = client.get("/streams/orders?namespace=other", headers=AUTH)
    assert page.status_code == 404 and "namespace &#x27;other&#x27;" in page.text


def test_store_errors_never_show_the_password(store: FakeStore) -> None:
    store.error = StoreUnreachable(f"cannot reach {URL}: connection refused")
    with make_client(store) as client:
        for path in ("/", "/api/lineages", "/metrics"):
            response = client.get(path, headers=AUTH)
            assert response.status_code == 503
            assert "Pa55word" not in response.text and "connection refused" in response.text


def test_metrics_are_served_as_prometheus_text(client: TestClient) -> None:
    response = client.get("/metrics", headers=AUTH)
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'spanner_cdc_partitions{stream="orders",namespace="live",state="FINISHED"} 3' in response.text


def test_dag_links_redirect_to_the_lineage(client: TestClient) -> None:
    response = client.get("/dags/spanner_cdc_hourly__shop", headers=AUTH, follow_redirects=False)
    assert response.status_code == 307 and response.headers["location"] == "/streams/orders?namespace=live"
    other = client.get("/dags/some_other_dag/runs/r1", headers=AUTH)
    assert other.status_code == 200 and "not a spanner-cdc DAG" in other.text


def test_store_is_closed_when_the_app_stops(store: FakeStore) -> None:
    with make_client(store) as client:
        client.get("/", headers=AUTH)
    assert store.closed


def test_stream_page_shows_the_last_verify_with_its_window_counts_and_first_keys(store: FakeStore) -> None:
    with make_client(store) as client:
        never = client.get("/streams/orders", headers=AUTH).text
    assert "No window verified yet" in never and "spanner-cdc verify --stream orders --namespace live" in never
    assert "<table id=verify" not in never
    first, second, _ = store.graph_value.windows
    examples = [{"part": "state", "table": "Accounts", "key": '{"Id":35}', "problem": "values differ", "uuid": None},
                *({"part": "change_log", "table": "Accounts", "key": f'{{"Id":{i}}}', "problem": "missing in the lake",
                   "uuid": f"u{i}"} for i in range(7))]  # fmt: skip
    results = {  # the newest window verified is the one shown, as /metrics reports it
        first.end: {"mismatches": 0, "rows_compared": 40, "verified_at": "2024-05-01T12:05:00Z", "examples": []},
        second.end: {"mismatches": 8, "rows_compared": 95, "verified_at": "2024-05-01T12:20:00.5Z", "examples": examples,
                     "change_log": {"checked": True}, "tables": [{"table": "Accounts", "skipped": None}]},
    }  # fmt: skip
    windows = tuple(dataclasses.replace(w, verify=results.get(w.end)) for w in store.graph_value.windows)
    store.graph_value = dataclasses.replace(store.graph_value, windows=windows)
    with make_client(store) as client:
        html = client.get("/streams/orders", headers=AUTH).text
    table = html[html.index("<table id=verify"):]
    table = table[: table.index("</table>")]
    assert f'data-window-end="{second.end.isoformat()}"' in table and 'data-mismatches="8"' in table
    assert "2024-05-01 11:00:00 UTC → 2024-05-01 12:00:00 UTC" in table and "2024-05-01 12:20:00 UTC" in table
    assert "<td class=num>95</td>" in table and "8 mismatches" in table
    listed = html[html.index("<ul id=verify-examples>"):]
    listed = listed[: listed.index("</ul>")]
    assert listed.count("<li") == 5 and "state Accounts key {&quot;Id&quot;:35}: values differ" in listed
    assert "change_log Accounts uuid u0 key {&quot;Id&quot;:0}: missing in the lake" in listed
    assert "first 5 of 8" in html and "No window verified yet" not in html
    # a verify whose change log left the stream's retention says so
    results[second.end] = {"mismatches": 0, "rows_compared": 50, "verified_at": "2024-05-01T12:30:00Z", "examples": [],
                           "change_log": {"checked": False, "reason": "window left the stream's retention"}}  # fmt: skip
    windows = tuple(dataclasses.replace(w, verify=results.get(w.end)) for w in store.graph_value.windows)
    store.graph_value = dataclasses.replace(store.graph_value, windows=windows)
    with make_client(store) as client:
        html = client.get("/streams/orders", headers=AUTH).text
    assert 'data-mismatches="0"' in html and ">clean</td>" in html and "verify-examples" not in html
    assert "change log not compared: window left the stream&#x27;s retention" in html


def test_the_windows_table_shows_the_transaction_check_as_a_verdict_and_states_in_one_case() -> None:
    from spanner_cdc.ui import tables
    from tests.unit.ui.sample import sample_view

    html = tables.windows_table(sample_view(), 1, lambda _params: "#")
    assert '<summary class="ok">ok</summary>' in html and "ok=True, transactions=40" in html
    assert "COMPLETE" not in html and ">complete<" in html


def test_a_window_links_to_its_dag_run_in_airflow(store: FakeStore) -> None:
    from urllib.parse import unquote

    with make_client(store) as client:
        page = client.get("/streams/orders", headers=AUTH).text
        links = re.findall(r'href="([^"]*)" target=_top data-run-link', page)
        assert len(links) == 3  # a link per window, to its run
        newest = html.unescape(links[0])
        assert newest == "/streams/orders/window-run?start=" + quote((T0 + 2 * HOUR).isoformat(), safe="")
        response = client.get(newest, headers=AUTH, follow_redirects=False)
    # no Airflow database here: the scheduler's run id of the window's logical date, on the configured stream's DAG
    assert response.status_code == 307
    assert unquote(response.headers["location"]) == f"/dags/spanner_cdc_hourly__shop/runs/scheduled__{(T0 + 2 * HOUR).isoformat()}"
    found = create_app(
        authorize=authorize, clock=lambda: NOW,
        connect=lambda: StoreTarget(url=URL, open=lambda: store, stream_names={"shop": "orders"},
                                    find_run=lambda dag_id, at: f"manual__{at:%H%M}" if dag_id.endswith("shop") else None),
    )  # fmt: skip
    with TestClient(found) as client:
        response = client.get(newest, headers=AUTH, follow_redirects=False)
    assert response.headers["location"] == f"/dags/spanner_cdc_hourly__shop/runs/manual__{T0 + 2 * HOUR:%H%M}"


def test_a_refused_backfill_runs_tab_says_why_it_has_no_lineage(client: TestClient) -> None:
    response = client.get("/dags/spanner_cdc_backfill/runs/manual__refused", headers=AUTH)
    assert "its form was refused" in response.text and "not a spanner-cdc DAG" not in response.text


def test_the_app_knows_where_the_plugin_mounts_it() -> None:
    from spanner_cdc.ui import airflow_glue
    from spanner_cdc.ui.app import PLUGIN_PREFIX

    assert airflow_glue.URL_PREFIX == PLUGIN_PREFIX


def test_an_hourly_runs_tab_opens_the_stream_page_at_its_window(client: TestClient) -> None:
    from urllib.parse import unquote

    from spanner_cdc.ui.links import run_logical_date
    from spanner_cdc.ui.tables import window_anchor

    start = T0 + HOUR
    response = client.get(f"/dags/spanner_cdc_hourly__shop/runs/manual__{start.isoformat()}", headers=AUTH,
                          follow_redirects=False)  # fmt: skip
    assert response.status_code == 307
    location = unquote(response.headers["location"])
    assert location == f"/streams/orders?namespace=live&window={start.isoformat()}#{window_anchor(start)}"
    page = client.get(response.headers["location"].split("#")[0], headers=AUTH).text
    assert f'<tr id="{window_anchor(start)}" data-window-start="{start.isoformat()}"' in page
    assert run_logical_date("scheduled__2024-05-01T10:00:00+00:00") == datetime.fromisoformat("2024-05-01T10:00:00+00:00")
    assert run_logical_date("manual__not-a-date") is None and run_logical_date("backfill") is None


def test_a_window_past_the_first_page_of_windows_opens_its_page() -> None:
    from spanner_cdc.ui.tables import WINDOWS_PAGE, windows_page_of
    from spanner_cdc.ui.view import load_stream
    from tests.unit.ui.large import large_graph

    graph = large_graph(windows=WINDOWS_PAGE + 3, roots=2, stuck=0)
    view = load_stream(FakeStore(graph), "orders", "live")
    starts = sorted(w.start for w in view.windows)
    assert windows_page_of(view, starts[-1]) == 1 and windows_page_of(view, starts[0]) == 2
    assert windows_page_of(view, starts[0] - HOUR) == 1  # not a window of the lineage


def test_a_closed_window_shows_its_marker_and_a_bucket_one_links_to_it() -> None:
    from spanner_cdc.ui import tables
    from tests.unit.ui.sample import sample_view

    view = sample_view()
    local = "/lake/orders_stream/live/_windows/20240501T100000Z_20240501T110000Z.json"
    bucket = "gs://lake-bucket/cdc/orders_stream/live/_windows/20240501T110000Z_20240501T120000Z.json"
    windows = (dataclasses.replace(view.windows[0], marker_path=local), dataclasses.replace(view.windows[1], marker_path=bucket),
               *view.windows[2:])  # fmt: skip
    html_text = tables.windows_table(dataclasses.replace(view, windows=windows), 1, lambda _params: "#")
    assert f'<code title="{local}" data-marker="{local}">20240501T100000Z_20240501T110000Z.json</code>' in html_text
    assert ('href="https://console.cloud.google.com/storage/browser/_details/lake-bucket/cdc/orders_stream/live/_windows/'
            '20240501T110000Z_20240501T120000Z.json"') in html_text  # fmt: skip
    assert html_text.count("<td class=muted>—</td>") >= 1  # the open window has no marker yet
