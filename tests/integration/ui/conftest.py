"""A headless Chromium (Debian's, through selenium) at the size of a laptop screen, 1440 x 1000."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1440,1000",
)


@pytest.fixture
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium
    with tempfile.TemporaryDirectory(prefix="spanner-cdc-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            yield driver
        finally:
            driver.quit()
