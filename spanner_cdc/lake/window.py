"""Closing a window in the lake: the per-transaction completeness check and the `_windows/` marker."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.publish import write_json_atomic
from spanner_cdc.lake.schema import TIMESTAMP
from spanner_cdc.store.models import ManifestFile

_CHECK_COLUMNS = ["uuid", "commit_timestamp", "server_transaction_id", "record_sequence", "number_of_records_in_transaction"]
MAX_LISTED = 20


def transaction_check(
    paths: Sequence[str], *, window_start: datetime | None = None, window_end: datetime | None = None
) -> dict[str, Any]:
    """For every transaction in the files: distinct landed record_sequence == number_of_records_in_transaction.

    Also counts rows whose uuid repeats (a change landed twice). `ok` is False on any mismatch or
    duplicate; at most MAX_LISTED offending transactions are listed. With window bounds, only
    transactions committed in [window_start, window_end) are checked: a token that fell behind
    catches up on older commits in a later window, whose other records landed with earlier windows.
    """
    empty = {"ok": True, "transactions": 0, "rows": 0, "mismatched": 0, "duplicate_rows": 0, "outside_window_rows": 0}
    if not paths:
        return {**empty, "examples": []}
    dataset = ds.dataset(list(paths), format="parquet")
    table = dataset.to_table(columns=_CHECK_COLUMNS)
    outside = 0
    if window_start is not None and window_end is not None:
        inside = pc.and_(
            pc.greater_equal(table["commit_timestamp"], pa.scalar(window_start, TIMESTAMP)),
            pc.less(table["commit_timestamp"], pa.scalar(window_end, TIMESTAMP)),
        )
        filtered = table.filter(inside)
        outside = table.num_rows - filtered.num_rows
        table = filtered
    rows = table.num_rows
    duplicates = rows - pc.count_distinct(table["uuid"]).as_py()
    grouped = table.group_by("server_transaction_id").aggregate(
        [
            ("record_sequence", "count_distinct"),
            ("number_of_records_in_transaction", "min"),
            ("number_of_records_in_transaction", "max"),
        ]
    )
    landed = grouped["record_sequence_count_distinct"]
    expected_min = grouped["number_of_records_in_transaction_min"]
    expected_max = grouped["number_of_records_in_transaction_max"]
    bad_mask = pc.or_(pc.not_equal(landed, expected_max), pc.not_equal(expected_min, expected_max))
    bad = grouped.filter(bad_mask)
    examples = [
        {
            "server_transaction_id": row["server_transaction_id"],
            "landed_records": row["record_sequence_count_distinct"],
            "number_of_records_in_transaction": row["number_of_records_in_transaction_max"],
        }
        for row in bad.slice(0, MAX_LISTED).to_pylist()
    ]
    return {
        "ok": bad.num_rows == 0 and duplicates == 0,
        "transactions": grouped.num_rows,
        "rows": rows,
        "mismatched": bad.num_rows,
        "duplicate_rows": duplicates,
        "outside_window_rows": outside,
        "examples": examples,
    }


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

