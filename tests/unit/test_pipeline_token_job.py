"""The token job's pure parts: data source options, record -> batch + control summary, the control file."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from spanner_cdc.spark.control import ControlSummary
from spanner_cdc.spark.token_job import TokenJobSpec, envelope_batches
from tests.unit.lake_records import T0, children, data_record, heartbeat

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


def test_batches_and_summary_of_a_partition_that_continues(tmp_path: Path) -> None:
    records = [data_record(i, tx=f"t{i}", mods=2) for i in range(4)] + [heartbeat(100), heartbeat(200)]
    summary = ControlSummary("tok", T0, LAST)
    batches = list(envelope_batches(spec(tmp_path), records, summary))
    assert [b.num_rows for b in batches] == [4, 4]  # bounded by max_rows=3: full after the 2nd record
    assert (summary.data_records, summary.rows, summary.heartbeats) == (4, 8, 2)
    assert summary.tables == {"Users": 8}
    assert summary.last_timestamp == T0 + timedelta(microseconds=200)
    assert not summary.finished and summary.watermark == LAST


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
