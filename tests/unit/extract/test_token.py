"""The token job's pure parts: data source options, record -> batch + control summary, staged files, control file."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.spark import executor
from spanner_cdc.spark.control_file import ControlSummary
from spanner_cdc.spark.executor import TableFiles, envelope_batches
from spanner_cdc.spark.spec import TokenJobSpec
from tests.unit.lake.records import T0, children, data_record, heartbeat

E = T0 + timedelta(hours=1)
LAST = E - timedelta(microseconds=1)


def spec(tmp_path: Path, **changes) -> TokenJobSpec:  # type: ignore[no-untyped-def]
    values = dict(
        project="p", instance="i", database="d", emulator_host="127.0.0.1:9010", stream="cs",
        dialect="GOOGLE_STANDARD_SQL", heartbeat_ms=1000, token="tok", read_from=T0, read_to=LAST,
        window_start=T0, window_end=E, read_method="spanner-change-stream", attempt_dir=str(tmp_path / "a1"), max_rows=3,
    )  # fmt: skip
    values.update(changes)
    return TokenJobSpec(**values)  # type: ignore[arg-type]


def test_options_round_trip_as_strings(tmp_path: Path) -> None:
    original = spec(tmp_path)
    options = original.options()
    assert all(isinstance(v, str) for v in options.values())
    assert TokenJobSpec.from_options(options) == original
    no_emulator = spec(tmp_path, emulator_host=None)
    assert "emulator_host" not in no_emulator.options()
    assert TokenJobSpec.from_options(no_emulator.options()) == no_emulator
    mutable = spec(tmp_path, partition_mode="MUTABLE_KEY_RANGE")
    assert TokenJobSpec.from_options(mutable.options()).partition_mode == "MUTABLE_KEY_RANGE"


def test_batches_and_summary_of_a_partition_that_continues(tmp_path: Path) -> None:
    records = [data_record(i, tx=f"t{i}", mods=2) for i in range(4)] + [heartbeat(100), heartbeat(200)]
    summary = ControlSummary("tok", T0, LAST)
    batches = list(envelope_batches(spec(tmp_path), records, summary))
    assert [b.num_rows for b in batches] == [4, 4]  # bounded by max_rows=3: full after the 2nd record
    assert (summary.data_records, summary.rows, summary.heartbeats) == (4, 8, 2)
    assert summary.tables == {"Users": 8}
    assert summary.last_timestamp == T0 + timedelta(microseconds=200)
    assert not summary.finished and summary.watermark == LAST


def test_landed_data_records_are_summed_up_as_observe_sums_them(tmp_path: Path) -> None:
    """envelope_batches notes each data change record without the dispatch: the summary is observe()'s all the same."""
    records = [data_record(3, tx="a", mods=2), data_record(9, tx="b", table="Orders"), data_record(5, tx="c", mods=3)]
    landed, observed = ControlSummary("tok", T0, LAST), ControlSummary("tok", T0, LAST)
    list(envelope_batches(spec(tmp_path), records, landed))
    for record in records:
        observed.observe(record, len(record.mods))
    assert landed == observed
    assert (landed.data_records, landed.rows, landed.tables) == (3, 6, {"Users": 5, "Orders": 1})
    assert landed.last_timestamp == T0 + timedelta(microseconds=9)


def test_children_finish_the_partition_at_their_start(tmp_path: Path) -> None:
    records = [data_record(1), children(500, "tok", "c1", "c2")]
    summary = ControlSummary("tok", T0, LAST)
    assert sum(b.num_rows for b in envelope_batches(spec(tmp_path), records, summary)) == 1
    assert summary.finished and summary.watermark == T0 + timedelta(microseconds=500)
    assert [c.token for c in summary.children[0].child_partitions] == ["c1", "c2"]


def test_no_data_yields_no_batch(tmp_path: Path) -> None:
    summary = ControlSummary("tok", T0, LAST)
    assert list(envelope_batches(spec(tmp_path), [heartbeat(5)], summary)) == []
    assert summary.heartbeats == 1 and summary.rows == 0


def test_control_file_round_trip(tmp_path: Path) -> None:
    summary = ControlSummary("tok", T0, LAST)
    for record in (data_record(1, mods=3), heartbeat(9), children(10, "tok", "c1")):
        summary.observe(record, 3 if hasattr(record, "mods") else 0)
    summary.resumes = 2
    path = tmp_path / "x" / "control.json"
    assert ControlSummary.read(path) is None
    summary.write(path)
    again = ControlSummary.read(path)
    assert again == summary and again is not None and again.finished
    summary.error_type, summary.error_message = "RetentionError", "gone"
    summary.write(path)
    assert ControlSummary.read(path).error_type == "RetentionError"  # type: ignore[union-attr]
    assert [p.name for p in path.parent.iterdir()] == ["control.json"]


def test_table_files_publish_each_table_whole_at_its_deterministic_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "ROW_GROUP_ROWS", 4)
    records = [data_record(i, tx=f"t{i}", table="Users" if i % 3 else "Orders", mods=2) for i in range(9)]
    root = str(tmp_path / "lake" / "cs" / "live")
    job = spec(tmp_path, lake_root=root, lineage_id=7)
    layout = LakeLayout(tmp_path / "lake", "cs", "live")

    def destination(table: str) -> str:
        return layout.published_location(lineage_id=7, token="tok", range_start=T0, range_end=LAST, table=table, window_start=T0)

    files = TableFiles(destination, tmp_path / "scratch")
    for batch in envelope_batches(job, records, ControlSummary("tok", T0, LAST)):
        files.write(batch)
        assert published_locations(root) == []  # nothing appears under a published name before it is whole
    listing = files.close().to_pylist()
    assert [(f["table"], f["rows"]) for f in listing] == [("Orders", 6), ("Users", 12)]
    names = [layout.published_location(lineage_id=7, token="tok", range_start=T0, range_end=LAST, table=t, window_start=T0) for t in ("Orders", "Users")]
    assert [f["path"] for f in listing] == names == published_locations(root)
    assert [f["bytes"] for f in listing] == [Path(n).stat().st_size for n in names]
    assert not any(p.name.startswith(".") for p in (tmp_path / "lake").rglob("*"))  # no scratch left behind
    users = pq.ParquetFile(listing[1]["path"])
    assert users.schema_arrow == LAKE_SCHEMA
    assert users.metadata.num_row_groups >= 2  # flushed in row groups as rows came, not all at the end
    assert [r["mod_index"] for r in users.read().to_pylist()][:4] == [0, 1, 0, 1]


def test_mutable_partition_records_end_announce_and_move(tmp_path: Path) -> None:
    from spanner_cdc.model.records import PartitionEndRecord, PartitionEventRecord, PartitionStartRecord

    at = T0 + timedelta(microseconds=300)
    records = [
        data_record(1),
        PartitionStartRecord(at, "00000000", ("new",)),
        PartitionEventRecord(at, "00000001", "tok", (), ("new",)),
        PartitionEndRecord(at + timedelta(microseconds=5), "00000000", "tok"),
    ]
    summary = ControlSummary("tok", T0, LAST)
    assert sum(b.num_rows for b in envelope_batches(spec(tmp_path), records, summary)) == 1
    assert summary.finished and summary.watermark == at + timedelta(microseconds=5) and not summary.children
    copy = ControlSummary.from_json(summary.to_json())
    assert (copy.started, copy.moves, copy.ended) == (summary.started, summary.moves, summary.ended)
    assert copy.started == [records[1]] and copy.finished and copy.watermark == summary.watermark


def test_a_mutable_partition_that_goes_on_is_not_finished(tmp_path: Path) -> None:
    from spanner_cdc.model.records import PartitionEventRecord

    summary = ControlSummary("tok", T0, LAST)
    list(envelope_batches(spec(tmp_path), [PartitionEventRecord(T0, "00000000", "tok", ("src",), ())], summary))
    assert not summary.finished and summary.watermark == LAST and len(summary.moves) == 1
