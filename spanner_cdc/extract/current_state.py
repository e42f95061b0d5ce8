"""Current-state tables at each closed window's end: the previous state plus one window, a Spark task per table (the run
over the lineage's windows; lake/current_state.py is the same concept's fold of one table, spark/state_job.py its job)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.window import _store, _stream, layout_of
from spanner_cdc.lake import storage
from spanner_cdc.lineage.rules import inclusive_end

if TYPE_CHECKING:
    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.settings import Settings
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.models import WindowRow

log = logging.getLogger(__name__)


@dataclass
class StateSummary:
    as_of: datetime
    marker: str
    tables: dict[str, int] = field(default_factory=dict)
    created: bool = True  # False: it existed (a re-run)

    def to_json(self) -> dict[str, Any]:
        return {"as_of": _z(self.as_of), "marker": self.marker, "tables": self.tables, "created": self.created}


def _z(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")




def _marker(layout: LakeLayout, as_of: datetime) -> dict[str, Any] | None:
    data = storage.read_bytes(layout.state_marker_location(as_of))
    return None if data is None else dict(json.loads(data))


def _step(settings: Settings, store: MetadataStore, lineage_id: int, window: WindowRow, previous: dict[str, Any] | None) -> StateSummary:
    """One window on top of `previous` (a state marker, or None: the snapshot if there is one, else nothing)."""
    from spanner_cdc.spark.session import spark_session
    from spanner_cdc.spark.state_job import StateTask, run_state_job

    layout = layout_of(settings)
    base = layout.location.rstrip("/") + "/"
    prior = {t: base + v["path"] for t, v in (previous or {}).get("tables", {}).items()}
    snapshot: dict[str, list[str]] = {}
    if previous is None:
        for part in store.snapshot_files(lineage_id):
            snapshot.setdefault(part.table, []).append(part.path)
    last = inclusive_end(window.end)
    changes: dict[str, list[str]] = {}
    for f in store.manifest(lineage_id):
        if f.table_name and f.range_start <= last and f.range_end >= window.start:
            changes.setdefault(f.table_name, []).append(f.path)
    tasks = [
        StateTask(table, prior.get(table), sorted(snapshot.get(table, [])), sorted(changes.get(table, [])), window.start,
                  window.end, layout.state_object(table, window.end))
        for table in sorted(set(prior) | set(snapshot) | set(changes))
    ]  # fmt: skip
    listing = run_state_job(spark_session(settings), tasks) if tasks else []
    tables = {row["table"]: {"path": row["path"][len(base):], "rows": int(row["rows"])} for row in listing}
    marker = {"stream": layout.stream, "namespace": layout.namespace, "as_of": _z(window.end), "window_start": _z(window.start), "tables": tables}
    location = layout.state_marker_location(window.end)
    failpoint("state_after_job")  # crash tests: the state's files are published, its marker not yet written
    storage.write_bytes(location, json.dumps(marker, indent=1, sort_keys=True).encode())  # last: the state exists now
    return StateSummary(window.end, location, {t: v["rows"] for t, v in tables.items()})


def _prune(layout: LakeLayout, ends: list[datetime], keep: int) -> None:
    """Keep the newest `keep` states: an older one's marker goes first, then its files."""
    for end in ends[:-keep] if len(ends) > keep else []:
        marker = _marker(layout, end)
        storage.remove([layout.state_marker_location(end)])
        for table in (marker or {}).get("tables", {}):
            storage.remove_tree(layout.state_location(table, end))


def update_current_state(settings: Settings, *, up_to: datetime | None = None, keep: int | None = None) -> list[StateSummary]:
    """States for every closed window (up to `up_to`) that has none yet, oldest first, each from the one before."""
    layout, keep = layout_of(settings), keep or settings.current_state_keep
    with _store(settings) as store:
        lineage = store.get_lineage(_stream(settings), settings.namespace)
        windows = []
        for w in sorted(store.windows(lineage.id), key=lambda w: w.start):
            if w.state != "COMPLETE" or (up_to is not None and w.end > up_to):
                break  # a state holds every change before its end: never past a window still open
            windows.append(w)
        made: list[StateSummary] = []
        marked = [w for w in windows if _marker(layout, w.end) is not None]
        newest = marked[-1] if marked else None
        # incremental: from the newest state on (older ones may be pruned); the first run replays from the snapshot
        previous = None if newest is None else _marker(layout, newest.end)
        for window in windows:
            if newest is not None and window.end <= newest.end:
                continue
            summary = _step(settings, store, lineage.id, window, previous)
            made.append(summary)
            previous = _marker(layout, window.end)
            log.info("%s: current state as of %s: %s", layout.stream, _z(window.end), summary.tables)
        _prune(layout, [w.end for w in windows if _marker(layout, w.end) is not None], keep)
    return made
