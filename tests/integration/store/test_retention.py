"""Metadata-store retention (lineage_retention): old closed windows' rows folded into per-window totals, and nothing
that the open windows, the frontier, lineage show, the UI or /metrics show changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.extract.maintain import MaintainSummary, fold_old_windows
from spanner_cdc.store import MetadataStore
from spanner_cdc.store.render import render
from spanner_cdc.times import utc
from spanner_cdc.ui import metrics, tables
from spanner_cdc.ui.health import stuck
from spanner_cdc.ui.pages import _cards
from spanner_cdc.ui.view import StreamView, load_stream
from tests.integration.store.window_history import HOUR, LEASE, History, new_history, plan_and_claim, row_counts

pytestmark = pytest.mark.integration
PARTITIONS = 6
OLD, KEPT = 8, 2
ROOT = Path(__file__).resolve().parents[3]  # windows folded, closed windows kept (closed after the retention's cut); then two open windows


def clock(store: MetadataStore) -> datetime:
    """The store's clock: windows' closed_at are taken from it."""
    return utc(store._db.transaction(lambda conn: conn.execute(sa.text("SELECT clock_timestamp()")).scalar_one()))


def built(store: MetadataStore, tmp_path: Path) -> tuple[History, datetime, list[Any]]:
    """OLD windows closed before the cut, KEPT closed after it, window OLD+KEPT open with every token landed, and
    window OLD+KEPT+1 open with two tokens RUNNING under another run (an extract in flight)."""
    history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
    for n in range(OLD):
        history.land(n, fail_one=n == 1)
    cut = clock(store)
    for n in range(OLD, OLD + KEPT):
        history.land(n)
    history.land(OLD + KEPT, close=False)
    start, end = history.window(OLD + KEPT + 1)
    store.open_window(history.lineage_id, start, end)
    running = store.claim(history.lineage_id, window_end=end, owner="in-flight", lease=LEASE, limit=2)
    assert len(running) == 2
    return history, cut, running


def view_of(store: MetadataStore, history: History) -> StreamView:
    lineage = store.lineage(history.lineage_id)
    return load_stream(store, lineage.stream, lineage.namespace)


def partition_row(view: StreamView, token: str) -> str:
    html = tables.partitions_table(view, 1, lambda _: "", token)
    found = re.search(rf'<tr data-token="{re.escape(token)}">.*?</tr>', html)
    assert found is not None
    return found.group(0)


def shown(store: MetadataStore, history: History, now: datetime) -> dict[str, Any]:
    """What lineage show, the UI stream page and /metrics show, in the parts that concern every window."""
    graph = store.graph(history.lineage_id)
    view = view_of(store, history)
    document = json.loads(render(graph, "json", now=now))
    stuck_list = stuck(view, now)
    return {
        "nodes": {p["token"]: p for p in document["partitions"]},
        "edges": {(e["parent"], e["child"]) for e in document["edges"]},
        "windows": document["windows"],
        "low_watermark": document["low_watermark"],
        "text_summary": render(graph, "text", now=now).splitlines()[:3],
        "metrics": metrics.render_metrics([view], now),
        "cards": _cards(view, stuck_list, now, 0.5),
        "open_windows": tables.open_windows_table(view),
        "frontier": tables.frontier_table(view, 1, lambda _: ""),
        "windows_table": tables.windows_table(view, 1, lambda _: ""),
        "rows": {p.token: partition_row(view, p.token) for p in view.partitions},
        "status": [
            (status.complete, status.closed, status.pending)
            for status in (store.window_status(history.lineage_id, *history.window(n)) for n in range(OLD, OLD + KEPT + 2))
        ],
        "manifest": store.manifest(history.lineage_id, window_start=history.window(OLD)[0]),
    }


def test_retention_folds_old_windows_and_leaves_what_every_reader_shows(store: MetadataStore, tmp_path: Path) -> None:
    history, cut, running = built(store, tmp_path)
    rows_before = row_counts(store, history.lineage_id)
    now = clock(store)
    before = shown(store, history, now)
    finished_old = {
        p.token for p in store.partitions(history.lineage_id)
        if p.state == "FINISHED" and p.end is not None and p.end < history.window(OLD - 1)[1]
    }  # fmt: skip

    summary = MaintainSummary("orders", "live")
    fold_old_windows(store, history.lineage_id, cut, summary)
    after = shown(store, history, now)
    rows_after = row_counts(store, history.lineage_id)

    assert summary.windows_folded == OLD
    assert summary.partitions_deleted == len(finished_old) > OLD  # splits, merges and endings in every window
    totals = store.window_totals(history.lineage_id)
    assert [(t.start, t.end) for t in totals] == [history.window(n) for n in range(OLD)]
    assert sum(t.partitions for t in totals) == len(finished_old) == rows_before["cdc_partitions"] - rows_after["cdc_partitions"]
    assert sum(t.files for t in totals) == rows_before["cdc_manifest"] - rows_after["cdc_manifest"] == summary.manifest_rows_deleted
    assert sum(t.attempts for t in totals) == rows_before["cdc_attempts"] - rows_after["cdc_attempts"]
    assert sum(t.attempts_failed for t in totals) == PARTITIONS  # window 1's first claims failed
    windows = {(w.start, w.end): w for w in store.windows(history.lineage_id)}
    for t in totals:  # every folded file counted under its own window, with the rows the window closed with
        assert (t.files, t.rows) == (windows[(t.start, t.end)].files, windows[(t.start, t.end)].records)
    assert rows_after["cdc_windows"] == rows_before["cdc_windows"] and rows_after["cdc_window_totals"] == OLD

    # every partition left reads as before; every one gone was finished before the cut's window ended
    kept = set(after["nodes"])
    assert kept == set(before["nodes"]) - finished_old
    assert all(after["nodes"][t] == before["nodes"][t] for t in kept)
    assert all(after["rows"][t] == before["rows"][t] for t in kept)
    assert {(p, c) for p, c in before["edges"] if c in kept} == after["edges"]
    for key in ("windows", "low_watermark", "text_summary", "metrics", "cards", "open_windows", "frontier",
                "windows_table", "status", "manifest"):  # fmt: skip
        assert after[key] == before[key], key
    text = render(store.graph(history.lineage_id), "text", now=now)
    assert f"retention: {OLD} closed windows folded" in text and "unknown parent" not in text

    # a re-run is a no-op
    again = MaintainSummary("orders", "live")
    fold_old_windows(store, history.lineage_id, cut, again)
    assert again.windows_folded == 0 and row_counts(store, history.lineage_id) == rows_after

    # the extract in flight lands and closes its window; the next window plans and claims every live token
    start, end = history.window(OLD + KEPT + 1)
    assert store.complete_many([History._completion(c, start, end, (), end) for c in running]).landed
    history.land(OLD + KEPT + 1)
    history.land(OLD + KEPT)  # the open window closes too
    live = [p for p in store.partitions(history.lineage_id) if p.state != "FINISHED"]
    _, claimed = plan_and_claim(store, history.lineage_id, *history.window(OLD + KEPT + 2))
    assert claimed == len(live) == PARTITIONS
    history.land(OLD + KEPT + 2)
    assert store.window_status(history.lineage_id, *history.window(OLD + KEPT + 2)).closed


def test_a_finished_parent_that_a_created_child_waits_for_is_kept(store: MetadataStore, tmp_path: Path) -> None:
    """A CREATED child counts a parent it cannot find as unfinished: retention keeps every finished partition such a
    child names (here a merge child whose other parent the lineage has not learnt yet), and folds it once promoted."""
    history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
    for n in range(3):
        history.land(n)
    parent = next(p for p in store.partitions(history.lineage_id) if p.state == "FINISHED" and p.end and p.end < history.window(0)[1])
    later = history.window(5)[0]
    params = {"id": history.lineage_id, "at": later, "parent": parent.token}

    def plant(conn: sa.Connection) -> None:
        conn.execute(sa.text("INSERT INTO cdc_partitions (lineage_id, token, partition_start, read_from, state) "
                             "VALUES (:id, 'late-child', :at, :at, 'CREATED')"), params)
        conn.execute(sa.text("INSERT INTO cdc_partition_parents VALUES (:id, 'late-child', :parent), "
                             "(:id, 'late-child', 'unknown-parent')"), params)  # fmt: skip

    store._db.transaction(plant)
    summary = MaintainSummary("orders", "live")
    fold_old_windows(store, history.lineage_id, clock(store), summary)
    assert summary.windows_folded == 3
    tokens = {p.token for p in store.partitions(history.lineage_id)}
    assert parent.token in tokens and "late-child" in tokens
    store._db.transaction(lambda conn: conn.execute(sa.text(
        "UPDATE cdc_partitions SET state = 'READY' WHERE lineage_id = :id AND token = 'late-child'"
    ), {"id": history.lineage_id}))  # fmt: skip
    history.land(3)
    fold_old_windows(store, history.lineage_id, clock(store), summary)
    assert parent.token not in {p.token for p in store.partitions(history.lineage_id)}


def test_retention_killed_between_windows_leaves_a_consistent_store_and_the_rerun_finishes(
    pg_url: str, tmp_path: Path
) -> None:
    """`lake maintain`'s retention step killed (SIGKILL, failpoint retention_before_fold) before its fourth window:
    three windows are folded whole, the others untouched; the re-run folds them, and the result is that of one run."""
    store = MetadataStore.connect(pg_url)
    try:
        store.upgrade()
        runs = {}
        for name in ("killed", "whole"):
            history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / name, PARTITIONS)
            for n in range(OLD):
                history.land(n, fail_one=n == 2)
            runs[name] = history
        cut = clock(store)
        script = textwrap.dedent(f"""
            from datetime import datetime
            from spanner_cdc.extract.maintain import MaintainSummary, fold_old_windows
            from spanner_cdc.store import MetadataStore
            store = MetadataStore.connect({pg_url!r})
            fold_old_windows(store, {runs["killed"].lineage_id}, datetime.fromisoformat({cut.isoformat()!r}),
                             MaintainSummary("orders", "live"))
        """)  # fmt: skip
        env = {**os.environ, "SPANNER_CDC_FAILPOINT": "retention_before_fold:4", "PYTHONPATH": str(ROOT)}
        killed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert killed.returncode == -9, killed.stderr[-2000:]
        lineage_id = runs["killed"].lineage_id
        assert [(t.start, t.end) for t in store.window_totals(lineage_id)] == [runs["killed"].window(n) for n in range(3)]
        unfolded = store.manifest(lineage_id)
        assert {f.window_start for f in unfolded} == {runs["killed"].window(n)[0] for n in range(3, OLD)}

        rerun = MaintainSummary("orders", "live")
        fold_old_windows(store, lineage_id, cut, rerun)
        assert rerun.windows_folded == OLD - 3
        whole = MaintainSummary("orders", "live")
        fold_old_windows(store, runs["whole"].lineage_id, cut, whole)
        assert whole.windows_folded == OLD
        assert row_counts(store, lineage_id) == row_counts(store, runs["whole"].lineage_id)

        def sums(lineage: int) -> list[tuple[int, ...]]:
            return [(t.partitions, t.attempts, t.attempts_failed, t.files, t.rows, t.bytes)
                    for t in store.window_totals(lineage)]  # fmt: skip

        assert sums(lineage_id) == sums(runs["whole"].lineage_id)
        _, claimed = plan_and_claim(store, lineage_id, *runs["killed"].window(OLD))
        assert claimed == PARTITIONS
    finally:
        store.close()


def test_a_window_closed_within_the_retention_and_everything_after_it_stays(store: MetadataStore, tmp_path: Path) -> None:
    """The fold stops at the first window closed since the cut, even if older windows after it would qualify."""
    history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
    for n in range(3):
        history.land(n)
    summary = MaintainSummary("orders", "live")
    fold_old_windows(store, history.lineage_id, history.window(0)[0] - HOUR, summary)  # before any close
    assert summary.windows_folded == 0 and store.window_totals(history.lineage_id) == []


def test_verify_refuses_a_folded_window_by_name(store: MetadataStore, tmp_path: Path) -> None:
    """verify reads a window's files from the manifest: a folded window is refused with a message that says why,
    and a window closed within the retention is verified as before."""
    from spanner_cdc.errors import UsageError
    from spanner_cdc.extract.verify import closed_window

    history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
    history.land(0)
    cut = clock(store)
    history.land(1)
    fold_old_windows(store, history.lineage_id, cut, MaintainSummary("orders", "live"))
    lineage = store.lineage(history.lineage_id)
    with pytest.raises(UsageError, match=r"store rows were folded by metadata-store retention .*verify a window closed within"):
        closed_window(store, lineage, history.window(0)[1])
    assert (closed_window(store, lineage, None).start, closed_window(store, lineage, history.window(1)[1]).end) == (
        history.window(1)[0], history.window(1)[1]
    )


def test_windows_the_current_state_tables_have_not_applied_keep_their_rows(pg_url: str, tmp_path: Path) -> None:
    """A current-state table reads a window's files from the manifest when it applies the window: lake maintain folds
    no window past the newest one every state table holds (current_state.applied_through)."""
    from spanner_cdc.extract.current_state import applied_through, state_catalog
    from spanner_cdc.extract.window import layout_of
    from spanner_cdc.lake.current_state import Column
    from spanner_cdc.lake.iceberg import _dispose
    from spanner_cdc.lake.state_table import commit_row_delta, ensure_state_table, window_properties
    from spanner_cdc.settings import Settings

    store = MetadataStore.connect(pg_url)
    try:
        store.upgrade()
        history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
        for n in range(3):
            history.land(n)
        stream = store.lineage(history.lineage_id).stream
        settings = Settings(stream=stream, metadata_url=pg_url, output_root=tmp_path / "lake")
        assert applied_through(settings) is None  # no state table: nothing to wait for
        catalog = state_catalog(settings)
        try:
            columns = [Column("Id", {"code": "INT64"}, True, 1), Column("Name", {"code": "STRING"}, False, 2)]
            handle = ensure_state_table(catalog, layout_of(settings), "Accounts", columns)
            for n in range(2):  # windows 0 and 1 applied, window 2 not yet
                commit_row_delta(handle, [], [], window_properties(*history.window(n)))
                handle = handle.refresh()
        finally:
            _dispose(catalog)
        assert applied_through(settings) == history.window(1)[1]
        summary = MaintainSummary(stream, "live")
        fold_old_windows(store, history.lineage_id, clock(store), summary, keep_after=lambda: applied_through(settings))
        assert summary.windows_folded == 2
        assert [(t.start, t.end) for t in store.window_totals(history.lineage_id)] == [history.window(n) for n in range(2)]
        assert {f.window_start for f in store.manifest(history.lineage_id)} == {history.window(2)[0]}
    finally:
        store.close()


def test_a_snapshot_of_a_lineage_with_folded_windows_is_refused_by_name(store: MetadataStore, tmp_path: Path) -> None:
    """A snapshot of a lineage that already extracts changes must be at its first partition's start: once retention
    folded the first windows that start is gone, so the snapshot is refused before Spanner is asked anything."""
    from types import SimpleNamespace

    from spanner_cdc.errors import UsageError
    from spanner_cdc.extract.snapshot import _begin
    from spanner_cdc.settings import Settings

    history = new_history(store, f"orders_{uuid.uuid4().hex[:8]}", tmp_path / "markers", PARTITIONS)
    history.land(0)
    fold_old_windows(store, history.lineage_id, clock(store), MaintainSummary("orders", "live"))
    settings = Settings(stream=store.lineage(history.lineage_id).stream)
    no_spanner = SimpleNamespace(name="")  # the refusal comes first: nothing of the database is read
    with pytest.raises(UsageError, match=r"first partitions are folded.*snapshot into another namespace"):
        _begin(settings, store, no_spanner, None, "GOOGLE_STANDARD_SQL", None)


def test_the_ui_reads_the_newest_windows_and_counts_the_older_ones_the_same(
    store: MetadataStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A view of the newest three windows (with every open one and the newest verified one) shows the same cards and
    /metrics as a view of every window: the older windows are counted and summed by the store, folded or not."""
    from spanner_cdc.ui import view as view_module

    history, cut, _ = built(store, tmp_path)
    store.record_verify(history.lineage_id, *history.window(1), {"mismatches": 0, "rows_compared": 7,
                                                                "verified_at": "2025-06-01T05:00:00Z"})  # fmt: skip
    fold_old_windows(store, history.lineage_id, cut, MaintainSummary(store.lineage(history.lineage_id).stream, "live"))
    now = clock(store)
    whole = view_of(store, history)
    monkeypatch.setattr(view_module, "RECENT_WINDOWS", 3)
    recent = view_of(store, history)

    assert [w.start for w in recent.windows] == [history.window(n)[0] for n in (1, OLD + KEPT - 1, OLD + KEPT, OLD + KEPT + 1)]
    assert (recent.older_windows, whole.older_windows) == (OLD + KEPT + 2 - 4, 0)
    assert recent.older_records == sum(w.records or 0 for w in whole.windows if w not in recent.windows) > 0
    assert metrics.render_metrics([recent], now) == metrics.render_metrics([whole], now)
    assert _cards(recent, stuck(recent, now), now, 0.5) == _cards(whole, stuck(whole, now), now, 0.5)
    assert tables.open_windows_table(recent) == tables.open_windows_table(whole)
    assert f"{OLD + KEPT + 2 - 4} older complete windows" in tables.windows_table(recent, 1, lambda _: "")
