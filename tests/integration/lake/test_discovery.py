"""Spark's partition discovery of the plain Parquet lake: every column typed as written, the keys as strings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.layout import LakeLayout
from tests.unit.lake.test_publish import publish_two_windows

pytestmark = pytest.mark.integration


def test_spark_discovers_the_lake_with_no_clash(spark: Any, tmp_path: Path) -> None:
    layout = LakeLayout(tmp_path / "lake", "cs", "live")
    publish_two_windows(layout, tmp_path)
    rows = spark.read.parquet(str(layout.root))
    types = dict(rows.dtypes)
    assert list(types) == [*LAKE_SCHEMA.names, "table_name", "window_id"]
    assert (types["window_start"], types["table_name"], types["window_id"]) == ("timestamp", "string", "string")
    keys = sorted({(r.table_name, r.window_id, r.object) for r in rows.select("table_name", "window_id", "object").collect()})
    assert keys == [(t, w, t) for t in ("Orders", "Users") for w in ("20240501T100000Z", "20240501T110000.000250Z")]
