"""Task body of the hourly DAG's `snapshot` task: the lineage's initial snapshot, once, just before its first window."""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast
from spanner_cdc.times import utc

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)


@fail_fast
def snapshot(stream: str, window_start: dt.datetime) -> dict[str, Any]:
    """The `snapshot` task of the stream's hourly DAG."""
    _, settings = stream_settings(stream)
    return first_snapshot(settings, utc(window_start))


def first_snapshot(settings: Settings, window_start: dt.datetime) -> dict[str, Any]:
    """The first run: every watched table at `window_start - 1 µs`, so the run's window holds every later change.

    Later runs find the snapshot complete and do nothing; a run after a crash finishes it at its own T0.
    """
    from spanner_cdc.extract.snapshot import MICROSECOND, run_snapshot
    from spanner_cdc.store import open_store

    with open_store(settings) as store:
        lineage = next((x for x in store.lineages() if (x.stream, x.namespace) == (settings.stream, settings.namespace)), None)
        existing = None if lineage is None else store.snapshot(lineage.id)
        started = lineage is not None and bool(store.partitions(lineage.id))
    if existing is not None and existing.complete:
        return {"stream": settings.stream, "at": existing.at.isoformat(), "skipped": "the snapshot is complete"}
    # a lineage that already extracts changes gets its snapshot just before them (T0 chosen by run_snapshot)
    at = None if existing is not None or started else window_start - MICROSECOND
    summary = run_snapshot(settings, at=at)
    log.info("stream %s: snapshot at %s, %d rows of %d tables", settings.stream, summary.at, summary.rows, len(summary.tables))
    return summary.to_json()
