"""Lake layout, atomic publication with deterministic names, orphan removal, window marker."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spanner_cdc.lake.columns import LAKE_SCHEMA, PARTITION_COLUMN
from spanner_cdc.lake.completeness import completeness_record
from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
from spanner_cdc.lake.layout import LakeLayout, is_published, published_files, window_id
from spanner_cdc.lake.markers import earlier_completeness, write_marker
from spanner_cdc.lake.publish import publish, read_journal, remove_orphans, staged_files
from tests.unit.lake.records import T0, data_record

E = T0 + timedelta(hours=1)
LAST = E - timedelta(microseconds=1)


def stage(data_dir: Path, records: list, *, name: str = "part-00000-1b2c.c000.snappy.parquet") -> None:
    """Write files the way Spark's partitionBy(PARTITION_COLUMN) leaves them, without the partition column."""
    batcher = EnvelopeBatcher(EnvelopeContext("cs", "spanner-change-stream", "tok", T0, E))
    for record in records:
        batcher.add(record)
    table = batcher.take().to_pandas()  # type: ignore[union-attr]
    for value, rows in table.groupby(PARTITION_COLUMN):
        target = data_dir / f"{PARTITION_COLUMN}={value}"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(rows.drop(columns=[PARTITION_COLUMN]), schema=LAKE_SCHEMA, preserve_index=False), target / name)


@pytest.fixture
def layout(tmp_path: Path) -> LakeLayout:
    return LakeLayout(tmp_path / "lake", "cs", "live")


def do_publish(layout: LakeLayout, data_dir: Path, token: str = "tok", start=T0):  # type: ignore[no-untyped-def]
    return publish(
        data_dir, layout, lineage_id=3, token=token, range_start=start, range_end=LAST, window_start=T0, window_end=E
    )


def test_names_are_deterministic_in_lineage_token_and_range(layout: LakeLayout) -> None:
    args = dict(lineage_id=1, token="t", range_start=T0, range_end=LAST, table="Users", window_start=T0, sequence=0)
    path = layout.published_path(**args)  # type: ignore[arg-type]
    assert path == layout.published_path(**args)  # type: ignore[arg-type]
    assert path.parent == layout.root / "table_name=Users" / "window_id=20240501T100000Z"
    for change in ({"token": "u"}, {"lineage_id": 2}, {"range_start": T0 + timedelta(microseconds=1)}, {"sequence": 1}):
        assert layout.published_path(**{**args, **change}) != path  # type: ignore[arg-type]
    assert is_published(path, layout.root)
    assert window_id(T0) == "20240501T100000Z"
    assert window_id(T0 + timedelta(microseconds=250)) == "20240501T100000.000250Z"


def test_staging_and_markers_are_not_published(layout: LakeLayout, tmp_path: Path) -> None:
    stage(layout.staging_root / "x" / "data", [data_record()])
    (layout.windows_dir).mkdir(parents=True)
    (layout.windows_dir / "m.parquet").write_bytes(b"")
    (layout.root / "table_name=Users" / ".hidden.parquet").parent.mkdir(parents=True)
    (layout.root / "table_name=Users" / ".hidden.parquet").write_bytes(b"")
    assert published_files(layout.root) == []


def test_publish_moves_each_table_to_its_deterministic_name(layout: LakeLayout, tmp_path: Path) -> None:
    data_dir = tmp_path / "stage" / "data"
    stage(data_dir, [data_record(0, table="Users", mods=2), data_record(1, tx="t2", table="Orders")])
    manifest = do_publish(layout, data_dir)
    assert sorted((f.table_name, f.rows) for f in manifest) == [("Orders", 1), ("Users", 2)]
    assert staged_files(data_dir) == []
    published = published_files(layout.root)
    assert sorted(map(str, published)) == sorted(f.path for f in manifest)
    for f in manifest:
        assert Path(f.path).stat().st_size == f.bytes
        assert pq.read_schema(f.path).names == LAKE_SCHEMA.names
        assert f"table_name={f.table_name}/window_id=" in f.path and f.range_start == T0 and f.range_end == LAST
    journal = read_journal(layout, "tok")
    assert journal is not None and sorted(journal["paths"]) == sorted(f.path for f in manifest)


def test_retry_of_the_same_range_replaces_instead_of_duplicating(layout: LakeLayout, tmp_path: Path) -> None:
    first = tmp_path / "a1" / "data"
    second = tmp_path / "a2" / "data"
    stage(first, [data_record(0, mods=3)], name="part-00000-aaaa.c000.snappy.parquet")
    stage(second, [data_record(0, mods=3)], name="part-00000-bbbb.c000.snappy.parquet")
    one = do_publish(layout, first)
    two = do_publish(layout, second)
    assert [f.path for f in one] == [f.path for f in two]
    files = published_files(layout.root)
    assert len(files) == 1 and pq.read_metadata(files[0]).num_rows == 3


def test_spark_file_counter_orders_the_sequence(layout: LakeLayout, tmp_path: Path) -> None:
    data_dir = tmp_path / "s" / "data"
    stage(data_dir, [data_record(0)], name="part-00000-zz.c001.snappy.parquet")
    stage(data_dir, [data_record(1, tx="t2", mods=2)], name="part-00000-zz.c000.snappy.parquet")
    manifest = do_publish(layout, data_dir)
    assert [(Path(f.path).name.endswith("-000.parquet"), f.rows) for f in manifest] == [(True, 2), (False, 1)]


def test_remove_orphans_keeps_committed_files(layout: LakeLayout, tmp_path: Path) -> None:
    data_dir = tmp_path / "s" / "data"
    stage(data_dir, [data_record(0, table="Users"), data_record(1, tx="t2", table="Orders")])
    manifest = do_publish(layout, data_dir)
    committed = {f.path for f in manifest if f.table_name == "Users"}
    removed = remove_orphans(layout, "tok", committed)
    assert [Path(p).name for p in removed] == [Path(f.path).name for f in manifest if f.table_name == "Orders"]
    assert {str(p) for p in published_files(layout.root)} == committed
    assert read_journal(layout, "tok") is None
    assert remove_orphans(layout, "tok", set()) == []  # nothing journaled any more


def test_marker_names_the_window_its_files_and_counts(layout: LakeLayout, tmp_path: Path) -> None:
    data_dir = tmp_path / "s" / "data"
    stage(data_dir, [data_record(0, mods=2), data_record(1, tx="t2", table="Orders")])
    manifest = do_publish(layout, data_dir)
    check = {"ok": True, "transactions": 2, "rows": 3}
    record = completeness_record(stream="cs", namespace="live", window_start=T0, window_end=E, low_watermark=E, check=check)
    path = write_marker(layout, lineage_id=3, window_start=T0, window_end=E, files=manifest, check=check, completeness=record)
    assert path.parent == layout.windows_dir and not is_published(path, layout.root)
    marker = json.loads(path.read_text())
    assert marker["window_start"] == T0.isoformat() and marker["window_end"] == E.isoformat()
    assert marker["rows"] == 3 and marker["tables"] == {"Orders": 1, "Users": 2}
    assert sorted(f["path"] for f in marker["files"]) == sorted(str(Path(f.path).relative_to(layout.root)) for f in manifest)
    assert marker["transaction_check"]["ok"] is True and marker["completeness"] == record
    # a close re-run (killed after the marker) keeps the marker's record while the files are the same
    assert earlier_completeness(layout, T0, E, manifest) == record
    assert earlier_completeness(layout, T0, E, manifest[:1]) is None
    assert earlier_completeness(layout, E, E + (E - T0), manifest) is None  # no marker for that window


def publish_two_windows(layout: LakeLayout, tmp_path: Path) -> list[str]:
    """Files of two tables in two windows (one starting at a microsecond), published as the extract does."""
    paths = []
    for n, start in enumerate((T0, E + timedelta(microseconds=250))):
        data_dir = tmp_path / f"stage{n}" / "data"
        stage(data_dir, [data_record(0, table="Users", mods=2), data_record(1, tx="t2", table="Orders")])
        manifest = publish(data_dir, layout, lineage_id=3, token="tok", range_start=start, range_end=start + timedelta(minutes=1),
                           window_start=start, window_end=start + timedelta(hours=1))  # fmt: skip
        paths += [f.path for f in manifest]
    return paths


def test_hive_discovery_reads_every_column_typed_and_the_keys_as_strings(layout: LakeLayout, tmp_path: Path) -> None:
    import duckdb
    import pyarrow.dataset as ds

    publish_two_windows(layout, tmp_path)
    table = ds.dataset(layout.root, format="parquet", partitioning="hive").to_table()
    assert table.schema == LAKE_SCHEMA.append(pa.field("table_name", pa.string())).append(pa.field("window_id", pa.string()))
    keys = sorted({(r["table_name"], r["window_id"], r["object"]) for r in table.to_pylist()})
    assert keys == [(t, w, t) for t in ("Orders", "Users") for w in ("20240501T100000Z", "20240501T110000.000250Z")]
    query = duckdb.sql(f"SELECT * FROM read_parquet('{layout.root}/**/*.parquet', hive_partitioning = true)")
    types = dict(zip(query.columns, map(str, query.types), strict=True))
    assert (types["table_name"], types["window_id"], types["window_start"]) == ("VARCHAR", "VARCHAR", "TIMESTAMP WITH TIME ZONE")
    assert len(query.fetchall()) == table.num_rows == 6
