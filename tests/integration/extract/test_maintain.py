"""`lake maintain` on a lake the extract landed: compaction keeps every reader exact (Iceberg, markers, the manifest),
expiry and orphan removal end the originals and a late write of a lost claim, and kills at random moments change
nothing a reader sees."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.maintain import maintain
from spanner_cdc.extract.window import layout_of, run_window
from spanner_cdc.lake import iceberg, storage
from spanner_cdc.lake.layout import published_locations
from spanner_cdc.settings import Settings, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = pytest.mark.integration
DAY = timedelta(days=1)


def landed_windows(
    database: Any, server: LocalSpanner, settings: Settings, monkeypatch: pytest.MonkeyPatch, count: int = 3
) -> tuple[SmallWorkload, list[tuple[datetime, datetime]]]:
    """`count` windows with a split in each (`settings` with a task per token: several small files per table and window)."""
    work, bounds = SmallWorkload(database), [datetime.now(UTC)]
    for n in range(count):
        work.phase(range(n * 16, n * 16 + 8))
        server.control.split(database.name, STREAM)
        work.phase(range(n * 16 + 8, n * 16 + 16))
        bounds.append(max(datetime.now(UTC), max(c[0] for c in work.expected) + timedelta(microseconds=1)))
    windows = list(zip(bounds, bounds[1:], strict=False))
    for start, end in windows:
        assert run_window(settings, start, end).complete
    return work, windows


def uuids_by_window(rows: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((str(r["window_start"]), r["uuid"]) for r in rows)


def iceberg_rows(settings: Settings) -> list[dict[str, Any]]:
    opened = iceberg.open_changelog(settings, layout_of(settings))
    assert opened is not None
    try:
        return opened[1].scan(selected_fields=("uuid", "window_start", "commit_timestamp")).to_arrow().to_pylist()
    finally:
        iceberg.close_catalog(opened[0])


def marker_rows(settings: Settings, store: MetadataStore) -> list[dict[str, Any]]:
    """What a reader that follows the windows' markers reads: every file each marker lists."""
    layout = layout_of(settings)
    rows: list[dict[str, Any]] = []
    for window in store.windows(store.get_lineage(STREAM, settings.namespace).id):
        marker = json.loads(storage.read_bytes(window.marker_path or "") or b"{}")
        for f in marker["files"]:
            rows += pq.read_table(storage.join(layout.location, f["path"]), columns=["uuid", "window_start", "commit_timestamp"]).to_pylist()
    return rows


def test_compaction_then_expiry_and_orphan_removal_keep_every_reader_exact(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=1)
    work, windows = landed_windows(database, local_spanner, settings, monkeypatch)
    lineage = store.get_lineage(STREAM, settings.namespace)
    before = store.manifest(lineage.id)
    expected = uuids_by_window(iceberg_rows(settings))
    assert sum(expected.values()) == len(work.expected) == sum(f.rows for f in before)
    assert len(before) > 2 * len(windows)  # several files per table and window

    summary = maintain(settings)
    after = store.manifest(lineage.id)
    assert summary.windows_compacted == len(windows) and summary.files_after == len(after) == 2 * len(windows)
    assert uuids_by_window(iceberg_rows(settings)) == expected == uuids_by_window(marker_rows(settings, store))
    assert all(f.rows and storage.exists(f.path) for f in after)
    ops = [s["operation"] for s in iceberg.window_snapshots(iceberg.open_changelog(settings, layout_of(settings))[1])]  # type: ignore[index]
    assert ops.count("replace") == 2 * len(windows)
    # the originals stay while a live snapshot holds them: readers of older snapshots and markers still find them
    assert all(storage.exists(f.path) for f in before)
    assert maintain(settings).windows_compacted == 0  # done: a re-run changes nothing

    # a day later, with the default retention (7 days) nothing expires and nothing listed goes
    later = maintain(settings, now=datetime.now(UTC) + DAY)
    assert later.snapshots_expired == 0 and later.orphans_removed == []
    # past the retention: old snapshots expire (the current one stays), and then the originals are orphans
    done = maintain(dataclasses.replace(settings, snapshot_retention=timedelta(0)), now=datetime.now(UTC) + 2 * DAY)
    assert done.snapshots_expired > 0
    assert sorted(done.orphans_removed) == sorted(f.path for f in before)
    assert set(published_locations(layout_of(settings).location + "/table_name=Accounts")) | set(
        published_locations(layout_of(settings).location + "/table_name=Events")) == {f.path for f in after}  # fmt: skip
    assert uuids_by_window(iceberg_rows(settings)) == expected == uuids_by_window(marker_rows(settings, store))


def test_a_late_write_of_a_lost_claim_is_removed_once_older_than_the_safety_age(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A stalled attempt that lost its claim uploads after its window closed: a file of the window's rows under a
    name nothing lists. Maintenance leaves it while younger than orphan_min_age (it could be an extract's file not
    yet committed), removes it once older, and never a committed file."""
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=1)
    landed_windows(database, local_spanner, settings, monkeypatch, count=1)
    lineage = store.get_lineage(STREAM, settings.namespace)
    committed = store.manifest(lineage.id)
    late = committed[0].path.replace("part-L", "part-Llate-").replace(".parquet", "-late.parquet")
    shutil.copyfile(committed[0].path, late)
    young = late.replace("-late.parquet", "-young.parquet")
    shutil.copyfile(committed[0].path, young)
    old = time.time() - 2 * DAY.total_seconds()
    os.utime(late, (old, old))
    keep_originals = dataclasses.replace(settings, target_file_size=1 << 10)  # no compaction: only orphans here
    summary = maintain(keep_originals)
    assert summary.orphans_removed == [late]
    assert storage.exists(young) and all(storage.exists(f.path) for f in committed)
    assert maintain(keep_originals, now=datetime.now(UTC) + 2 * DAY).orphans_removed == [young]
    assert all(storage.exists(f.path) for f in committed)


def test_killing_maintenance_at_random_moments_changes_nothing_a_reader_sees(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """`lake maintain` killed at >= 10 seeded moments (over compaction, expiry and orphan removal: the runs have a
    snapshot retention of 10 s, the longest a read here takes, and a safety age of 0, so the later ones do all three),
    while one reader scans through Iceberg and another follows the markers: every read gives exactly the windows' rows,
    and a last run finishes the work."""
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=1)
    _, windows = landed_windows(database, local_spanner, settings, monkeypatch, count=2)
    lineage = store.get_lineage(STREAM, settings.namespace)
    expected = uuids_by_window(iceberg_rows(settings))
    aggressive = dataclasses.replace(settings, snapshot_retention=timedelta(seconds=10), orphan_min_age=timedelta(0))
    env = subprocess_env(aggressive)
    command = [sys.executable, "-m", "spanner_cdc", "lake", "maintain", "--json"]
    reads: list[tuple[str, bool]] = []
    stop = threading.Event()

    def reader(name: str, read: Any) -> None:
        while not stop.is_set():
            try:
                rows = read()
            except FileNotFoundError as exc:  # a listed file gone: the contract is broken
                reads.append((f"{name}: {exc}", False))
                continue
            reads.append((name, uuids_by_window(rows) == expected))
            time.sleep(0.05)  # the readers leave the machine to the runs they watch

    threads = [
        threading.Thread(target=reader, args=("iceberg", lambda: iceberg_rows(settings))),
        threading.Thread(target=reader, args=("markers", lambda: marker_rows(settings, store))),
    ]
    for thread in threads:
        thread.start()
    rng, kills, states = random.Random(29), 0, []
    location = layout_of(settings).location
    planted: list[str] = []

    def run_and_kill(low: float, high: float) -> bool:
        nonlocal kills, scale
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(low, high) * idle_s * scale)  # moments before, in and after each step
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
            # where it was: manifest files (compaction swaps them), data files on disk (removal deletes them)
            states.append((len(store.manifest(lineage.id)), len(published_locations(location))))
            process.communicate()
            return True
        _, err = process.communicate()
        assert process.returncode == 0, err[-3000:]  # a run that ended by itself ended well
        scale *= 0.7  # the run ended first: the machine got faster than when the idle run was timed, aim earlier
        return False

    # how long a run that has nothing to do takes on this machine (its start, mostly): the kills are spread over
    # fractions and multiples of it, whatever the machine's load
    began = time.monotonic()
    idle = subprocess.run([*command, "--target-file-size", "16GB"], env=env, capture_output=True, text=True, timeout=300)
    assert idle.returncode == 0, idle.stderr[-3000:]
    idle_s, scale = time.monotonic() - began, 1.0
    try:
        for _ in range(5):  # over compaction
            run_and_kill(0.7, 2.5)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)  # a re-run finishes it
        assert done.returncode == 0, done.stderr[-3000:]
        time.sleep(11)  # the replaced snapshots are past the retention now: each run expires them and removes files
        for _ in range(60):  # over expiry and orphan removal: each run also finds late writes to remove
            if kills >= 10:
                break
            committed = store.manifest(lineage.id)[0].path
            for n in range(10):
                late = committed.replace(".parquet", f"-late{kills}-{n}.parquet").replace("-c", "-latec", 1)
                shutil.copyfile(committed, late)
                os.utime(late, (time.time() - 3600, time.time() - 3600))
                planted.append(late)
            run_and_kill(0.5, 1.1)
        final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert final.returncode == 0, final.stderr[-3000:]
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    print("kills at (manifest files, data files):", states, "reads:", Counter(name for name, _ in reads))
    assert {name for name, _ in reads} >= {"iceberg", "markers"}
    assert kills >= 10, states
    assert [name for name, ok in reads if not ok] == []
    assert not any(storage.exists(p) for p in planted)
    files = store.manifest(lineage.id)
    assert len(files) == 2 * len(windows)  # compacted
    assert set(published_locations(layout_of(settings).location + "/table_name=Accounts")) | set(
        published_locations(layout_of(settings).location + "/table_name=Events")) == {f.path for f in files}  # fmt: skip
    assert uuids_by_window(iceberg_rows(settings)) == expected == uuids_by_window(marker_rows(settings, store))


@pytest.mark.parametrize("catalog", ["store", "off"])
def test_store_retention_keeps_the_folded_windows_files_and_the_next_window_extracts(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch, catalog: str,
) -> None:  # fmt: skip
    """`lake maintain` with a lineage_retention of 0 folds every closed window's store rows (its manifest rows among
    them); a later run's orphan removal, with a safety age of 0, still finds each of their files listed, by the
    window's marker (and, with the catalog on, its Iceberg snapshot), so removes none; every reader reads the same
    rows, and the next window plans, claims, lands and closes as before."""
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=1)
    work, windows = landed_windows(database, local_spanner, settings, monkeypatch, count=2)
    lineage = store.get_lineage(STREAM, settings.namespace)
    committed = store.manifest(lineage.id)
    expected = uuids_by_window(iceberg_rows(settings))
    folding = dataclasses.replace(settings, target_file_size=1 << 10, orphan_min_age=timedelta(0),
                                  lineage_retention=timedelta(0), iceberg_catalog=catalog)  # fmt: skip

    summary = maintain(folding)
    assert summary.windows_folded == len(windows) and summary.manifest_rows_deleted == len(committed)
    assert summary.orphans_removed == [] and store.manifest(lineage.id) == []
    totals = store.window_totals(lineage.id)
    assert sum(t.files for t in totals) == len(committed) and sum(t.rows for t in totals) == len(work.expected)
    again = maintain(folding)  # files listed by no manifest row now, and older than the safety age
    assert again.orphans_removed == [] and again.windows_folded == 0
    assert all(storage.exists(f.path) for f in committed)
    assert uuids_by_window(iceberg_rows(settings)) == expected == uuids_by_window(marker_rows(settings, store))

    work.phase(range(100, 108))
    local_spanner.control.split(database.name, STREAM)
    end = max(datetime.now(UTC), max(c[0] for c in work.expected) + timedelta(microseconds=1))
    assert run_window(settings, windows[-1][1], end).complete
    assert sum(f.rows for f in store.manifest(lineage.id)) == len(work.expected) - sum(t.rows for t in totals)
    assert sum(uuids_by_window(iceberg_rows(settings)).values()) == len(work.expected)
    assert sum(uuids_by_window(marker_rows(settings, store)).values()) == len(work.expected)
