"""The Iceberg change log in the metadata store's Postgres: one snapshot per window, re-runs, re-landing, kills, evolution."""

from __future__ import annotations

import dataclasses
import json
import random
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from spanner_cdc.lake import iceberg
from spanner_cdc.lake.columns import LAKE_SCHEMA, PARTITION_COLUMN
from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.publish import publish
from spanner_cdc.settings import Settings
from spanner_cdc.store.models import ManifestFile
from tests.unit.lake.records import T0, data_record

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOUR = timedelta(hours=1)
US = timedelta(microseconds=1)


def settings_for(pg_url: str, tmp_path: Path, namespace: str) -> Settings:
    return Settings(metadata_url=pg_url, output_root=tmp_path / "lake", stream="cs", namespace=namespace, iceberg_catalog="store")


def layout_of(settings: Settings) -> LakeLayout:
    return LakeLayout(settings.output_root, settings.stream or "", settings.namespace)


def land_files(layout: LakeLayout, tmp_path: Path, start: datetime, transactions: int, *, token: str = "tok") -> list[ManifestFile]:
    """Publish a window's files as an extract does: `transactions` records over two tables, 2 mods each."""
    batcher = EnvelopeBatcher(EnvelopeContext("cs", "spanner-change-stream", token, start, start + HOUR))
    base = int((start - T0) / US)
    for n in range(transactions):
        batcher.add(data_record(base + n, tx=f"{start:%H%M}-{token}-{n}", table=("Users", "Orders")[n % 2], mods=2))
    table = batcher.take().to_pandas()  # type: ignore[union-attr]
    data_dir = tmp_path / f"stage-{start:%H%M%S}-{token}-{transactions}" / "data"
    for value, rows in table.groupby(PARTITION_COLUMN):
        (data_dir / f"{PARTITION_COLUMN}={value}").mkdir(parents=True)
        frame = pa.Table.from_pandas(rows.drop(columns=[PARTITION_COLUMN]), schema=LAKE_SCHEMA, preserve_index=False)
        pq.write_table(frame, data_dir / f"{PARTITION_COLUMN}={value}" / "part-0.parquet")
    return publish(data_dir, layout, lineage_id=1, token=token, range_start=start, range_end=start + HOUR - US,
                   window_start=start, window_end=start + HOUR)  # fmt: skip


def uuids_of(files: list[ManifestFile]) -> list[str]:
    return sorted(u for f in files for u in pq.read_table(f.path, columns=["uuid"]).column("uuid").to_pylist())


def table_of(settings: Settings) -> Any:
    props = iceberg.catalog_properties("store", metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    return iceberg.changelog_table(iceberg.open_catalog(props), layout_of(settings))


def scanned_uuids(table: Any, snapshot_id: int | None = None) -> list[str]:
    return sorted(table.scan(selected_fields=("uuid",), snapshot_id=snapshot_id).to_arrow().column("uuid").to_pylist())


def test_each_window_is_one_snapshot_readable_as_of_it(pg_url: str, tmp_path: Path) -> None:
    settings = settings_for(pg_url, tmp_path, "snapshots")
    layout = layout_of(settings)
    windows = [(T0 + n * HOUR, land_files(layout, tmp_path, T0 + n * HOUR, 3 + n)) for n in range(3)]
    for start, files in windows:
        done = iceberg.land_window(settings, layout, window_start=start, window_end=start + HOUR, files=files)
        assert done is not None and done.snapshot_id is not None and done.added == len(files)
        again = iceberg.land_window(settings, layout, window_start=start, window_end=start + HOUR, files=files)
        assert again is not None and again.snapshot_id is None  # a re-run of the close commits nothing twice
    table = table_of(settings)
    snapshots = iceberg.window_snapshots(table)
    assert [s["window_start"] for s in snapshots] == [start.isoformat() for start, _ in windows]
    assert [s["added_rows"] for s in snapshots] == [len(uuids_of(files)) for _, files in windows] == [6, 8, 10]
    truth = uuids_of([f for _, files in windows for f in files])
    assert scanned_uuids(table) == truth
    # hive discovery of the plain files reads the same rows
    assert sorted(ds.dataset(layout.root, format="parquet", partitioning="hive").to_table().column("uuid").to_pylist()) == truth
    for n, snapshot in enumerate(snapshots):  # as of a window's snapshot: every window up to it, whole
        assert scanned_uuids(table, snapshot["snapshot_id"]) == uuids_of([f for _, files in windows[: n + 1] for f in files])
    assert [str(f) for f in table.spec().fields] and [f.source_id for f in table.sort_order().fields] == [
        table.schema().find_field(name).field_id for name in iceberg.SORT_KEYS
    ]


def test_a_window_without_changes_gets_one_snapshot_carrying_its_completeness_record(pg_url: str, tmp_path: Path) -> None:
    from spanner_cdc.lake.check import empty_check
    from spanner_cdc.lake.completeness import completeness_record

    settings = settings_for(pg_url, tmp_path, "quiet")
    layout = layout_of(settings)
    first = land_files(layout, tmp_path, T0, 3)
    iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=first)
    record = completeness_record(stream="cs", namespace="quiet", window_start=T0 + HOUR, window_end=T0 + 2 * HOUR,
                                 low_watermark=T0 + 2 * HOUR, check=empty_check())  # fmt: skip
    done = iceberg.land_window(settings, layout, window_start=T0 + HOUR, window_end=T0 + 2 * HOUR, files=[], completeness=record)
    assert done is not None and done.snapshot_id is not None and (done.added, done.removed) == (0, 0)
    again = iceberg.land_window(settings, layout, window_start=T0 + HOUR, window_end=T0 + 2 * HOUR, files=[], completeness=record)
    assert again is not None and again.snapshot_id is None  # once
    snapshots = iceberg.window_snapshots(table_of(settings))
    assert [s["window_start"] for s in snapshots] == [T0.isoformat(), (T0 + HOUR).isoformat()]
    assert snapshots[-1]["completeness"] == record and snapshots[-1]["total_rows"] == snapshots[0]["total_rows"]


def test_a_relanded_window_replaces_its_files_in_one_snapshot(pg_url: str, tmp_path: Path) -> None:
    settings = settings_for(pg_url, tmp_path, "relanded")
    layout = layout_of(settings)
    first = land_files(layout, tmp_path, T0, 4)
    iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=first)
    kept = land_files(layout, tmp_path, T0 + HOUR, 2)
    iceberg.land_window(settings, layout, window_start=T0 + HOUR, window_end=T0 + 2 * HOUR, files=kept)
    # a repair re-lands the first window: the same deterministic names rewritten, plus another token's file
    relanded = land_files(layout, tmp_path, T0, 6) + land_files(layout, tmp_path, T0, 1, token="other")
    done = iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=relanded)
    assert done is not None and (done.added, done.removed) == (len(relanded), len(first))
    table = table_of(settings)
    last = iceberg.window_snapshots(table)[-1]
    assert (last["operation"], last["window_start"], last["removed_rows"], last["added_rows"]) == ("overwrite", T0.isoformat(), 8, 14)
    assert scanned_uuids(table) == uuids_of(relanded + kept)


def test_a_scan_during_a_landing_never_sees_part_of_a_window(pg_url: str, tmp_path: Path) -> None:
    settings = settings_for(pg_url, tmp_path, "landing")
    layout = layout_of(settings)
    windows = [(T0 + n * HOUR, land_files(layout, tmp_path, T0 + n * HOUR, 5) + land_files(layout, tmp_path, T0 + n * HOUR, 3, token="b"))
               for n in range(4)]  # fmt: skip
    whole = {sum(len(uuids_of(files)) for _, files in windows[:n]) for n in range(len(windows) + 1)}
    table = table_of(settings)  # created empty: the reader scans from the first commit on
    seen: list[int] = []
    done = threading.Event()

    def read() -> None:
        reader = table_of(settings)
        while not done.is_set():
            reader.refresh()
            seen.append(len(scanned_uuids(reader)) if reader.current_snapshot() else 0)

    thread = threading.Thread(target=read)
    thread.start()
    try:
        for start, files in windows:
            iceberg.land_window(settings, layout, window_start=start, window_end=start + HOUR, files=files)
    finally:
        done.set()
        thread.join()
    assert len(seen) >= 2 and set(seen) <= whole  # every scan saw whole windows only (the plain files were all there)
    assert scanned_uuids(table.refresh()) == uuids_of([f for _, files in windows for f in files])


def test_killing_the_close_at_random_moments_leaves_one_snapshot_per_window(pg_url: str, tmp_path: Path) -> None:
    settings = settings_for(pg_url, tmp_path, "killed")
    layout = layout_of(settings)
    windows = [(T0 + n * HOUR, land_files(layout, tmp_path, T0 + n * HOUR, 3)) for n in range(4)]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({
        "metadata_url": pg_url, "output_root": str(settings.output_root), "stream": settings.stream, "namespace": settings.namespace,
        "windows": [{"start": s.isoformat(), "end": (s + HOUR).isoformat(), "files": [dataclasses.asdict(f) for f in files]}
                    for s, files in windows],
    }, default=str))  # fmt: skip
    command = [sys.executable, "-m", "tests.integration.lake.iceberg_close", str(spec)]
    rng = random.Random(18)
    landed_before_kill = []
    for _ in range(3):  # killed at a seeded moment: after a seeded number of windows, a seeded delay into the next
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        for _ in range(rng.randrange(len(windows))):
            process.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.6))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            landed_before_kill.append(len(committed_windows(settings)))
        process.wait()
    final = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert final.returncode == 0, final.stderr[-2000:]
    assert landed_before_kill, "no run was killed"
    print("windows landed before each kill:", landed_before_kill)
    table = table_of(settings)
    assert sorted(committed_windows(settings)) == [start.isoformat() for start, _ in windows]  # one snapshot each, none twice
    rows = scanned_uuids(table)
    assert rows == uuids_of([f for _, files in windows for f in files]) and len(set(rows)) == len(rows)


def committed_windows(settings: Settings) -> list[str]:
    return [s["window_start"] for s in iceberg.window_snapshots(table_of(settings))]


def test_an_old_table_opened_with_a_new_envelope_field_evolves(pg_url: str, tmp_path: Path) -> None:
    settings = settings_for(pg_url, tmp_path, "evolved")
    layout = layout_of(settings)
    old = land_files(layout, tmp_path, T0, 2)
    iceberg.land_window(settings, layout, window_start=T0, window_end=T0 + HOUR, files=old)
    # a later release's envelope has one more field: its files carry it, the table learns it in place
    newer = LAKE_SCHEMA.append(pa.field("commit_region", pa.string()))
    path = layout.location + "/table_name=Users/window_id=20240501T110000Z/part-new-000.parquet"
    rows = pq.read_table(old[0].path).to_pylist()
    for n, row in enumerate(rows):
        row.update(uuid=f"new-{n}", window_start=T0 + HOUR, window_end=T0 + 2 * HOUR, commit_region="eu")
    Path(path).parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=newer), path)
    props = iceberg.catalog_properties("store", metadata_url=pg_url, warehouse=str(settings.output_root))
    table = iceberg.ensure_table(iceberg.open_catalog(props), (layout.namespace, layout.stream), newer,
                                 location=layout.location + "/_iceberg")  # fmt: skip
    assert table.schema().find_field("commit_region").field_id > max(f.field_id for f in table.schema().fields[:-1])
    new_file = dataclasses.replace(old[0], path=path, window_start=T0 + HOUR, window_end=T0 + 2 * HOUR)
    iceberg.commit_window(table, window_start=T0 + HOUR, window_end=T0 + 2 * HOUR, files=[new_file])
    scanned = table.scan(selected_fields=("uuid", "commit_region")).to_arrow().to_pylist()
    assert sorted((r["uuid"].startswith("new-"), r["commit_region"]) for r in scanned) == sorted(
        [(False, None)] * len(uuids_of(old)) + [(True, "eu")] * len(rows)
    )
    assert table_of(settings).schema().find_field("commit_region")  # the current release's open keeps the field


def test_lake_show_lists_the_snapshots_with_their_windows(pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spanner_cdc.cli.main import main

    settings = settings_for(pg_url, tmp_path, "shown")
    layout = layout_of(settings)
    for n in range(2):
        start = T0 + n * HOUR
        iceberg.land_window(settings, layout, window_start=start, window_end=start + HOUR, files=land_files(layout, tmp_path, start, 2 + n))
    argv = ["lake", "show", "--stream", "cs", "--namespace", "shown", "--metadata-url", pg_url, "--output-root", str(settings.output_root)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("table shown.cs") and "_iceberg/metadata/" in lines[0]
    assert "[2024-05-01T10:00:00+00:00, 2024-05-01T11:00:00+00:00)" in lines[2] and lines[3].endswith(" *")
    assert main([*argv, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["table"] == "shown.cs" and shown["metadata_location"].endswith(".metadata.json")
    assert [(s["window_start"], s["added_rows"], s["total_rows"]) for s in shown["snapshots"]] == [
        ("2024-05-01T10:00:00+00:00", 4, 4), ("2024-05-01T11:00:00+00:00", 6, 10)
    ]
    assert main(["lake", "show", "--stream", "none", "--metadata-url", pg_url, "--output-root", str(settings.output_root)]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("spanner-cdc: error: no Iceberg table live.none in the catalog") and "\n" not in error
    assert pg_url.split("@")[0].split(":")[-1] not in error  # no password
