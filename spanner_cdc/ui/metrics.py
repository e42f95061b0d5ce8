"""Prometheus text exposition (format 0.0.4) of every lineage: records landed, partitions by state, lag, windows,
freshness and retention headroom. The alert rules in `resources/prometheus/` and the example dashboard use only these."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from spanner_cdc.times import parse_rfc3339
from spanner_cdc.ui.health import freshness_seconds, headroom, last_verified, state_counts, stuck
from spanner_cdc.ui.view import StreamView

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_HEADROOM_WARNING = 0.5  # Settings.headroom_warning's default

# name -> (type, help); the order here is the order of the exposition.
FAMILIES: dict[str, tuple[str, str]] = {
    "spanner_cdc_records_landed_total": ("counter", "Rows landed in the lake, summed over the lineage's windows."),
    "spanner_cdc_files_landed_total": ("counter", "Parquet files published, summed over the lineage's windows."),
    "spanner_cdc_partitions": ("gauge", "Partitions of the lineage by state."),
    "spanner_cdc_stuck_partitions": ("gauge", "Partitions with an expired lease, behind the newest window, or failing."),
    "spanner_cdc_low_watermark_timestamp_seconds": ("gauge", "Low watermark of the lineage as a Unix time."),
    "spanner_cdc_low_watermark_lag_seconds": ("gauge", "Seconds between now and the lineage's low watermark."),
    "spanner_cdc_windows": ("gauge", "Windows of the lineage by completeness (complete=true|false)."),
    "spanner_cdc_last_complete_window_end_timestamp_seconds": ("gauge", "End of the newest complete window."),
    "spanner_cdc_window_duration_seconds": (
        "gauge",
        "Wall-clock seconds from opening to completing the newest complete window.",
    ),
    "spanner_cdc_open_window_age_seconds": ("gauge", "Seconds since the end of the oldest window not complete yet (0: none open)."),
    "spanner_cdc_failed_window_checks": ("gauge", "Open windows whose last transaction check failed (they are not closed)."),
    "spanner_cdc_freshness_seconds": ("gauge", "Seconds between now and the end of the newest complete window."),
    "spanner_cdc_retention_period_seconds": ("gauge", "The change stream's retention_period, as the lineage's last plan read it."),
    "spanner_cdc_verify_mismatches": (
        "gauge", "Mismatches `spanner-cdc verify` found in the newest window it verified (state rows and change log rows)."
    ),
    "spanner_cdc_verify_rows_compared": ("gauge", "Rows `spanner-cdc verify` compared in the newest window it verified."),
    "spanner_cdc_verify_window_end_timestamp_seconds": ("gauge", "End of the newest window `spanner-cdc verify` verified."),
    "spanner_cdc_verify_timestamp_seconds": ("gauge", "When the newest verified window was verified (Spanner's clock)."),
    "spanner_cdc_retention_headroom_seconds": (
        "gauge",
        "retention_period minus the age of the low watermark: below 0, unread changes have left the stream's retention.",
    ),
    "spanner_cdc_retention_headroom_threshold_seconds": (
        "gauge",
        "Headroom under which the UI and the alert rules warn (SPANNER_CDC_HEADROOM_WARNING times the retention period).",
    ),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render_metrics(views: Iterable[StreamView], now: datetime, headroom_warning: float = DEFAULT_HEADROOM_WARNING) -> str:
    """One sample per family and lineage (labels stream and namespace); families without samples are omitted."""
    samples: dict[str, list[str]] = {name: [] for name in FAMILIES}

    def add(name: str, value: float, **labels: str) -> None:
        samples[name].append(f"{name}{_labels(**labels)} {_number(value)}")

    for view in views:
        ids = {"stream": view.lineage.stream, "namespace": view.lineage.namespace}
        add("spanner_cdc_records_landed_total", view.records_total, **ids)
        add("spanner_cdc_files_landed_total", view.files_total, **ids)
        for state, count in state_counts(view).items():
            add("spanner_cdc_partitions", count, **ids, state=state)
        add("spanner_cdc_stuck_partitions", len({s.token for s in stuck(view, now)}), **ids)
        if view.low_watermark is not None:
            add("spanner_cdc_low_watermark_timestamp_seconds", view.low_watermark.timestamp(), **ids)
            add("spanner_cdc_low_watermark_lag_seconds", max((now - view.low_watermark).total_seconds(), 0.0), **ids)
        complete = [w for w in view.windows if w.complete]
        add("spanner_cdc_windows", view.windows_complete, **ids, complete="true")
        add("spanner_cdc_windows", view.windows_total - view.windows_complete, **ids, complete="false")
        if complete:
            last = max(complete, key=lambda w: w.end)
            add("spanner_cdc_last_complete_window_end_timestamp_seconds", last.end.timestamp(), **ids)
            if last.duration_seconds is not None:
                add("spanner_cdc_window_duration_seconds", last.duration_seconds, **ids)
        still_open = [w.end for w in view.windows if not w.complete]
        add("spanner_cdc_open_window_age_seconds", max((now - min(still_open)).total_seconds(), 0.0) if still_open else 0, **ids)
        add("spanner_cdc_failed_window_checks", sum(1 for w in view.windows if not w.complete and w.check_passed is False), **ids)
        fresh = freshness_seconds(view, now)
        if fresh is not None:
            add("spanner_cdc_freshness_seconds", fresh, **ids)
        if view.lineage.retention_period_s is not None:
            add("spanner_cdc_retention_period_seconds", view.lineage.retention_period_s, **ids)
        room = headroom(view, now, headroom_warning)
        if room is not None:
            add("spanner_cdc_retention_headroom_seconds", room.seconds, **ids)
            add("spanner_cdc_retention_headroom_threshold_seconds", room.threshold_seconds, **ids)
        verified = last_verified(view)
        if verified is not None:
            last, result = verified, verified.verify or {}
            add("spanner_cdc_verify_mismatches", int(result.get("mismatches", 0)), **ids)
            add("spanner_cdc_verify_rows_compared", int(result.get("rows_compared", 0)), **ids)
            add("spanner_cdc_verify_window_end_timestamp_seconds", last.end.timestamp(), **ids)
            if result.get("verified_at"):
                add("spanner_cdc_verify_timestamp_seconds", parse_rfc3339(str(result["verified_at"])).timestamp(), **ids)
    lines: list[str] = []
    for name, (kind, help_text) in FAMILIES.items():
        if samples[name]:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples[name]]
    return "\n".join(lines) + "\n"
