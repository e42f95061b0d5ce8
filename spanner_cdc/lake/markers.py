"""Closing a window in the lake: the `_windows/` marker naming the window, its files and row counts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.publish import write_json_atomic
from spanner_cdc.store.models import ManifestFile


def write_marker(
    layout: LakeLayout,
    *,
    lineage_id: int,
    window_start: datetime,
    window_end: datetime,
    files: Sequence[ManifestFile],
    check: dict[str, Any],
) -> Path:
    """The `_windows/` marker naming the window, its files and row counts (written atomically)."""
    path = layout.marker_path(window_start, window_end)
    tables: dict[str, int] = {}
    for f in files:
        tables[f.table_name or ""] = tables.get(f.table_name or "", 0) + f.rows
    root = layout.root
    write_json_atomic(
        path,
        {
            "stream": layout.stream,
            "namespace": layout.namespace,
            "lineage_id": lineage_id,
            "window_start": window_start.isoformat(),
            "window_end": window_end.isoformat(),
            "complete": True,
            "rows": sum(f.rows for f in files),
            "bytes": sum(f.bytes for f in files),
            "tables": dict(sorted(tables.items())),
            "transaction_check": check,
            "files": [
                {
                    "path": str(Path(f.path).relative_to(root)) if Path(f.path).is_relative_to(root) else f.path,
                    "table": f.table_name,
                    "rows": f.rows,
                    "bytes": f.bytes,
                    "token": f.token,
                    "range_start": f.range_start.isoformat(),
                    "range_end": f.range_end.isoformat(),
                }
                for f in sorted(files, key=lambda f: f.path)
            ],
        },
    )
    return path

