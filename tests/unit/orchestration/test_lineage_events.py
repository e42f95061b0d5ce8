"""What the tasks report to OpenLineage: dataset names, counts, and the provider's OperatorLineage built from them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from spanner_cdc.orchestration import lineage_events as le


@dataclass
class File:
    token: str
    rows: int
    bytes: int


def test_lake_locations_are_named_as_openlineage_names_files_and_buckets(tmp_path: Path) -> None:
    assert le.location_dataset("gs://bucket/lake/orders_stream/live") == le.DatasetRef("gs://bucket", "/lake/orders_stream/live")
    assert le.location_dataset("s3://b/x/") == le.DatasetRef("s3://b", "/x")
    assert le.location_dataset(str(tmp_path / "lake")) == le.DatasetRef("file", str(tmp_path / "lake"))
    assert le.spanner_namespace("p", "i", "d") == "spanner://p/i/d"


@pytest.mark.parametrize(("task_id", "kind"), [("wave_3.extract", "extract"), ("close", "close"), ("snapshot", "snapshot"),
                                               ("current_state", "current_state"), ("wave_2.next_wave", None), ("plan", None)])  # fmt: skip
def test_which_tasks_report(task_id: str, kind: str | None) -> None:
    assert le.task_kind(task_id) == kind


def test_counts_of_the_manifest_and_of_a_batchs_tokens() -> None:
    files = [File("a", 10, 100), File("b", 5, 50), File("a", 1, 7)]
    assert le.manifest_counts(files) == le.Counts(16, 3, 157)
    assert le.manifest_counts(files, ["a"]) == le.Counts(11, 2, 107)


def test_snapshot_and_current_state_lineage() -> None:
    assert le.snapshot_lineage("spanner://p/i/d", "/lake/s/live/snapshot", {"skipped": "the snapshot is complete"}, []).outputs == []
    snap = le.snapshot_lineage("spanner://p/i/d", "/lake/s/live/snapshot", {"tables": {"Orders": 3, "Items": 2}, "rows": 5},
                               [File("", 3, 30), File("", 2, 20)])  # fmt: skip
    assert [d.name for d in snap.inputs] == ["Items", "Orders"] and snap.outputs[0].counts == le.Counts(5, 2, 50)
    state = le.current_state_lineage("/lake/s/live", "/lake/s/live/_current",
                                     [{"tables": {"Orders": 4, "Items": 1}, "snapshots": {"Orders": 7, "Items": 8}}])  # fmt: skip
    assert state.inputs[0].name == "/lake/s/live" and state.outputs[0].counts == le.Counts(5, 2, 0)
    assert le.current_state_lineage("/l", "/l/current", []).outputs == []


def test_the_operator_lineage_carries_the_schema_and_the_output_statistics() -> None:
    lineage = le.change_log_lineage(le.DatasetRef("spanner://p/i/d", "orders_stream"), "/lake/orders_stream/live", le.Counts(7, 2, 900))
    built = le.to_operator_lineage(lineage)
    (source,) = built.inputs
    assert (source.namespace, source.name, source.facets["dataSource"].uri) == ("spanner://p/i/d", "orders_stream", "spanner://p/i/d")
    (out,) = built.outputs
    assert (out.namespace, out.name) == ("file", "/lake/orders_stream/live")
    assert [f.name for f in out.facets["schema"].fields][:3] == ["uuid", "stream_name", "read_method"]
    stats = out.outputFacets["outputStatistics"]
    assert (stats.rowCount, stats.fileCount, stats.size) == (7, 2, 900)
