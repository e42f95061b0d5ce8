"""The stream page of a large lineage: frontier, stuck and open windows first, the graph by time with history
folded, every table paged, partitions searchable."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient

from spanner_cdc.ui import tables
from spanner_cdc.ui.time_layout import NODE_HEIGHT, NODE_WIDTH, TimedNode, layout
from tests.unit.ui.large import large_graph
from tests.unit.ui.sample import HOUR, NOW, T0, FakeStore
from tests.unit.ui.test_app import AUTH, make_client

SVG = "{http://www.w3.org/2000/svg}"
GRAPH = large_graph(stuck=12)
LIVE = [p for p in GRAPH.nodes if p.state.value != "FINISHED"]
STUCK = [p.token for p in GRAPH.nodes if p.last_error]


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with make_client(FakeStore(GRAPH)) as client:
        yield client


def _svg(html: str) -> ET.Element:
    start = html.index('<svg xmlns="http://www.w3.org/2000/svg" class="lineage"')
    return ET.fromstring(html[start : html.index("</svg>", start) + 6])


def _link(html: str, rel_param: str) -> str:
    match = re.search(rf'<p class="pager muted" data-pager="{rel_param}">.*?href="([^"]+)">next', html)
    assert match, rel_param
    return match.group(1).replace("&amp;", "&")


def test_the_first_screen_holds_open_windows_stuck_tokens_and_the_frontier(client: TestClient) -> None:
    html = client.get("/streams/orders", headers=AUTH).text
    order = [html.index(mark) for mark in ("id=open-windows", "id=stuck", "id=frontier", 'class="lineage"', "id=partitions")]
    assert order == sorted(order)
    assert html.count("data-open-window=") == 1
    frontier = html[html.index("<table id=frontier>") : html.index("</table>", html.index("<table id=frontier>"))]
    tokens = re.findall(r'<tr data-token="([^"]+)"', frontier)
    assert len(tokens) == tables.FRONTIER_PAGE < len(LIVE)
    # furthest behind first: the roots that never split started at T0 and lag the most
    lags = {p.token: (p.watermark or p.start) for p in LIVE}
    assert [lags[t] for t in tokens] == sorted(lags[t] for t in tokens)
    # the stuck list shows a few rows; the rest of its page waits, collapsed, behind a <details>
    stuck_table = html[html.index("<table id=stuck>") : html.index("</table>", html.index("<table id=stuck>"))]
    assert stuck_table.count("data-stuck-token=") == tables.STUCK_SHOWN
    assert len(STUCK) > tables.STUCK_PAGE and html.count("data-stuck-token=") == tables.STUCK_PAGE
    assert f"<summary>{tables.STUCK_PAGE - tables.STUCK_SHOWN} more stuck rows on this page</summary>" in html


def test_the_graph_draws_the_frontier_and_folds_older_history(client: TestClient) -> None:
    root = _svg(client.get("/streams/orders", headers=AUTH).text)
    drawn = {g.get("data-token") for g in root.iter(f"{SVG}g") if g.get("data-token")}
    assert {p.token for p in LIVE} <= drawn and len(drawn) < len(GRAPH.nodes)
    columns = [g for g in root.iter(f"{SVG}g") if g.get("class") == "window-column"]
    assert len(columns) == len(GRAPH.windows) and columns[-1].get("data-expanded") == "true"
    folded = [c for c in columns if c.get("data-expanded") == "false"]
    assert folded and all(int(c.get("data-hidden") or 0) > 0 for c in folded)
    # following a folded window's link draws its finished partitions
    link = next(a for a in folded[0].iter(f"{SVG}a")).get("href") or ""
    assert parse_qs(urlsplit(link).query)["expand"] == [folded[0].get("data-window-start")]
    again = _svg(client.get(link, headers=AUTH).text)
    column = next(g for g in again.iter(f"{SVG}g") if g.get("data-window-start") == folded[0].get("data-window-start"))
    assert column.get("data-expanded") == "true"
    assert len({g.get("data-token") for g in again.iter(f"{SVG}g") if g.get("data-token")}) > len(drawn)


def test_tables_are_paged_and_partitions_searchable(client: TestClient) -> None:
    html = client.get("/streams/orders", headers=AUTH).text
    first = re.findall(r'<tr data-token="([^"]+)"><td class=mono><span class=token title="\1">.*?</td><td><span class="state"[^>]*>[^<]*</span></td><td>\d',
                       html[html.index("id=partitions") :])
    assert len(first) == tables.PARTITIONS_PAGE
    nxt = _link(html, "page")
    assert parse_qs(urlsplit(nxt).query) == {"namespace": ["live"], "page": ["2"]}
    second = client.get(nxt, headers=AUTH).text
    assert "partitions 101–200 of" in second
    found = client.get("/streams/orders?q=r0003.&state=ready", headers=AUTH).text
    rows = re.findall(r'<tr data-token="(r0003\.[^"]*)"', found[found.index("<table id=partitions>") :])
    expected = sorted(p.token for p in GRAPH.nodes if p.token.startswith("r0003.") and p.state.value == "READY")
    assert sorted(rows) == expected and f"{len(expected)} partitions match" in found


def test_time_layout_places_boxes_by_start_without_overlap() -> None:
    windows = [(T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(3)]
    nodes = [TimedNode(f"n{i}", T0 + i * HOUR / 4, None, False) for i in range(12)]
    placed = layout(nodes, windows)
    assert layout(list(reversed(nodes)), list(reversed(windows))) == placed  # deterministic whatever the order
    xs = [placed.positions[f"n{i}"][0] for i in range(12)]
    assert xs == sorted(xs) and len(set(xs)) == 12
    boxes = list(placed.positions.values())
    for i, (x1, y1) in enumerate(boxes):
        for x2, y2 in boxes[i + 1 :]:
            assert abs(x1 - x2) >= NODE_WIDTH or abs(y1 - y2) >= NODE_HEIGHT


def test_time_layout_keeps_within_budget_but_always_draws_the_newest_window() -> None:
    windows = [(T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(4)]
    done = [TimedNode(f"f{w}.{i}", T0 + w * HOUR, T0 + w * HOUR + HOUR / 2, True) for w in range(4) for i in range(10)]
    placed = layout([*done, TimedNode("live", T0, None, False)], windows, budget=15)
    assert [c.expanded for c in placed.columns] == [False, False, False, True]
    assert set(placed.positions) == {"live", *(f"f3.{i}" for i in range(10))}
    wider = layout([*done, TimedNode("live", T0, None, False)], windows, expand=frozenset({T0}), budget=15)
    assert [c.expanded for c in wider.columns] == [True, False, False, True] and len(wider.positions) == 21
    assert NOW > T0
