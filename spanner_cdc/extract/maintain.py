"""Lake maintenance of one lineage (`spanner-cdc lake maintain`): compaction, snapshot expiry, orphan removal,
metadata-store retention."""

from __future__ import annotations

import hashlib
import logging
import math
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ExtractError
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.inputs import layout_of, store_of, stream_of
from spanner_cdc.lake import iceberg, storage
from spanner_cdc.lake.layout import TABLE_KEY, LakeLayout, published_locations, window_dir
from spanner_cdc.lake.markers import rewrite_marker
from spanner_cdc.store.models import ManifestFile, WindowRow

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from spanner_cdc.settings import Settings
    from spanner_cdc.store import MetadataStore

log = logging.getLogger(__name__)

# A table's files of a window are rewritten when fewer files would hold them (Iceberg's own rule of thumb: a file
# under 75% of the target is a candidate) and there is more than one.
SMALL = 0.75
ROW_GROUP_ROWS = 65_536


@dataclass
class MaintainSummary:
    """What one `lake maintain` did."""

    stream: str
    namespace: str
    windows_compacted: int = 0
    files_before: int = 0
    files_after: int = 0
    snapshots_expired: int = 0
    orphans_removed: list[str] = field(default_factory=list)
    # Iceberg files no live snapshot or metadata log of the current metadata needs (every table of the lineage)
    metadata_removed: list[str] = field(default_factory=list)
    state_tables_folded: list[str] = field(default_factory=list)  # current-state tables whose delete files were folded
    # metadata-store retention: closed windows folded into per-window totals, and the rows it deleted
    windows_folded: int = 0
    partitions_deleted: int = 0
    attempts_deleted: int = 0
    manifest_rows_deleted: int = 0
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def maintain(settings: Settings, *, now: datetime | None = None) -> MaintainSummary:
    """Compaction, snapshot expiry, orphan removal and the change log's unneeded Iceberg files, then metadata-store
    retention, then the state tables' delete-file folds and their unneeded Iceberg files; each step idempotent, and
    safe to kill at any moment and while an extract lands or a window closes (it touches closed windows only, and
    files no one lists)."""
    started = time.monotonic()
    now = now or datetime.now(UTC)
    stream, layout = stream_of(settings), layout_of(settings)
    summary = MaintainSummary(stream, settings.namespace)
    with store_of(settings) as store:
        lineage = store.get_lineage(stream, settings.namespace)
        opened = iceberg.open_changelog(settings, layout)
        try:
            table = opened[1] if opened else None
            if table is not None:  # compaction keeps the old files for readers of old snapshots: Iceberg only
                for window in store.windows(lineage.id):
                    if window.state == "COMPLETE" and window.marker_path:
                        _compact_window(settings, store, lineage.id, layout, table, window, summary)
                summary.snapshots_expired = iceberg.expire_snapshots(table, now - settings.snapshot_retention)
                failpoint("expiry_after_commit")
            summary.orphans_removed = remove_orphans(store, lineage.id, layout, table, now - settings.orphan_min_age)
            if table is not None:  # the change log's own data files are the lake's: remove_orphans decides on them
                iceberg.bound_metadata_log(table)
                summary.metadata_removed += remove_unneeded(table, now - settings.orphan_min_age, data=False)
            fold_old_windows(store, lineage.id, now - settings.lineage_retention, summary,
                             keep_after=lambda: _applied_through(settings))  # fmt: skip
        finally:
            if opened:
                iceberg.close_catalog(opened[0])
    summary.state_tables_folded = _fold_state_tables(settings)
    summary.metadata_removed += _tidy_state_tables(settings, now - settings.orphan_min_age)
    summary.elapsed_s = time.monotonic() - started
    log.info(
        "%s: maintenance of %s: %d window(s) compacted (%d -> %d files), %d snapshot(s) expired, %d orphan(s) removed, "
        "%d Iceberg file(s) no snapshot needs removed, %d window(s) folded in the store (%d partitions, %d attempts, %d manifest rows deleted), %d state table(s) folded "
        "in %.1fs",
        stream, settings.namespace, summary.windows_compacted, summary.files_before, summary.files_after,
        summary.snapshots_expired, len(summary.orphans_removed), len(summary.metadata_removed), summary.windows_folded, summary.partitions_deleted,
        summary.attempts_deleted, summary.manifest_rows_deleted, len(summary.state_tables_folded), summary.elapsed_s,
    )  # fmt: skip
    return summary


def _compact_window(
    settings: Settings, store: MetadataStore, lineage_id: int, layout: LakeLayout, table: Table, window: WindowRow,
    summary: MaintainSummary,
) -> None:  # fmt: skip
    """Each table of the window whose files fewer would hold: rewritten, committed to Iceberg in one replace snapshot,
    listed by the next marker generation, then swapped in the manifest (in that order: a kill at any point re-runs
    to the same names, which hold the same rows)."""
    files = store.manifest(lineage_id, window_start=window.start, window_end=window.end)
    by_table: dict[str, list[ManifestFile]] = {}
    for f in files:
        by_table.setdefault(f.table_name or "", []).append(f)
    target = settings.target_file_size
    swaps: list[tuple[list[ManifestFile], list[ManifestFile]]] = []
    for name, old in sorted(by_table.items()):
        wanted = max(1, math.ceil(sum(f.bytes for f in old) / target))
        if len(old) <= 1 or wanted >= len(old) or not any(f.bytes < SMALL * target for f in old):
            continue
        new = rewrite(layout, lineage_id, name, window.start, old, target)
        iceberg.commit_compaction(table, window_start=window.start, window_end=window.end, table_name=name,
                                  old=[f.path for f in old], new=new)  # fmt: skip
        failpoint("compaction_after_replace")
        swaps.append((old, new))
    if not swaps:
        return
    replaced = {f.path for old, _ in swaps for f in old}
    listed = [f for f in files if f.path not in replaced] + [f for _, new in swaps for f in new]
    assert window.marker_path is not None
    rewrite_marker(layout, window.marker_path, listed)
    for old, new in swaps:
        store.replace_files(lineage_id, [f.path for f in old], new)
    summary.windows_compacted += 1
    summary.files_before += len(files)
    summary.files_after += len(listed)


def compacted_name(layout: LakeLayout, lineage_id: int, table: str, window_start: datetime, sources: Sequence[str], sequence: int) -> str:
    """Deterministic in the files compacted: a re-run writes the same names with the same rows."""
    digest = hashlib.sha256("\n".join(sorted(sources)).encode()).hexdigest()[:20]
    return storage.join(layout.location, window_dir(table, window_start), f"part-L{lineage_id}-c{digest}-{sequence:03d}.parquet")


def rewrite(
    layout: LakeLayout, lineage_id: int, table: str, window_start: datetime, old: Sequence[ManifestFile], target: int
) -> list[ManifestFile]:
    """The rows of `old`, in the manifest's order, in files of about `target` bytes (cut by rows, at the old files'
    bytes per row, so a re-run cuts in the same places), each published whole under its name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sum(f.rows for f in old)
    per_file = max(1, math.ceil(rows / max(1, math.ceil(sum(f.bytes for f in old) / target))))
    scratch_dir = Path(tempfile.gettempdir()) / "spanner-cdc" / uuid.uuid4().hex
    sources = [f.path for f in old]
    out: list[ManifestFile] = []
    writer: Any = None
    scratch: Path | None = None
    written = 0

    def finish() -> None:
        nonlocal writer, scratch, written
        assert writer is not None and scratch is not None
        writer.close()
        path = compacted_name(layout, lineage_id, table, window_start, sources, len(out))
        size = storage.put_file(scratch, path)
        out.append(ManifestFile(
            path=path, token=old[0].token, range_start=min(f.range_start for f in old), range_end=max(f.range_end for f in old),
            window_start=old[0].window_start, window_end=old[0].window_end, rows=written, bytes=size, table_name=table,
        ))  # fmt: skip
        writer, scratch, written = None, None, 0

    try:
        for source in sources:
            with storage.open_input(source) as handle:
                for batch in pq.ParquetFile(handle).iter_batches(batch_size=ROW_GROUP_ROWS):
                    while batch.num_rows:
                        if writer is None:
                            scratch = storage.scratch_for(compacted_name(layout, lineage_id, table, window_start, sources, len(out)), scratch_dir)
                            writer = pq.ParquetWriter(scratch, batch.schema, compression="snappy")
                        take = batch.slice(0, per_file - written)
                        writer.write_table(pa.Table.from_batches([take]), row_group_size=ROW_GROUP_ROWS)
                        written += take.num_rows
                        batch = batch.slice(take.num_rows)
                        if written >= per_file:
                            finish()
        if writer is not None:
            finish()
    except BaseException:
        if writer is not None and scratch is not None:
            writer.close()
            scratch.unlink(missing_ok=True)
        raise
    if sum(f.rows for f in out) != rows:
        raise ExtractError(f"{layout.stream}: compacting {len(old)} file(s) of {table} gave {sum(f.rows for f in out)} rows, not {rows}")
    return out


def _applied_through(settings: Settings) -> datetime | None:
    from spanner_cdc.extract.current_state import applied_through

    return applied_through(settings)


def _fold_state_tables(settings: Settings) -> list[str]:
    """The current-state tables' position deletes folded into data files (Spark starts only for a table that has any)."""
    from spanner_cdc.extract.current_state import fold_state_deletes

    return [f.table for f in fold_state_deletes(settings) if f.snapshot_id is not None]


def remove_orphans(store: MetadataStore, lineage_id: int, layout: LakeLayout, table: Table | None, older_than: datetime) -> list[str]:
    """Delete the change log's data files that no manifest row, live Iceberg snapshot or window marker lists, written
    before `older_than`: a crashed attempt's, a late write of a lost claim after its window closed, compaction's
    originals once no live snapshot holds them. A committed file is listed, so never one of them."""
    listed = {storage.identity(f.path) for f in store.manifest(lineage_id)}
    if table is not None:
        listed |= {storage.identity(iceberg_path(p)) for p in iceberg.live_files(table)}
    for window in store.windows(lineage_id):
        if window.marker_path:
            listed |= {storage.identity(storage.join(layout.location, f["path"])) for f in _marker_files(window.marker_path)}
    candidates = [p for p in published_locations(layout.location) if f"/{TABLE_KEY}=" in p[len(layout.location) :]]
    removed = _remove_old(candidates, listed, older_than, after_each=lambda: failpoint("orphan_after_remove"))
    if removed:
        log.warning("%s: removed %d file(s) no manifest, snapshot or marker lists: %s", layout.stream, len(removed), removed[:5])
    return removed


def _remove_old(paths: Sequence[str], keep: set[str], older_than: datetime, *, after_each: Callable[[], None]) -> list[str]:
    """Delete, one by one, each of `paths` whose identity is not in `keep` and that was written before `older_than`
    (one gone meanwhile is skipped); `after_each` runs after each deletion."""
    removed: list[str] = []
    for path in paths:
        if storage.identity(path) in keep:
            continue
        try:
            if storage.modified(path) >= older_than:
                continue
        except FileNotFoundError:
            continue
        removed += storage.remove([path])
        after_each()
    return removed


# What an Iceberg table writes under its location: metadata.json files, manifest lists and manifests; data and delete
# files (a state table's; the change log's data files live in the lake's own directories).
METADATA_SUFFIXES = (".metadata.json", ".avro")
DATA_SUFFIXES = (".parquet",)


def remove_unneeded(table: Table, older_than: datetime, *, data: bool) -> list[str]:
    """Delete, one by one, the files under the table's metadata/ directory (with `data`, under its whole location)
    that its current metadata does not need (iceberg.needed_files: read once, before any is deleted) and that were
    written before `older_than`: metadata.json files past the metadata log, the manifest lists and manifests of expired
    snapshots (and, with `data`, their data and delete files), a failed commit's. A commit in flight writes its
    manifests before its metadata swap: they are younger than the safety age, so kept."""
    needed = {storage.identity(iceberg_path(p)) for p in iceberg.needed_files(table)}
    root = iceberg_path(table.location())
    suffixes = METADATA_SUFFIXES + DATA_SUFFIXES if data else METADATA_SUFFIXES
    found = [p for p in storage.find(root if data else storage.join(root, "metadata")) if p.endswith(suffixes)]
    removed = _remove_old(found, needed, older_than, after_each=lambda: failpoint("metadata_after_remove"))
    if removed:
        log.info("Iceberg table %s: removed %d file(s) no live snapshot needs", table.name(), len(removed))
    return removed


def _tidy_state_tables(settings: Settings, older_than: datetime) -> list[str]:
    """Each current-state table: its metadata log bounded, and the files no live snapshot of it needs removed."""
    from spanner_cdc.extract.current_state import _load, known_tables, state_catalog

    layout = layout_of(settings)
    catalog = state_catalog(settings)  # the store's SQL catalog with iceberg_catalog off
    removed: list[str] = []
    try:
        for name in known_tables(catalog, layout):
            handle = _load(catalog, layout, name)
            if handle is None:
                continue
            iceberg.bound_metadata_log(handle)
            removed += remove_unneeded(handle, older_than, data=True)
    finally:
        iceberg.close_catalog(catalog)
    return removed


def fold_old_windows(
    store: MetadataStore, lineage_id: int, closed_before: datetime, summary: MaintainSummary, *,
    keep_after: Callable[[], datetime | None] | None = None,
) -> None:  # fmt: skip
    """Metadata-store retention: each window closed before `closed_before` and not folded yet, oldest first, folded in
    its own transaction (store.fold_window: its manifest rows, ended attempts and the finished partitions that ended
    before its end counted into per-window totals and deleted). Stops at the first window open or closed since: the
    frontier and everything after it stay whole. A window's files stay protected from orphan removal by its marker
    (and its Iceberg snapshot), so a window whose marker is missing is not folded. Nor is a window ending after
    what `keep_after` returns (asked only when some window is due): the current-state tables have not applied it yet,
    and read its files from the manifest."""
    folded = {(t.start, t.end) for t in store.window_totals(lineage_id)}
    due = []
    for window in store.windows(lineage_id):
        if window.state != "COMPLETE" or window.closed_at is None or window.closed_at >= closed_before:
            break  # the rows of later windows are the frontier's or within the retention
        if (window.start, window.end) not in folded:
            due.append(window)
    last = keep_after() if due and keep_after is not None else None
    for window in due:
        if last is not None and window.end > last:
            break
        if window.marker_path is None or not storage.exists(window.marker_path):
            log.warning("%s: window [%s, %s) has no marker: its store rows are kept (they protect its files)",
                        summary.stream, window.start.isoformat(), window.end.isoformat())  # fmt: skip
            continue
        failpoint("retention_before_fold")
        totals = store.fold_window(lineage_id, window.start, window.end)
        if totals is None:  # an open window starts before its end (closed concurrently out of order): stop here
            break
        summary.windows_folded += 1
        summary.partitions_deleted += totals.partitions
        summary.attempts_deleted += totals.attempts
        summary.manifest_rows_deleted += totals.files


def iceberg_path(location: str) -> str:
    """A data file's location as the lake names it (Iceberg keeps a local path as a file:// URL or absolute)."""
    return location[len("file://") :] if location.startswith("file://") else location


def _marker_files(location: str) -> list[dict[str, Any]]:
    from spanner_cdc.lake.markers import read_marker

    marker = read_marker(location)
    return list(marker["files"]) if marker else []

