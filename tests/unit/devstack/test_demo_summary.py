"""The demo's change-log listing: published change files only, not the snapshot/ and current/ areas."""

from __future__ import annotations

from pathlib import Path

from spanner_cdc.devstack.demo_summary import published_files


def test_the_change_log_leaves_out_staging_markers_the_snapshot_and_the_current_states(tmp_path: Path) -> None:
    names = [
        "table_name=albums/window_id=20261121T050000Z/part-L1-a-000.parquet",
        "table_name=snapshot/window_id=20261121T050000Z/part-L1-b-000.parquet",  # a table named like an area
        "snapshot/table=albums/part-20261121T045959999999Z-00000-of-00001.parquet",
        "current/table=albums/as_of=20261121T060000Z/part-00000.parquet",
        "_staging/abc/part-L1-a-000.parquet",
        ".hidden/x.parquet",
    ]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert published_files(tmp_path) == [str(tmp_path / names[0]), str(tmp_path / names[1])]
