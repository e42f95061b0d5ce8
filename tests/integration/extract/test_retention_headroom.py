"""Retention headroom end to end: the local server's clock runs ahead while a lineage stands still, until /metrics,
the UI and the shipped alert rules report it; catching up clears it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from spanner_cdc.devstack import workload
from spanner_cdc.devstack.spanner_server import LocalSpanner, create_database
from spanner_cdc.extract.window import run_window
from spanner_cdc.store import MetadataStore
from spanner_cdc.times import parse_rfc3339
from spanner_cdc.ui.app import StoreTarget, create_app
from tests.fixtures.monitoring import AFTER_VERIFY, DASHBOARD, RULES, alerts_on, metrics_used, parse_exposition
from tests.fixtures.spanner import INSTANCE, PROJECT, unique_database_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STREAM = "HeadroomStream"
HOUR = timedelta(hours=1)
DAY = 86_400  # the stream's retention_period: Spanner's minimum, 1d
FAST = 7200.0  # server seconds per real second while the clock is advanced


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSpanner]:
    """A server of its own (its clock is moved) whose partitions neither split nor merge on a timer: a window of
    many idle hours reads two partitions' heartbeats."""
    log = tmp_path_factory.mktemp("headroom-spanner") / "server.log"
    with LocalSpanner(extra_args=["--policy-event-every", "none", "--policy-merge-idle", "none"], log_path=log) as server:
        yield server


def server_now(server: LocalSpanner) -> datetime:
    return parse_rfc3339(server.control.status()["now"])


def advance(server: LocalSpanner, until: datetime) -> None:
    """Run the server's clock fast until `until`, then at real time again."""
    server.control.set_clock_rate(FAST)
    while (now := server_now(server)) < until:
        time.sleep(min(0.5, (until - now).total_seconds() / FAST + 0.01))  # waiting for the server's clock
    server.control.set_clock_rate(1.0)


def hour_of(value: datetime) -> datetime:
    return value.replace(minute=0, second=0, microsecond=0)


def test_headroom_under_the_threshold_shows_in_metrics_the_ui_and_the_alerts_until_the_lineage_catches_up(
    quiet_server: LocalSpanner, extract_settings: Any, store: MetadataStore, pg_url: str, spark: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    server = quiet_server
    monkeypatch.setenv("SPANNER_EMULATOR_HOST", server.host)
    database = create_database(server.host, PROJECT, INSTANCE, unique_database_id("h"), (), "GOOGLE_STANDARD_SQL")
    workload.setup_database(database, "GOOGLE_STANDARD_SQL", STREAM)
    database.update_ddl([f"ALTER CHANGE STREAM {STREAM} SET OPTIONS (retention_period = '1d')"]).result(60)
    workload.run_workload(database, transactions=20, seed=3, ground_truth=tmp_path / "truth.jsonl")
    start = hour_of(server_now(server))
    advance(server, start + HOUR + timedelta(minutes=1))
    # the live lineage (a backfill whose windows are all complete reports no headroom: nothing left to read)
    settings = extract_settings(database.database_id, STREAM, emulator_host=server.host, heartbeat_ms=300_000, namespace="live")
    assert run_window(settings, start, start + HOUR).complete

    app = create_app(
        authorize=lambda: None,
        connect=lambda: StoreTarget(pg_url, open=lambda: MetadataStore.connect(pg_url), headroom_warning=0.5),
        clock=lambda: server_now(server),  # the source's time: what its retention is measured against
    )
    ids = f'{{stream="{STREAM}",namespace="{settings.namespace}"}}'
    labels = {"stream": STREAM, "namespace": settings.namespace}
    page = f"/streams/{STREAM}?namespace={settings.namespace}"

    def ours(scraped: dict[str, float]) -> dict[str, float]:
        return {name: value for name, value in scraped.items() if ids[1:-1] in name}

    with TestClient(app) as client:
        before = parse_exposition(client.get("/metrics").text)
        # every metric the alert rules and the dashboard query is one a live /metrics exports (the verify's once a
        # verify ran: test_verify.py scrapes those)
        exported = {name.split("{")[0] for name in before}
        for name, used in metrics_used().items():
            assert used - AFTER_VERIFY <= exported, f"{name}: {used - AFTER_VERIFY - exported}"
            assert not exported & AFTER_VERIFY, "a verify metric without a verify"
        assert before["spanner_cdc_retention_period_seconds" + ids] == DAY
        assert before["spanner_cdc_retention_headroom_threshold_seconds" + ids] == DAY / 2
        assert DAY / 2 < before["spanner_cdc_retention_headroom_seconds" + ids] <= DAY
        assert 'data-warning="headroom"' not in client.get(page).text
        quiet = alerts_on(ours(before), "SpannerCdcRetentionHeadroomLow", [], tmp_path)
        assert quiet.returncode == 0, quiet.stdout + quiet.stderr

        # the lineage stands still while 13 hours pass: its oldest unread change is 13 h old, 11 h from leaving
        advance(server, start + 14 * HOUR)
        behind = parse_exposition(client.get("/metrics").text)
        headroom = behind["spanner_cdc_retention_headroom_seconds" + ids]
        assert 0 < headroom < DAY / 2
        assert behind["spanner_cdc_freshness_seconds" + ids] >= 13 * 3600
        html = client.get(page).text
        assert 'data-warning="headroom"' in html and "backfill" in html and "retention_period" in html
        assert 'data-card="retention headroom"' in html and 'class="card warn"' in html
        firing = alerts_on(ours(behind), "SpannerCdcRetentionHeadroomLow", [{**labels, "severity": "warning"}], tmp_path)
        assert firing.returncode == 0, firing.stdout + firing.stderr
        # and the test can fail: expecting silence now is a failed promtool test
        assert alerts_on(ours(behind), "SpannerCdcRetentionHeadroomLow", [], tmp_path).returncode != 0

        # catching up (the hours since, in one run) moves the low watermark and clears it everywhere
        caught_up = hour_of(server_now(server))
        assert run_window(settings, start + HOUR, caught_up).complete
        after = parse_exposition(client.get("/metrics").text)
        assert after["spanner_cdc_retention_headroom_seconds" + ids] > DAY / 2
        assert after["spanner_cdc_freshness_seconds" + ids] < 2 * 3600
        assert 'data-warning="headroom"' not in client.get(page).text
        cleared = alerts_on(ours(after), "SpannerCdcRetentionHeadroomLow", [], tmp_path)
        assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert RULES.exists() and DASHBOARD.exists()
