"""Task bodies of the hourly DAG: plan the window, extract a batch of tokens, plan the next wave, close."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

from spanner_cdc.names import LIVE_READ_METHOD
from spanner_cdc.orchestration import waves
from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast
from spanner_cdc.times import utc  # Airflow hands out pendulum datetimes; the pipeline gets plain ones

log = logging.getLogger(__name__)


def max_map_length() -> int:
    from airflow.sdk import conf

    return conf.getint("core", "max_map_length", fallback=1024)


@fail_fast
def catch_up(stream: str, window_start: dt.datetime) -> list[dict[str, Any]]:
    """Finish the windows before this one that earlier runs left open (oldest first); their summaries.

    A run's waves are bounded, so a window whose lineage changed many times may be left open. Its
    pending tokens must be read up to *its* end before this window's waves read them further, or
    their rows would land in the wrong window and neither window's transaction check could pass.
    """
    from spanner_cdc.extract.window import catch_up as finish_open_windows

    _, settings = stream_settings(stream)
    return [summary_dict(s) for s in finish_open_windows(settings, utc(window_start), read_method=LIVE_READ_METHOD)]


@fail_fast
def plan(stream: str, window_start: dt.datetime, window_end: dt.datetime) -> list[list[waves.TokenPayload]]:
    """Wave 1: bootstrap the lineage if new, and batch the tokens ready to read in the window."""
    from spanner_cdc.extract.window import plan_window

    _, settings = stream_settings(stream)
    window_plan = plan_window(settings, utc(window_start), utc(window_end), read_method=LIVE_READ_METHOD)
    ready = [waves.payload(task) for task in window_plan.ready]
    log.info(
        "stream %s window [%s, %s): %d tokens ready (lineage %s, reading from %s)",
        settings.stream, window_start, window_end, len(ready), window_plan.lineage_id, window_plan.effective_start,
    )
    return waves.batches(ready, max_map_length())


@fail_fast
def next_wave(stream: str, window_start: dt.datetime, window_end: dt.datetime) -> list[list[waves.TokenPayload]]:
    """Waves 2..n: the children that the previous wave's splits and merges made ready."""
    from spanner_cdc.extract.window import ready_tasks

    _, settings = stream_settings(stream)
    ready = [waves.payload(task) for task in ready_tasks(settings, utc(window_start), utc(window_end))]
    log.info("stream %s window [%s, %s): %d tokens ready for this wave", settings.stream, window_start, window_end, len(ready))
    return waves.batches(ready, max_map_length())


@fail_fast
def extract(
    stream: str,
    window_start: dt.datetime,
    window_end: dt.datetime,
    batch: list[waves.TokenPayload],
    *,
    owner: str,
    read_method: str = LIVE_READ_METHOD,
    namespace: str | None = None,
) -> dict[str, Any]:
    """Read every token of `batch` over its range, land it, commit its checkpoint; returns the counts."""
    from spanner_cdc.extract.window import extract_tokens

    _, settings = stream_settings(stream, namespace=namespace)
    results = extract_tokens(
        settings, utc(window_start), utc(window_end), waves.tokens_of(batch), read_method=read_method, owner=owner
    )
    counts = {"tokens": 0, "records": 0, "files": 0, "finished": 0, "promoted_children": 0}
    for result in results:
        promoted = result.promoted_children
        log.info(
            "stream %s token %s: %d records, %d files, finished=%s, watermark %s, children made ready: %s",
            settings.stream, waves.short_token(result.token), result.records, result.files,
            result.finished, result.watermark, promoted,
        )
        counts["tokens"] += 1
        counts["records"] += int(result.records)
        counts["files"] += int(result.files)
        counts["finished"] += int(bool(result.finished))
        counts["promoted_children"] += len(promoted) if isinstance(promoted, list | tuple | set) else int(promoted)
    return counts


def summary_dict(summary: Any) -> dict[str, Any]:
    data = summary.to_json()
    return dict(json.loads(data) if isinstance(data, str) else data)


@fail_fast
def close(stream: str, window_start: dt.datetime, window_end: dt.datetime) -> dict[str, Any]:
    """Check completeness and the transaction counts; a complete window is marked and its summary returned.

    An incomplete window (tokens still pending after the last wave) skips the task: no Asset event,
    the window stays open and the next run continues it.
    """
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from spanner_cdc.errors import ExtractError
    from spanner_cdc.extract.window import close_window

    _, settings = stream_settings(stream)
    try:
        summary = close_window(settings, utc(window_start), utc(window_end))
    except ExtractError as exc:
        # A transaction-count mismatch will not heal by retrying the same check: fail for a human to look at.
        raise AirflowFailException(f"stream {settings.stream} window [{window_start}, {window_end}): {exc}") from exc
    data = summary_dict(summary)
    log.info("stream %s window [%s, %s): %s", settings.stream, window_start, window_end, json.dumps(data, default=str))
    if not summary.complete:
        raise AirflowSkipException(
            f"stream {settings.stream} window [{window_start}, {window_end}) is not complete yet: "
            f"{len(summary.pending)} tokens pending ({', '.join(waves.short_token(t) for t in summary.pending[:5])}); "
            "the next run continues it"
        )
    return data


def owner_of(ti: Any) -> str:
    """The lease owner recorded in the store: which task instance (and try) holds a token."""
    return f"{ti.dag_id}/{ti.run_id}/{ti.task_id}[{ti.map_index}]#{ti.try_number}"


ASSET_EXTRA_KEYS = ("stream", "namespace", "window_start", "window_end", "tokens", "records", "files", "marker_path")


def asset_extra(summary: dict[str, Any]) -> dict[str, Any]:
    """What a downstream DAG triggered by the landed-window asset needs: the bounds, counts, the marker and the
    window's completeness record."""
    extra = {key: summary[key] for key in ASSET_EXTRA_KEYS if key in summary}
    check = summary.get("transaction_check") or {}
    if "transactions" in check:
        extra["transactions"] = check["transactions"]
    if summary.get("completeness"):
        extra["completeness"] = summary["completeness"]  # the record its marker and Iceberg snapshot carry
    return extra
