"""`lake maintain` keeps the Iceberg metadata bounded: old metadata.json files past the metadata log, and the manifest
lists and manifests of expired snapshots (a state table's data and delete files too) are removed once older than the
safety age, while every live snapshot still reads exactly and a manifest too young to judge is kept."""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.current_state import known_tables, state_catalog, update_current_state
from spanner_cdc.extract.maintain import iceberg_path, maintain
from spanner_cdc.extract.window import layout_of
from spanner_cdc.lake import iceberg, storage
from spanner_cdc.lake.state_table import read_state, state_identifier
from spanner_cdc.store import MetadataStore
from tests.integration.extract.test_maintain import landed_windows
from tests.integration.extract.workload import DDL, STREAM

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def files_under(location: str) -> set[str]:
    return {storage.identity(p) for p in storage.find(iceberg_path(location))}


def needed(table: Any) -> set[str]:
    return {storage.identity(iceberg_path(p)) for p in iceberg.needed_files(table)}


def snapshot_rows(table: Any) -> dict[int, Counter[tuple[str, str]]]:
    """Every live snapshot's rows (window, uuid), read by pyiceberg."""
    return {
        s.snapshot_id: Counter((str(r["window_start"]), r["uuid"]) for r in
                               table.scan(snapshot_id=s.snapshot_id, selected_fields=("uuid", "window_start")).to_arrow().to_pylist())
        for s in table.snapshots()
    }  # fmt: skip


def current_states(settings: Any) -> dict[str, list[str]]:
    """Each state table's current rows (as text, sorted)."""
    catalog = state_catalog(settings)
    try:
        layout = layout_of(settings)
        out = {}
        for name in known_tables(catalog, layout):
            handle = catalog.load_table(state_identifier(layout, name))
            current = handle.current_snapshot()
            out[name] = sorted(map(repr, read_state(handle, current.snapshot_id).to_pylist())) if current else []
        return out
    finally:
        iceberg.close_catalog(catalog)


def test_maintenance_removes_the_metadata_no_live_snapshot_needs_and_keeps_every_snapshot_exact(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=1)
    work, _ = landed_windows(database, local_spanner, settings, monkeypatch, count=3)
    assert update_current_state(settings, keep=1)  # state tables, each with snapshots expired by `keep`
    states = current_states(settings)
    assert states and all(states.values())
    catalog, table = iceberg.open_changelog(settings, layout_of(settings)) or (None, None)
    assert catalog is not None and table is not None
    metadata_dir = storage.join(iceberg_path(table.location()), "metadata")
    try:
        # a table made before the metadata log was bounded: its many commits each left a metadata.json
        with table.transaction() as tx:
            tx.remove_properties(*iceberg.METADATA_PROPERTIES)
        for n in range(iceberg.METADATA_VERSIONS + 10):
            with table.transaction() as tx:
                tx.set_properties({"test.commit": str(n)})
        jsons = [p for p in files_under(metadata_dir) if p.endswith(".metadata.json")]
        assert len(jsons) > iceberg.METADATA_VERSIONS + 10
        all_rows = Counter((str(r["window_start"]), r["uuid"]) for r in table.scan(selected_fields=("uuid", "window_start")).to_arrow().to_pylist())
        assert sum(all_rows.values()) == len(work.expected)
        before = snapshot_rows(table)
        unbounded = len(files_under(metadata_dir))

        # orphan_min_age 0, default retention (nothing expires): only metadata.json files past the log go
        first = maintain(dataclasses.replace(settings, orphan_min_age=timedelta(0)))
        table.refresh()
        assert all(table.properties.get(k) == v for k, v in iceberg.METADATA_PROPERTIES.items())  # set on this run
        jsons = [p for p in files_under(metadata_dir) if p.endswith(".metadata.json")]
        assert len(jsons) == iceberg.METADATA_VERSIONS + 1  # the log and the current one
        assert files_under(metadata_dir) == {p for p in needed(table) if p.startswith(metadata_dir)}
        live = snapshot_rows(table)  # compaction's replace snapshots added, none expired
        assert first.snapshots_expired == 0 and {s: live[s] for s in before} == before

        # expiry past the retention, repeatedly: the expired snapshots' manifest lists and manifests go; files stay bounded
        expire = dataclasses.replace(settings, orphan_min_age=timedelta(0), snapshot_retention=timedelta(0))
        sizes = []
        for _ in range(3):
            done = maintain(expire)
            table.refresh()
            present = files_under(metadata_dir)
            assert present == {p for p in needed(table) if p.startswith(metadata_dir)}
            assert len([p for p in present if p.endswith(".metadata.json")]) <= iceberg.METADATA_VERSIONS + 1
            sizes.append((len(present), sum(storage.size_of(p) for p in present)))
            live = snapshot_rows(table)
            assert live and all(rows == all_rows for s, rows in live.items() if s == table.current_snapshot().snapshot_id)
            assert all(before[s] == rows for s, rows in live.items() if s in before)
        assert done.metadata_removed == [] and sizes[2] == sizes[1]  # idempotent: nothing more to remove
        assert sizes[1][0] < unbounded

        # a manifest written a moment ago that no metadata lists yet (a commit in flight) is kept; an old one goes
        manifest = next(p for p in needed(table) if p.endswith("-m0.avro") and p.startswith(metadata_dir))
        young, old = manifest.replace("-m0.avro", "-young-m0.avro"), manifest.replace("-m0.avro", "-old-m0.avro")
        shutil.copy(manifest, young)
        shutil.copy(manifest, old)
        past = time.time() - 7200
        os.utime(old, (past, past))
        aged = maintain(dataclasses.replace(settings, orphan_min_age=timedelta(hours=1), snapshot_retention=timedelta(0)))
        assert storage.exists(young) and not storage.exists(old) and old in aged.metadata_removed
        assert Counter((str(r["window_start"]), r["uuid"]) for r in table.scan(selected_fields=("uuid", "window_start")).to_arrow().to_pylist()) == all_rows
    finally:
        iceberg.close_catalog(catalog)

    # the state tables: bounded the same way, their files no live snapshot needs gone, their current state unchanged
    state = state_catalog(settings)
    try:
        layout = layout_of(settings)
        for name in known_tables(state, layout):
            handle = state.load_table(state_identifier(layout, name))
            assert all(handle.properties.get(k) == v for k, v in iceberg.METADATA_PROPERTIES.items())
            assert files_under(handle.location()) == needed(handle), name
    finally:
        iceberg.close_catalog(state)
    assert current_states(settings) == states
