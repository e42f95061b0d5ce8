"""`lake maintain` on a lake the extract landed: compaction keeps every reader exact (Iceberg, markers, the manifest),
expiry and orphan removal end the originals and a late write of a lost claim, and kills at random moments and inside
each step change nothing a reader sees, on a local path and on an S3 server."""

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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack.object_stores import ObjectStore
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.extract.maintain import maintain
from spanner_cdc.extract.window import layout_of, run_window
from spanner_cdc.lake import iceberg, storage
from spanner_cdc.lake.layout import published_locations
from spanner_cdc.settings import Settings, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.integration.extract.test_extract_crash import extract
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(145)]  # the kill tests: some 30 maintain processes, on a path and on S3
DAY = timedelta(days=1)
# `python -m spanner_cdc`, printing the top-level packages it imported as the last line of its stderr as it exits
REPORTING_IMPORTS = (
    "import atexit, json, runpy, sys; atexit.register(lambda: print(json.dumps(sorted({m.partition('.')[0] for m in "
    "sys.modules})), file=sys.stderr)); runpy.run_module('spanner_cdc', run_name='__main__', alter_sys=True)"
)


def landed_windows(
    database: Any, server: LocalSpanner, settings: Settings, monkeypatch: pytest.MonkeyPatch, count: int = 3,
    land: Callable[[Settings, datetime, datetime], bool] | None = None,
) -> tuple[SmallWorkload, list[tuple[datetime, datetime]]]:
    """`count` windows with a split in each (`settings` with a task per token: several small files per table and window),
    landed by `land` (default: run_window in this process)."""
    work, bounds = SmallWorkload(database), [datetime.now(UTC)]
    for n in range(count):
        work.phase(range(n * 16, n * 16 + 8))
        server.control.split(database.name, STREAM)
        work.phase(range(n * 16 + 8, n * 16 + 16))
        bounds.append(max(datetime.now(UTC), max(c[0] for c in work.expected) + timedelta(microseconds=1)))
    windows = list(zip(bounds, bounds[1:], strict=False))
    for start, end in windows:
        assert land(settings, start, end) if land else run_window(settings, start, end).complete
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
            with storage.open_input(storage.join(layout.location, f["path"])) as handle:
                rows += pq.read_table(handle, columns=["uuid", "window_start", "commit_timestamp"]).to_pylist()
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


@pytest.mark.parametrize("lake", ["local", "s3"])
def test_killing_maintenance_at_random_moments_and_inside_each_step_changes_nothing_a_reader_sees(
    lake: str, make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """`lake maintain` killed >= 10 times on a local path and on an S3 server (moto), while one reader scans through
    Iceberg and another follows the markers: at its failpoints (after a compaction's replace commit, after expiry's
    commit, between two orphan removals: each kill lands inside that step) and at seeded random moments over
    compaction, expiry and orphan removal (the compaction phase's runs keep every snapshot; the later runs have a
    snapshot retention of 10 s, the longest a read here takes, and a safety age of 0, so they expire and remove, and
    each finds planted late writes to remove). Every read
    gives exactly the windows' rows; a last run finishes the work: no orphan left, no committed file removed."""
    database = make_spanner_database(DDL)
    changes: dict[str, Any] = {"concurrency": 1, "task_tokens": 1}
    land: Callable[[Settings, datetime, datetime], bool] | None = None
    if lake == "s3":  # landed by `spanner-cdc extract` subprocesses: their Spark workers read the endpoint as they start
        bucket: ObjectStore = request.getfixturevalue("s3_server")
        for key, value in bucket.env.items():
            monkeypatch.setenv(key, value)
        changes["output_root"] = bucket.root(f"maintain-{database.database_id}")

        def land(landing: Settings, start: datetime, end: datetime) -> bool:
            return extract(landing, start, end, lease=None) == 0

    settings = extract_settings(database.database_id, STREAM, **changes)
    began = time.monotonic()
    # one window on the bucket (its extract is a process of its own), two on the local path
    work, windows = landed_windows(database, local_spanner, settings, monkeypatch, count=2 if land is None else 1, land=land)
    phases = {"land": time.monotonic() - began}
    lineage = store.get_lineage(STREAM, settings.namespace)
    expected = uuids_by_window(iceberg_rows(settings))
    assert sum(expected.values()) == len(work.expected) > 0 and max(expected.values()) == 1
    aggressive = dataclasses.replace(settings, snapshot_retention=timedelta(seconds=10), orphan_min_age=timedelta(0))
    env = subprocess_env(aggressive)
    # the compaction phase's runs keep every snapshot: the originals stay live until the expiry phase's runs
    compacting = subprocess_env(dataclasses.replace(aggressive, snapshot_retention=timedelta(days=1)))
    command = [sys.executable, "-m", "spanner_cdc", "lake", "maintain", "--json"]
    reads: list[tuple[str, bool]] = []
    stop = threading.Event()

    def reader(name: str, read: Any) -> None:
        while not stop.is_set():
            try:
                rows = read()
            except Exception as exc:  # a listed file gone, a metadata file half there: the contract is broken
                reads.append((f"{name}: {type(exc).__name__}: {exc}", False))
                time.sleep(0.2)
                continue
            reads.append((name, uuids_by_window(rows) == expected))
            time.sleep(0.2)  # the readers leave the machine (and the S3 server) to the runs they watch

    threads = [
        threading.Thread(target=reader, args=("iceberg", lambda: iceberg_rows(settings))),
        threading.Thread(target=reader, args=("markers", lambda: marker_rows(settings, store))),
    ]
    for thread in threads:
        thread.start()
    rng, kills, states = random.Random(f"29-{lake}"), 0, []
    idle_s, scale = 0.0, 1.0  # timed below, before the first random kill
    location = layout_of(settings).location
    planted: list[str] = []

    def data_files() -> set[str]:
        return {p for p in published_locations(location) if "/table_name=" in p}

    def unlisted() -> set[str]:
        return data_files() - {f.path for f in store.manifest(lineage.id)}

    def killed(where: str) -> None:
        nonlocal kills
        kills += 1
        # where it was: manifest files (compaction swaps them), data files in the lake (removal deletes them)
        states.append((where, len(store.manifest(lineage.id)), len(data_files())))

    def run_and_kill(low: float, high: float, env: dict[str, str] = env) -> bool:
        nonlocal scale
        process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(low, high) * idle_s * scale)  # moments before, in and after each step
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.communicate()
            killed("random")
            return True
        _, err = process.communicate()
        assert process.returncode == 0, err[-3000:]  # a run that ended by itself ended well
        scale *= 0.7  # the run ended first: the machine got faster than when the idle run was timed, aim earlier
        return False

    def kill_at(point: str, hit: int, env: dict[str, str] = env) -> None:
        done = subprocess.run(command, env={**env, FAILPOINT_ENV: f"{point}:{hit}"}, capture_output=True, text=True, timeout=300)
        assert done.returncode == -signal.SIGKILL, f"{point}:{hit} not reached: {done.returncode} {done.stderr[-3000:]}"
        killed(f"{point}:{hit}")

    def plant(count: int) -> None:
        """Late writes of a lost claim: copies of a committed file under names nothing lists."""
        committed = store.manifest(lineage.id)[0].path
        body = storage.read_bytes(committed) or b""
        folder, name = committed.rsplit("/", 1)
        for n in range(count):
            late = f"{folder}/{name.replace('.parquet', f'-late{kills}-{n}.parquet')}"
            storage.write_bytes(late, body)
            planted.append(late)

    random_compaction_kills = 3 if lake == "local" else 1  # the bucket's runs are the slower: fewer, seeded the same
    try:
        # how long a run that has nothing to do takes on this machine (its start, mostly): the random kills are spread
        # over fractions and multiples of it, whatever the machine's load. Nothing to do: with a 1 KB target every file
        # is already past it (a large target would compact every window here, before any kill)
        began = time.monotonic()
        idle = subprocess.run([sys.executable, "-c", REPORTING_IMPORTS, *command[3:], "--target-file-size", "1KB"], env=env,
                              capture_output=True, text=True, timeout=300)  # fmt: skip
        idle_s, scale = time.monotonic() - began, 1.0
        phases["idle run"] = idle_s
        assert idle.returncode == 0, idle.stderr[-3000:]
        assert json.loads(idle.stdout)["windows_compacted"] == 0
        # with no state table's deletes to fold, the run never imported Spark
        assert "pyspark" not in json.loads(idle.stderr.splitlines()[-1]), idle.stderr[-3000:]
        # compaction: killed after a table's replace snapshot of the first window (Iceberg lists the new files, its
        # marker and the manifest the originals), twice (the second run commits the same replace again), then at
        # random moments
        first = Counter(f.table_name for f in store.manifest(lineage.id, window_start=windows[0][0], window_end=windows[0][1]))
        replaces = sum(1 for count in first.values() if count > 1)  # the first window's tables that compaction rewrites
        assert replaces >= 1, first
        for _ in range(2):
            kill_at("compaction_after_replace", rng.randint(1, replaces), compacting)
        for _ in range(random_compaction_kills):
            run_and_kill(0.7, 2.5, compacting)
        done = subprocess.run(command, env=compacting, capture_output=True, text=True, timeout=300)  # a re-run finishes it
        assert done.returncode == 0, done.stderr[-3000:]
        assert len(store.manifest(lineage.id)) == 2 * len(windows)  # compacted
        phases["compaction"] = time.monotonic() - began - idle_s
        time.sleep(11)  # the replaced snapshots are past the retention now: the next run expires them
        originals = unlisted()
        kill_at("expiry_after_commit", 1)  # expired: no live snapshot holds the originals, none removed yet
        assert originals and unlisted() == originals
        for _ in range(3):  # orphan removal, killed between two removals
            plant(10)
            before = unlisted()
            kill_at("orphan_after_remove", rng.randint(1, 8))
            assert 0 < len(unlisted()) < len(before)
        for _ in range(60):  # over expiry and orphan removal at random moments, each run with late writes to remove
            if kills >= 10:
                break
            plant(10)
            run_and_kill(0.5, 1.1)
        phases["expiry and removal"] = time.monotonic() - began - idle_s - phases["compaction"]
        final = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert final.returncode == 0, final.stderr[-3000:]
        time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    print(f"{lake}: kills at (where, manifest files, data files):", states, "reads:", Counter(name for name, _ in reads),
          "seconds:", {k: round(v) for k, v in phases.items()})  # fmt: skip
    assert str(settings.output_root).startswith("s3://") == (lake == "s3")
    assert {name for name, _ in reads} >= {"iceberg", "markers"}
    assert kills >= 10, states
    assert {where.partition(":")[0] for where, _, _ in states} >= {"compaction_after_replace", "expiry_after_commit", "orphan_after_remove"}
    assert [name for name, ok in reads if not ok] == []
    assert not any(storage.exists(p) for p in planted)
    files = store.manifest(lineage.id)
    assert len(files) == 2 * len(windows)  # compacted
    assert data_files() == {f.path for f in files}  # no orphan left, no committed file removed
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
