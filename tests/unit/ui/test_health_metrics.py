"""Lag, the stuck list, Prometheus metrics, credential masking and DAG -> lineage links."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from spanner_cdc.lineage.rules import State
from spanner_cdc.masking import mask_url
from spanner_cdc.names import backfill_namespace
from spanner_cdc.ui.health import lag_seconds, splits_and_merges, state_counts, stuck
from spanner_cdc.ui.links import lineage_for_dag
from spanner_cdc.ui.metrics import render_metrics
from spanner_cdc.ui.secrets import Redactor
from spanner_cdc.ui.view import LineageView
from tests.unit.ui.sample import HOUR, NOW, T0, partition, sample_view


def test_lag_is_measured_against_the_newest_windows_inclusive_end() -> None:
    view = sample_view()
    by_token = {p.token: p for p in view.partitions}
    # D has landed up to T0+2h-1µs; the newest window ends at T0+3h, inclusive end T0+3h-1µs.
    assert lag_seconds(by_token["D"], view) == 3600.0
    assert lag_seconds(by_token["A"], view) is None


def test_nothing_is_stuck_in_a_healthy_lineage() -> None:
    assert stuck(sample_view(), NOW) == []


def test_expired_lease_behind_and_failing_partitions_are_stuck() -> None:
    view = sample_view(
        D=partition("D", State.RUNNING, T0 + HOUR, T0 + HOUR + timedelta(minutes=30), parents=("B", "C"),
                    lease_owner="worker-1", lease_expires_at=NOW - timedelta(minutes=5), attempts=3,
                    last_error="DeadlineExceeded"),
    )
    reasons = [s.reason for s in stuck(view, NOW)]
    assert len(reasons) == 3
    assert reasons[0].startswith("lease of worker-1 expired")
    assert reasons[1] == "not advancing: 1800 s behind the newest window's start"
    assert reasons[2] == "failing: attempt 3: DeadlineExceeded"


def test_a_live_lease_is_not_stuck() -> None:
    view = sample_view(
        D=partition("D", State.RUNNING, T0 + HOUR, T0 + 2 * HOUR - timedelta(microseconds=1), parents=("B", "C"),
                    lease_owner="w", lease_expires_at=NOW + timedelta(minutes=5)),
    )
    assert stuck(view, NOW) == []


def test_counts_splits_and_merges() -> None:
    view = sample_view()
    assert state_counts(view) == {"CREATED": 0, "READY": 1, "SCHEDULED": 0, "RUNNING": 0, "FINISHED": 3}
    assert splits_and_merges(view) == ({"A"}, {"D"})


def _samples(text: str) -> dict[str, float]:
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) spanner_cdc_\w+ ", line), line
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    return samples


def test_metrics_are_prometheus_text_per_stream() -> None:
    text = render_metrics([sample_view()], NOW)
    samples = _samples(text)
    ids = 'stream="orders",namespace="live"'
    assert samples[f"spanner_cdc_records_landed_total{{{ids}}}"] == 200
    assert samples[f"spanner_cdc_files_landed_total{{{ids}}}"] == 5
    assert samples[f'spanner_cdc_partitions{{{ids},state="FINISHED"}}'] == 3
    assert samples[f'spanner_cdc_partitions{{{ids},state="READY"}}'] == 1
    assert samples[f"spanner_cdc_low_watermark_lag_seconds{{{ids}}}"] == pytest.approx(1800.000001)
    assert samples[f'spanner_cdc_windows{{{ids},complete="true"}}'] == 2
    assert samples[f'spanner_cdc_windows{{{ids},complete="false"}}'] == 1
    assert samples[f"spanner_cdc_window_duration_seconds{{{ids}}}"] == 65
    assert samples[f"spanner_cdc_stuck_partitions{{{ids}}}"] == 0
    assert text.count("# TYPE spanner_cdc_partitions gauge") == 1
    assert text.endswith("\n")


def test_metric_labels_are_escaped() -> None:
    view = sample_view()
    odd = type(view)(LineageView(1, 'we"ird\\name', "live"), view.partitions, view.windows, None, view.edges)
    assert 'stream="we\\"ird\\\\name"' in render_metrics([odd], NOW)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg2://cdc:s3cr%40t@db.example:5432/meta", "postgresql+psycopg2://cdc:***@db.example:5432/meta"),
        ("postgresql://cdc@localhost/meta", "postgresql://cdc@localhost/meta"),
        (None, "embedded Postgres"),
    ],
)
def test_store_url_is_shown_without_its_password(url: str | None, shown: str) -> None:
    assert mask_url(url) == shown


def test_redactor_hides_raw_and_decoded_password_and_any_url_password() -> None:
    redactor = Redactor()
    redactor.add("postgresql://cdc:s3cr%40t@db/meta")
    assert redactor.label == "postgresql://cdc:***@db/meta"
    assert redactor.redact("failed for cdc:s3cr%40t and s3cr@t") == "failed for cdc:*** and ***"
    assert redactor.redact("bad url 'postgres://u:hunter2@h:5/x'") == "bad url 'postgres://u:***@h:5/x'"


def test_dag_links_resolve_to_lineages() -> None:
    run_id = "manual__2024-05-01T10:00:00"
    lineages = [LineageView(1, "orders", "live"), LineageView(2, "orders", backfill_namespace(run_id))]
    assert lineage_for_dag("spanner_cdc_hourly__orders", None, lineages, {}) == ("orders", "live")
    assert lineage_for_dag("spanner_cdc_hourly__shop", None, lineages, {"shop": "orders"}) == ("orders", "live")
    assert lineage_for_dag("spanner_cdc_hourly__other", None, lineages, {}) is None
    assert lineage_for_dag("spanner_cdc_backfill", run_id, lineages, {}) == ("orders", backfill_namespace(run_id))
    assert lineage_for_dag("spanner_cdc_backfill", "manual__other", lineages, {}) is None
    assert lineage_for_dag("some_dag", None, lineages, {}) is None
