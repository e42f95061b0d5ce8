"""Lag, the stuck list, Prometheus metrics, credential masking and DAG -> lineage links."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta
from typing import Any

import pytest

from spanner_cdc.lineage.rules import State
from spanner_cdc.masking import mask_url
from spanner_cdc.names import backfill_namespace
from spanner_cdc.ui.health import (
    freshness,
    freshness_seconds,
    headroom,
    lag_seconds,
    splits_and_merges,
    state_counts,
    stuck,
)
from spanner_cdc.ui.links import lineage_for_dag
from spanner_cdc.ui.metrics import render_metrics
from spanner_cdc.ui.secrets import Redactor
from spanner_cdc.ui.view import LineageView, StreamView, load_stream
from tests.unit.ui.sample import HOUR, NOW, T0, FakeStore, partition, sample_graph, sample_view


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


def _with_retention(seconds: int | None, **overrides: Any) -> StreamView:
    graph = sample_graph(**overrides)
    lineage = dataclasses.replace(graph.lineage, retention_period_s=seconds)
    return load_stream(FakeStore(dataclasses.replace(graph, lineage=lineage)), "orders", "live")


def test_freshness_is_the_age_of_the_newest_complete_windows_end() -> None:
    assert freshness_seconds(sample_view(), NOW) == 1800  # the newest complete window ends at T0 + 2 h
    view = sample_view()
    only_open = type(view)(view.lineage, view.partitions, tuple(w for w in view.windows if not w.complete), view.low_watermark)
    assert freshness_seconds(only_open, NOW) is None


def test_freshness_has_a_verdict_against_the_streams_hourly_schedule() -> None:
    from spanner_cdc.ui import pages

    on_time = freshness(sample_view(), NOW)
    assert on_time is not None and (on_time.seconds, on_time.schedule_seconds, on_time.verdict) == (1800, 3600, "ok")
    behind = freshness(sample_view(), NOW + timedelta(hours=2))  # the newest complete window ended 2.5 h ago
    assert behind is not None and behind.verdict == "late"
    html = pages.render_index("", [sample_view()], "store", NOW + timedelta(hours=2))
    assert 'data-freshness="late">late · 2h30m<' in html
    view = sample_view()
    backfill = type(view)(dataclasses.replace(view.lineage, namespace=backfill_namespace("manual__x")), view.partitions,
                          view.windows, view.low_watermark)  # fmt: skip
    assert freshness(backfill, NOW) is None  # a past range keeps no schedule


def test_headroom_is_the_retention_minus_the_low_watermarks_age_and_warns_under_the_share() -> None:
    # the low watermark is T0 + 2 h - 1 µs, 1800.000001 s before NOW
    assert headroom(_with_retention(None), NOW, 0.5) is None  # no plan has read the retention yet
    roomy = headroom(_with_retention(7200), NOW, 0.5)
    assert roomy is not None and roomy.seconds == pytest.approx(5399.999999) and roomy.threshold_seconds == 3600
    assert not roomy.warning
    tight = headroom(_with_retention(3600), NOW, 0.5)
    assert tight is not None and tight.seconds == pytest.approx(1799.999999) and tight.warning  # just under 1800
    assert not headroom(_with_retention(3600), NOW, 0.4).warning  # a lower share warns later
    gone = headroom(_with_retention(1200), NOW, 0.5)
    assert gone is not None and gone.seconds < 0 and gone.warning  # changes have already left the retention
    finished = _with_retention(3600, D=partition("D", State.FINISHED, T0, T0 + HOUR))
    assert headroom(finished, NOW, 0.5) is None  # nothing left to read
    # a backfill whose windows are all complete has read its range: its standing watermark is no alarm
    view = _with_retention(1200)
    backfill = dataclasses.replace(view, lineage=dataclasses.replace(view.lineage, namespace="backfill_x"))
    assert headroom(backfill, NOW, 0.5) is not None  # one of its windows is still open
    done = dataclasses.replace(backfill, windows=tuple(dataclasses.replace(w, state="COMPLETE") for w in backfill.windows))
    assert headroom(done, NOW, 0.5) is None


def test_metrics_give_freshness_retention_headroom_and_its_threshold() -> None:
    samples = _samples(render_metrics([_with_retention(3600)], NOW, headroom_warning=0.5))
    ids = 'stream="orders",namespace="live"'
    assert samples[f"spanner_cdc_freshness_seconds{{{ids}}}"] == 1800
    assert samples[f"spanner_cdc_retention_period_seconds{{{ids}}}"] == 3600
    assert samples[f"spanner_cdc_retention_headroom_seconds{{{ids}}}"] == pytest.approx(1799.999999)
    assert samples[f"spanner_cdc_retention_headroom_threshold_seconds{{{ids}}}"] == 1800
    assert samples[f"spanner_cdc_open_window_age_seconds{{{ids}}}"] == 0  # the open window ends after NOW
    assert samples[f"spanner_cdc_failed_window_checks{{{ids}}}"] == 0
    later = _samples(render_metrics([_with_retention(3600)], NOW + 2 * HOUR, headroom_warning=0.25))
    assert later[f"spanner_cdc_open_window_age_seconds{{{ids}}}"] == 5400  # its end, T0 + 3 h, was 1.5 h ago
    assert later[f"spanner_cdc_retention_headroom_threshold_seconds{{{ids}}}"] == 900
    unknown = _samples(render_metrics([_with_retention(None)], NOW))
    assert not any(name.startswith(("spanner_cdc_retention_", "spanner_cdc_retention_headroom")) for name in unknown)


def test_an_open_window_whose_check_failed_is_counted() -> None:
    view = sample_view()
    failed = dataclasses.replace(view.windows[-1], transaction_check={"ok": False, "mismatched": 2})
    broken = type(view)(view.lineage, view.partitions, (*view.windows[:-1], failed), view.low_watermark)
    assert _samples(render_metrics([broken], NOW))['spanner_cdc_failed_window_checks{stream="orders",namespace="live"}'] == 1


def test_the_newest_verified_window_is_in_the_metrics() -> None:
    view = sample_view()
    assert "spanner_cdc_verify" not in render_metrics([view], NOW)  # never verified: no sample
    first, second = sorted((w for w in view.windows if w.complete), key=lambda w: w.end)[:2]
    verified = {
        first.end: {"mismatches": 3, "rows_compared": 40, "verified_at": "2026-01-02T00:00:00Z"},
        second.end: {"mismatches": 0, "rows_compared": 41, "verified_at": "2026-01-03T00:00:00Z"},
    }
    windows = tuple(dataclasses.replace(w, verify=verified.get(w.end)) for w in view.windows)
    samples = _samples(render_metrics([dataclasses.replace(view, windows=windows)], NOW))
    ids = 'stream="orders",namespace="live"'
    assert samples[f"spanner_cdc_verify_mismatches{{{ids}}}"] == 0 and samples[f"spanner_cdc_verify_rows_compared{{{ids}}}"] == 41
    assert samples[f"spanner_cdc_verify_window_end_timestamp_seconds{{{ids}}}"] == second.end.timestamp()
    assert samples[f"spanner_cdc_verify_timestamp_seconds{{{ids}}}"] == 1767398400
