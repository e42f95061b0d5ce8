"""Three windows of a small workload with a split and a merge, extracted by the pipeline on the run's local Spark."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from spanner_cdc.local_spanner.launcher import LocalSpanner
from spanner_cdc.pipeline import run_window
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = pytest.mark.integration


def test_three_windows_with_split_and_merge(make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, spark: Any) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM)
    work = SmallWorkload(database)
    bounds = [datetime.now(UTC)]
    work.phase(range(0, 10))
    local_spanner.control.split(database.name, STREAM)
    work.phase(range(10, 20))
    bounds.append(datetime.now(UTC))
    work.phase(range(20, 30))
    local_spanner.control.merge(database.name, STREAM)
    work.phase(range(30, 40))
    bounds.append(datetime.now(UTC))
    work.phase(range(40, 50))
    bounds.append(datetime.now(UTC))
    summaries = [run_window(settings, s, e) for s, e in zip(bounds, bounds[1:], strict=False)]
    for summary in summaries:
        assert summary.complete, summary
        assert summary.transaction_check["ok"] and summary.transaction_check["transactions"] > 0
    rows = published_rows(settings.output_root)
    assert Counter(change_of(r) for r in rows) == Counter(work.expected)
    assert sum(s.records for s in summaries) == len(work.expected)
    assert summaries[0].waves >= 2  # the split's children were read in a later wave of the same run
