"""Headless Chromium logs in to a real Airflow and reads the lineage page; the screenshot is kept under artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.airflow_ui import STORE_PASSWORD, AirflowServer

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(16)]  # it mostly waits: started beside the busy modules, not last

ARTIFACTS = Path(__file__).resolve().parents[3] / "artifacts"
PAGE = "/spanner-cdc/streams/orders?namespace=live"


def _log_in(driver: Any, server: AirflowServer, next_path: str) -> None:
    from urllib.parse import quote

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{server.base_url}/auth/login?next={quote(next_path, safe='')}")
    wait = WebDriverWait(driver, 60)
    wait.until(ec.element_to_be_clickable((By.NAME, "username"))).send_keys(server.username)
    driver.find_element(By.NAME, "password").send_keys(server.password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "svg.lineage g.node")))


def test_page_without_login_shows_no_lineage(airflow_ui_server: AirflowServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(airflow_ui_server.base_url + PAGE)
    assert browser.find_elements(By.CSS_SELECTOR, "svg.lineage") == []
    link = browser.find_element(By.LINK_TEXT, "Log in to Airflow").get_attribute("href")
    assert "/auth/login" in link


def test_lineage_page_in_a_browser(airflow_ui_server: AirflowServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    _log_in(browser, airflow_ui_server, PAGE)
    assert browser.current_url.endswith(PAGE)
    nodes = {
        n.get_attribute("data-token"): (n.get_attribute("data-state"), set((n.get_attribute("class") or "").split()))
        for n in browser.find_elements(By.CSS_SELECTOR, "svg.lineage g.node")
    }
    assert {t: state for t, (state, _) in nodes.items()} == {
        "A": "FINISHED", "B": "FINISHED", "C": "FINISHED", "D": "RUNNING", "Z": "READY"
    }
    assert "split" in nodes["A"][1] and "merge" in nodes["D"][1]
    edges = {
        (e.get_attribute("data-parent"), e.get_attribute("data-child")): e.get_attribute("class")
        for e in browser.find_elements(By.CSS_SELECTOR, "svg.lineage path.edge")
    }
    assert edges == {
        ("A", "B"): "edge edge-split", ("A", "C"): "edge edge-split",
        ("B", "D"): "edge edge-merge", ("C", "D"): "edge edge-merge",
    }
    # Drawn where a person sees them: the merge child right of both parents, the split children right of the root.
    x = {t: browser.find_element(By.CSS_SELECTOR, f'g.node[data-token="{t}"]').rect["x"] for t in nodes}
    assert x["A"] < x["B"] == x["C"] < x["D"]
    complete = browser.find_elements(By.CSS_SELECTOR, '#windows tr[data-complete="true"]')
    assert len(complete) == 2
    assert "complete" in complete[0].text and "120" in browser.find_element(By.ID, "windows").text
    # the transaction check as a verdict, its figures behind a click
    check = complete[0].find_element(By.CSS_SELECTOR, "details.check")
    assert check.find_element(By.TAG_NAME, "summary").text == "ok" and "ok=True" not in check.text
    check.find_element(By.TAG_NAME, "summary").click()
    assert "ok=True" in check.text
    assert browser.find_element(By.CSS_SELECTOR, '[data-card="windows complete"] b').text == "2 / 3"
    assert "Nothing stuck." in browser.find_element(By.ID, "stuck").text
    assert STORE_PASSWORD not in browser.page_source

    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "ui-lineage.png"
    shot.write_bytes(_full_page_png(browser))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _full_page_png(driver: Any) -> bytes:
    """The whole page, not just the viewport (Chrome DevTools' captureBeyondViewport)."""
    import base64

    width, height = driver.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
    )
    clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip})
    return base64.b64decode(shot["data"])


def test_navigation_entry_embeds_the_lineage_in_airflow(airflow_ui_server: AirflowServer, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _log_in(browser, airflow_ui_server, PAGE)
    # The external view's url_route: Airflow's own UI shows the plugin page in an iframe under /plugin/.
    browser.get(airflow_ui_server.base_url + "/plugin/spanner-cdc")
    wait = WebDriverWait(browser, 90)
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[src*='/spanner-cdc/']")))
    ARTIFACTS.mkdir(exist_ok=True)
    browser.switch_to.frame(frame)
    link = wait.until(ec.presence_of_element_located((By.LINK_TEXT, "orders")))
    assert link.get_attribute("href").endswith("/spanner-cdc/streams/orders?namespace=live")
    link.click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, 'svg.lineage g.node[data-token="D"]')))
    browser.switch_to.default_content()
    (ARTIFACTS / "ui-in-airflow.png").write_bytes(_full_page_png(browser))
