"""Closing a window in the lake: the `_windows/` marker naming the window, its files, row counts and completeness record."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.store.models import ManifestFile

log = logging.getLogger(__name__)


def remove_window_orphans(layout: LakeLayout, *, lineage_id: int, window_start: datetime, files: Sequence[ManifestFile]) -> list[str]:
    """Delete every object this lineage's extracts left under the window that the manifest does not list
    (a crashed attempt's, whatever its range): run before the marker, so the window holds exactly its files."""
    found = storage.glob(layout.window_objects_pattern(lineage_id, window_start))
    removed = storage.remove_unlisted(found, [f.path for f in files])
    if removed:
        log.warning("%s: removed %d object(s) of crashed attempts before the window's marker", layout.stream, len(removed))
    return removed


def write_marker(
    layout: LakeLayout,
    *,
    lineage_id: int,
    window_start: datetime,
    window_end: datetime,
    files: Sequence[ManifestFile],
    check: dict[str, Any],
    completeness: dict[str, Any],
) -> Path | str:
    """The `_windows/` marker naming the window, its files, row counts and completeness record: written whole, and last.

    Objects of crashed attempts under the window are removed first, so that once the marker exists the
    window's objects are exactly the ones it lists. A local marker is returned as a Path, a bucket's as its URL.
    """
    remove_window_orphans(layout, lineage_id=lineage_id, window_start=window_start, files=files)
    location = layout.marker_location(window_start, window_end)
    tables: dict[str, int] = {}
    for f in files:
        tables[f.table_name or ""] = tables.get(f.table_name or "", 0) + f.rows
    marker = {
        "stream": layout.stream,
        "namespace": layout.namespace,
        "lineage_id": lineage_id,
        "window_start": window_start.isoformat(),
        "window_end": window_end.isoformat(),
        "complete": True,
        "generation": 1,  # compaction writes the next ones (rewrite_marker)
        "rows": sum(f.rows for f in files),
        "bytes": sum(f.bytes for f in files),
        "tables": dict(sorted(tables.items())),
        "transaction_check": check,
        "completeness": completeness,
        "files": _entries(layout, files),
    }
    storage.write_bytes(location, json.dumps(marker, indent=1, sort_keys=True, default=str).encode())
    return location if layout.is_url else Path(location)


def _entries(layout: LakeLayout, files: Sequence[ManifestFile]) -> list[dict[str, Any]]:
    return [
        {
            "path": _relative(layout, f.path),
            "table": f.table_name,
            "rows": f.rows,
            "bytes": f.bytes,
            "token": f.token,
            "range_start": f.range_start.isoformat(),
            "range_end": f.range_end.isoformat(),
        }
        for f in sorted(files, key=lambda f: f.path)
    ]


def read_marker(location: str | Path) -> dict[str, Any] | None:
    """A window's marker as written (None when there is none)."""
    data = storage.read_bytes(location)
    return None if data is None else dict(json.loads(data))


def _relative(layout: LakeLayout, path: str) -> str:
    root = layout.location + "/"
    return path[len(root) :] if path.startswith(root) else path


def earlier_completeness(layout: LakeLayout, window_start: datetime, window_end: datetime, files: Sequence[ManifestFile]) -> dict[str, Any] | None:
    """The completeness record of the window's marker if one exists and lists exactly `files` (a close killed after
    writing it): the re-run keeps it, so the marker and a snapshot the killed close committed carry the same record."""
    earlier = read_marker(layout.marker_location(window_start, window_end))
    if not earlier or not earlier.get("completeness"):
        return None
    if sorted(f["path"] for f in earlier.get("files", [])) != sorted(_relative(layout, f.path) for f in files):
        return None
    return dict(earlier["completeness"])


def rewrite_marker(layout: LakeLayout, location: str, files: Sequence[ManifestFile]) -> dict[str, Any]:
    """A closed window's next marker generation, listing `files` (the same rows in other files: compaction); every
    other field kept. Written whole over the last one: a reader has the old list or the new, and the old list's files
    stay until no live Iceberg snapshot holds them (`extract/maintain.py`)."""
    marker = read_marker(location)
    if marker is None:
        raise FileNotFoundError(location)
    entries = _entries(layout, files)
    if entries == marker["files"]:
        return marker
    if sum(e["rows"] for e in entries) != marker["rows"]:
        raise ValueError(f"{location}: the new files hold {sum(e['rows'] for e in entries)} rows, the window {marker['rows']}")
    marker.update(files=entries, bytes=sum(f.bytes for f in files), generation=int(marker.get("generation", 1)) + 1)
    storage.write_bytes(location, json.dumps(marker, indent=1, sort_keys=True, default=str).encode())
    return marker
