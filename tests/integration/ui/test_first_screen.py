"""The stream page of a 10,000-partition lineage in a 1440 x 1000 browser: what the first screen shows, and its width."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.ui import tables
from tests.unit.ui.large import SPANNER_LIKE_PREFIX, large_graph, with_long_tokens
from tests.unit.ui.sample import FakeStore
from tests.unit.ui.test_app import AUTH, make_client

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
MIN_FRONTIER_ROWS = 5


@pytest.fixture(scope="module")
def page_html() -> str:
    """10,026 partitions with Spanner-length tokens (5,243 live, 12 failing), the stream's retention known."""
    graph = with_long_tokens(large_graph(roots=460, stuck=12))
    graph = dataclasses.replace(graph, lineage=dataclasses.replace(graph.lineage, retention_period_s=86_400))
    assert len(graph.nodes) >= 10_000
    newest_end = max(w.end for w in graph.windows)
    with make_client(FakeStore(graph), now=newest_end + timedelta(minutes=40)) as client:
        response = client.get("/streams/orders", headers=AUTH)
    assert response.status_code == 200
    return response.text


def _rect(browser: Any, selector: str) -> dict[str, float]:
    return browser.execute_script("const r = document.querySelector(arguments[0]).getBoundingClientRect();"
                                  "return {top: r.top, bottom: r.bottom, right: r.right};", selector)  # fmt: skip


def test_the_first_screen_of_ten_thousand_partitions(page_html: str, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    page = tmp_path / "stream.html"
    page.write_text(page_html)
    browser.get(page.as_uri())
    width, height = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    assert width >= 1400 and height >= 800  # the window the flags ask for, less Chrome's own frame
    # nothing wider than the screen: full-length tokens pushed the tables 285 px past it
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width
    # the cards, freshness and retention headroom among them, and the open windows: on the first screen
    for card in ("partitions", "low watermark", "windows complete", "stuck", "freshness", "retention headroom"):
        assert _rect(browser, f'[data-card="{card}"]')["bottom"] <= height, card
    assert _rect(browser, "#open-windows")["bottom"] <= height
    # the stuck list shows a few rows; the rest are collapsed
    stuck_rows = browser.find_elements(By.CSS_SELECTOR, "#stuck tr[data-stuck-token]")
    assert len(stuck_rows) == tables.STUCK_SHOWN and _rect(browser, "#stuck")["bottom"] <= height
    more = browser.find_element(By.CSS_SELECTOR, "#stuck-more")
    assert more.get_attribute("open") is None
    assert all(not row.is_displayed() for row in more.find_elements(By.CSS_SELECTOR, "tr[data-stuck-token]"))
    # at least five rows of the live frontier, whole, above the fold
    bottoms = browser.execute_script(
        "return [...document.querySelectorAll('#frontier tr[data-token]')].map(r => r.getBoundingClientRect().bottom)"
    )
    visible = sum(1 for bottom in bottoms if bottom <= height)
    assert visible >= MIN_FRONTIER_ROWS, f"{visible} frontier rows on the first screen"
    # a token shows its start and its tail; hovering shows it whole, and a copy of the cell takes it whole
    row = browser.find_element(By.CSS_SELECTOR, "#frontier tr[data-token]")
    token = row.get_attribute("data-token")
    assert token.startswith(SPANNER_LIKE_PREFIX)
    shown = row.find_element(By.CSS_SELECTOR, ".token")
    assert shown.get_attribute("title") == token
    assert shown.size["width"] < 0.3 * browser.execute_script(
        "const s = document.createElement('span'); s.className = 'mono'; s.textContent = arguments[0];"
        "document.body.appendChild(s); const w = s.getBoundingClientRect().width; s.remove(); return w;", token
    )  # fmt: skip
    assert token[-tables.TOKEN_TAIL :] in shown.text  # the tail, where Spanner's tokens differ, is on screen
    copied = browser.execute_script(
        "const sel = window.getSelection(); sel.selectAllChildren(arguments[0]); return sel.toString();", shown
    )
    assert copied == token
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "ui-first-screen-10k.png").write_bytes(browser.get_screenshot_as_png())

    # the lineage graph opens on its newest column, the live frontier, however wide its history
    graph_opens_at = browser.execute_script(
        "const box = document.querySelector('.graph'); box.scrollIntoView(); const g = box.getBoundingClientRect();"
        "const cols = [...box.querySelectorAll('g.window-column')].map(c => [c.dataset.windowStart, c.getBoundingClientRect()]);"
        "cols.sort((a, b) => a[0] < b[0] ? -1 : 1); const newest = cols[cols.length - 1][1], oldest = cols[0][1];"
        "return {overflows: box.scrollWidth > box.clientWidth, newest: newest.left >= g.left && newest.right <= g.right + 1,"
        " oldest: oldest.right <= g.left};"
    )  # fmt: skip
    assert graph_opens_at == {"overflows": True, "newest": True, "oldest": True}
    (ARTIFACTS / "ui-graph-opens-newest-10k.png").write_bytes(browser.get_screenshot_as_png())
