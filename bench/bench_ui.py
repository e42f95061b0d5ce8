"""Benchmark: the stream page of a 10,000-partition lineage: server render time, page size, elements, browser render."""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.figures import report
from bench.scale_lineage import build
from spanner_cdc.store import MetadataStore

COMMAND = "python -m bench.bench_ui"
RENDER_TARGET_S = 2.0  # the page of a 10,000-partition stream, server side and in the browser (issue 15)
T0 = datetime(2026, 11, 23, 6, tzinfo=UTC)


def _client(store: MetadataStore, now: datetime):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from spanner_cdc.ui.app import StoreTarget, create_app

    app = create_app(authorize=lambda: None, connect=lambda: StoreTarget(url=None, open=lambda: store), clock=lambda: now)
    return TestClient(app)


def _browser_seconds(html: str, rounds: int) -> list[float]:
    """Chromium (headless, through chromedriver) loading the saved page: navigation start to load end."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        return []
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        page = Path(tmp) / "stream.html"
        page.write_text(html, encoding="utf-8")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in ("--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp}/profile", "--window-size=1440,1000"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
        try:
            seconds = []
            for _ in range(rounds):
                driver.get(page.as_uri())
                timing = driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"
                )
                seconds.append(float(timing) / 1000)
            return seconds
        finally:
            driver.quit()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000, help="partitions in the lineage (default 10000)")
    parser.add_argument("--frontier", type=int, default=600, help="live partitions at the end (default 600)")
    parser.add_argument("--windows", type=int, default=6, help="hourly windows, the last one open (default 6)")
    parser.add_argument("--rounds", type=int, default=5, help="page loads measured; medians reported (default 5)")
    parser.add_argument("--metadata-url", help="measure this Postgres instead of a fresh embedded one")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ui-pg-") as tmp:
        server = None
        if args.metadata_url:
            url = args.metadata_url
        else:
            from spanner_cdc.devstack.embedded_pg import ensure_running

            server = ensure_running(Path(tmp) / "postgres")
            url = server.create_database("bench_ui")
        try:
            with MetadataStore.connect(url) as store:
                store.upgrade()
                started = time.perf_counter()
                built = build(store, "bench_" + uuid.uuid4().hex[:6], partitions=args.partitions,
                              frontier=args.frontier, windows=args.windows, t0=T0)
                build_s = time.perf_counter() - started
                now = T0 + args.windows * timedelta(hours=1) - timedelta(minutes=20)
                reads, renders, html = [], [], ""
                with _client(store, now) as client:
                    for _ in range(args.rounds):
                        started = time.perf_counter()
                        store.graph(built.lineage_id)
                        reads.append(time.perf_counter() - started)
                        started = time.perf_counter()
                        response = client.get(f"/streams/{built.stream}")
                        renders.append(time.perf_counter() - started)
                        assert response.status_code == 200, response.text[:500]
                        html = response.text
        finally:
            if server is not None:
                server.stop()
    browser = _browser_seconds(html, args.rounds)
    _print(args, built, build_s, reads, renders, html, browser)
    return 0


def _print(args, built, build_s, reads, renders, html, browser) -> None:  # type: ignore[no-untyped-def]
    render = statistics.median(renders)
    elements = len(re.findall(r"<[a-zA-Z]", html))
    nodes = html.count('class="node ')
    print(
        f"bench_ui: stream page of a lineage with {built.partitions} partitions ({built.frontier} live, "
        f"{built.windows} hourly windows, splits and merges), built through the store in {build_s:.0f} s; "
        f"median of {args.rounds} loads"
    )
    print(f"  server: whole request {render:.2f} s (min..max {min(renders):.2f}..{max(renders):.2f}), "
          f"of which reading the store ~{statistics.median(reads):.2f} s")
    print(f"  page: {len(html.encode()) / 1e6:.2f} MB, ~{elements} elements, {nodes} partition boxes drawn")
    report(f"ui: {built.partitions:,}-partition stream page, server", render, RENDER_TARGET_S, "s", higher_is_better=False)
    if browser:
        print(f"  chromium: load of the saved page {statistics.median(browser):.2f} s (min..max {min(browser):.2f}..{max(browser):.2f})")
        report(f"ui: {built.partitions:,}-partition stream page, Chromium load", statistics.median(browser),
               RENDER_TARGET_S, "s", higher_is_better=False)
    else:
        print("  chromium: not measured (no chromium / chromedriver on PATH)")
    print(f"command: {COMMAND} --partitions {args.partitions} --frontier {args.frontier} --windows {args.windows} "
          f"--rounds {args.rounds}")


if __name__ == "__main__":
    raise SystemExit(main())
