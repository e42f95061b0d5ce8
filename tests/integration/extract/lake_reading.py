"""Test helper: every published lake row, and canonical change tuples to compare with a workload's ground truth."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spanner_cdc.lake import storage
from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.layout import published_files


def published_rows(root: Path) -> list[dict[str, Any]]:
    """All rows of the published files under `root`, checking each file has exactly the lake schema."""
    tables = []
    for path in published_files(root):
        table = pq.read_table(path)
        assert table.schema.names == LAKE_SCHEMA.names, path
        assert [f.type for f in table.schema] == [f.type for f in LAKE_SCHEMA], path
        tables.append(table)
    return pa.concat_tables(tables).to_pylist() if tables else []


def rows_of(locations: list[str]) -> list[dict[str, Any]]:
    """All rows of these files (local paths or gs:// / s3:// objects), checking each has exactly the lake schema."""
    rows = []
    for location in locations:
        table = pq.read_table(io.BytesIO(storage.read_bytes(location) or b""))
        assert table.schema.names == LAKE_SCHEMA.names, location
        assert [f.type for f in table.schema] == [f.type for f in LAKE_SCHEMA], location
        rows += table.to_pylist()
    return rows


def plain_utc(value: datetime) -> datetime:
    """A plain aware UTC datetime: the client's DatetimeWithNanoseconds does not hash like a datetime."""
    value = value.astimezone(UTC)
    return datetime(*value.timetuple()[:6], value.microsecond, tzinfo=UTC)


def change_of(row: dict[str, Any]) -> tuple[Any, ...]:
    """(commit timestamp, table, change type, keys, new values, old values) with JSON in a canonical form."""
    return (
        plain_utc(row["commit_timestamp"]),
        row["object"],
        row["change_type"],
        json.dumps(json.loads(row["keys"]), sort_keys=True),
        json.dumps(json.loads(row["new_values"]), sort_keys=True),
        json.dumps(json.loads(row["old_values"]), sort_keys=True),
    )
