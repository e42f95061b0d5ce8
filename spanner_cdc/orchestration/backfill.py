"""Task bodies of the backfill DAG: validate the trigger form up front, then run the range window by window."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from spanner_cdc.errors import ConfigError, SpannerCdcError
from spanner_cdc.names import BACKFILL_READ_METHOD, backfill_namespace
from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast
from spanner_cdc.orchestration.hourly import summary_dict
from spanner_cdc.settings import Settings
from spanner_cdc.stream_config import parse_datetime

log = logging.getLogger(__name__)
WINDOW = dt.timedelta(hours=1)



def hourly_windows(start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """[start, end) cut at hour boundaries, so backfill windows line up with the hourly DAG's."""
    windows = []
    cursor = start
    while cursor < end:
        boundary = cursor.replace(minute=0, second=0, microsecond=0) + WINDOW
        windows.append((cursor, min(boundary, end)))
        cursor = windows[-1][1]
    return windows


def check_range(
    start: dt.datetime,
    end: dt.datetime,
    *,
    now: dt.datetime,
    retention: dt.timedelta,
    created_at: dt.datetime | None = None,
) -> None:
    """The range must be non-empty, in the past, overlap the stream's life, and start inside its retention."""
    if end <= start:
        raise ConfigError("end", end.isoformat(), f"a date-time after start ({start.isoformat()})")
    if end > now:
        raise ConfigError("end", end.isoformat(), f"a date-time not after the database's current time ({now.isoformat()})")
    if created_at is not None and end <= created_at:
        raise ConfigError(
            "end", end.isoformat(), f"a date-time after the change stream was created ({created_at.isoformat()})"
        )
    oldest = now - retention
    if start < oldest:
        raise ConfigError(
            "start",
            start.isoformat(),
            f"a date-time at or after {oldest.isoformat()} (the change stream keeps {retention} of history; "
            "older changes are gone from Spanner)",
        )


def windows_to_read(spec: Mapping[str, Any]) -> list[tuple[dt.datetime, dt.datetime]]:
    """The range's hourly windows, without those wholly before the stream existed (nothing to read there)."""
    created = dt.datetime.fromisoformat(spec["created_at"]) if spec.get("created_at") else None
    windows = hourly_windows(dt.datetime.fromisoformat(spec["start"]), dt.datetime.fromisoformat(spec["end"]))
    return [(start, end) for start, end in windows if created is None or end > created]


def source_clock(settings: Settings) -> tuple[dt.datetime, dt.timedelta, dt.datetime | None]:
    """The database's current time, the stream's retention and creation time, read from Spanner."""
    from spanner_cdc.source.client import detect_dialect, open_database, server_now, stream_metadata

    database = open_database(settings)
    dialect = detect_dialect(database, settings.dialect)
    metadata = stream_metadata(database, str(settings.stream), dialect)
    return server_now(database, dialect), metadata.retention, metadata.created_at


def _resolve(params: Mapping[str, Any], run_id: str) -> tuple[dict[str, Any], Settings]:
    stream = params.get("stream")
    if not isinstance(stream, str) or not stream:
        raise ConfigError("stream", stream, "one of the configured streams")
    _, settings = stream_settings(stream, namespace=backfill_namespace(run_id))
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    overrides = {
        name: fields[name].metadata["parse"](name, params[name])
        for name in ("heartbeat_ms", "output_root")
        if params.get(name) not in (None, "")
    }
    settings = dataclasses.replace(settings, **overrides)
    start = parse_datetime("start", params.get("start"))
    end = parse_datetime("end", params.get("end"))
    spec = {
        "stream": stream,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "namespace": settings.namespace,
        "heartbeat_ms": settings.heartbeat_ms,
        "output_root": str(settings.output_root),
    }
    return spec, settings


def validate(params: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """Refuse a bad form before anything is read: bad values, end not after start, start out of retention."""
    from airflow.sdk.exceptions import AirflowFailException

    try:
        spec, settings = _resolve(params, run_id)
        if dt.datetime.fromisoformat(spec["end"]) <= dt.datetime.fromisoformat(spec["start"]):
            raise ConfigError("end", spec["end"], f"a date-time after start ({spec['start']})")
        now, retention, created_at = source_clock(settings)
        check_range(
            dt.datetime.fromisoformat(spec["start"]),
            dt.datetime.fromisoformat(spec["end"]),
            now=now,
            retention=retention,
            created_at=created_at,
        )
    except SpannerCdcError as exc:
        # Retrying cannot fix a bad form: fail at once, with the message the operator needs as the log's one line
        # (no chained traceback of where in the checks it was found)
        log.error("backfill refused: %s", exc)
        raise AirflowFailException(f"backfill refused: {exc}") from None
    spec["created_at"] = created_at.isoformat() if created_at else None
    windows = windows_to_read(spec)
    spec["windows"] = len(windows)
    log.info("stream %s backfill %s: %d windows in namespace %s", spec["stream"], spec["start"], len(windows), spec["namespace"])
    return spec


@fail_fast
def run(spec: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """Extract every window of the range, in order, in the backfill's own namespace; idempotent on retry."""
    from spanner_cdc.errors import ExtractError
    from spanner_cdc.extract.window import run_window

    _, settings = _resolve(spec, run_id)
    totals = {"windows": 0, "records": 0, "files": 0}
    for window_start, window_end in windows_to_read(spec):
        summary = run_window(settings, window_start, window_end, read_method=BACKFILL_READ_METHOD)
        data = summary_dict(summary)
        log.info(
            "stream %s backfill window [%s, %s) in %s: complete=%s records=%s files=%s",
            settings.stream, window_start, window_end, settings.namespace, summary.complete,
            data.get("records"), data.get("files"),
        )
        if not summary.complete:
            raise ExtractError(
                f"stream {settings.stream} backfill window [{window_start}, {window_end}) is not complete: "
                f"{len(summary.pending)} tokens pending; the retry continues from the checkpoints"
            )
        totals["windows"] += 1
        totals["records"] += int(data.get("records", 0))
        totals["files"] += int(data.get("files", 0))
    return {**spec, **totals}
