"""Current-state Iceberg tables at each closed window's end: the window's changes applied as one snapshot per table
(the run over the lineage's windows; lake/current_state.py is the pure fold of one table's changes, lake/state_table.py
the Iceberg side, spark/state_job.py its job)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ExtractError, setting
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.inputs import layout_of, store_of, stream_of
from spanner_cdc.lake import storage
from spanner_cdc.lake.current_state import Column, SchemaFact, merge_facts, schema_facts, target_columns
from spanner_cdc.lineage.rules import inclusive_end

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.settings import Settings
    from spanner_cdc.spark.state_job import StateTask
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.models import WindowRow

log = logging.getLogger(__name__)
FACT_COLUMNS = ["object", "commit_timestamp", "change_type", "column_types", "value_capture_type"]


@dataclass
class StateSummary:
    """A window applied to the state tables: each table's rows at its end and the snapshot that holds them."""

    as_of: datetime
    window_start: datetime
    tables: dict[str, int] = field(default_factory=dict)
    snapshots: dict[str, int] = field(default_factory=dict)
    # the window's completeness record, as its marker has it and each table's snapshot summary carries it
    completeness: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "as_of": _z(self.as_of),
            "window_start": _z(self.window_start),
            "tables": self.tables,
            "snapshots": self.snapshots,
            "completeness": self.completeness,
        }


def _z(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")




def state_catalog(settings: Settings) -> Catalog:
    """The change log's catalog; the metadata store's (a SQL catalog) when the change log has none (`off`)."""
    from spanner_cdc.lake.iceberg import catalog_properties, open_catalog

    name = "store" if settings.iceberg_catalog == "off" else settings.iceberg_catalog
    return open_catalog(
        catalog_properties(name, metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    )


def _io_properties(catalog: Catalog) -> dict[str, str]:
    """What an executor needs to read and write the tables' files (object store endpoints; no catalog credentials)."""
    return {k: v for k, v in catalog.properties.items() if k.startswith(("s3.", "gcs.", "adls."))}


def _facts(paths: list[str], start: datetime | None, end: datetime | None) -> list[SchemaFact]:
    """The schema facts of files' changes (commits in [start, end) when bounded), read a batch at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spanner_cdc.lake.columns import TIMESTAMP

    out: list[SchemaFact] = []
    for path in paths:
        with pq.ParquetFile(storage.bare(path), filesystem=storage.filesystem(path)) as parquet:
            for batch in parquet.iter_batches(columns=FACT_COLUMNS, batch_size=65_536):
                data = pa.Table.from_batches([batch])
                if start is not None and end is not None:
                    stamp = data.column("commit_timestamp")
                    data = data.filter(
                        pc.and_(
                            pc.greater_equal(stamp, pa.scalar(start, TIMESTAMP)),
                            pc.less(stamp, pa.scalar(end, TIMESTAMP)),
                        )
                    )
                out = merge_facts([*out, *schema_facts(data)])
    return out


def _run_tasks(settings: Settings, tasks: list[StateTask], rows: int) -> list[tuple[str, str, DataFile]]:
    """The tasks in this process when their inputs hold at most `state_driver_rows` rows (no Spark driver to start,
    no job: an hourly window's few thousand changes), else one Spark job."""
    from spanner_cdc.spark.state_job import run_here, run_state_job

    if 0 < settings.state_driver_rows and rows <= settings.state_driver_rows:  # 0: always Spark
        return run_here(tasks)
    from spanner_cdc.spark.session import spark_session

    log.info("%s: the current-state tasks of %d rows run in Spark", settings.stream, rows)
    return run_state_job(spark_session(settings), tasks)


def _load(catalog: Catalog, layout: LakeLayout, table: str) -> Table | None:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from spanner_cdc.lake.state_table import state_identifier

    try:
        return catalog.load_table(state_identifier(layout, table))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def known_tables(catalog: Catalog, layout: LakeLayout) -> list[str]:
    """The source tables that have a state table in the catalog."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    from spanner_cdc.lake.state_table import SOURCE_TABLE

    prefix = f"{layout.stream}__current__"
    try:
        names = [i for i in catalog.list_tables(layout.namespace) if i[-1].startswith(prefix)]
    except NoSuchNamespaceError:
        return []
    return sorted(str(catalog.load_table(i).properties.get(SOURCE_TABLE, i[-1][len(prefix) :])) for i in names)


class StateConflict(ExtractError):
    """Another writer committed a snapshot to a state table while a window's files were written for the one before:
    the files name rows by position in the data files the table had, so the window is applied again."""


COMMIT_ATTEMPTS = 3


def _commit(handle: Table, files: list[Any], properties: dict[str, str]) -> int:
    """The window's (or the seed's) files as one snapshot. A commit that lost a race: when the table now holds this
    window (another run applied it), that snapshot and nothing more; when the table's snapshot is the same (the catalog
    changed under it, not its rows), the same files again; when another snapshot came, a StateConflict."""
    from pyiceberg.exceptions import CommitFailedException

    from spanner_cdc.lake.iceberg import WINDOW_END
    from spanner_cdc.lake.state_table import SNAPSHOT_AT, applied_ends, commit_row_delta

    spec_id = handle.metadata.default_spec_id
    for _, _, data_file in files:
        data_file.spec_id = spec_id  # every file was written with the table's spec (a pickled entry drops it)
    data = [f for _, kind, f in files if kind == "data"]
    deletes = [f for _, kind, f in files if kind == "deletes"]
    base = handle.current_snapshot()
    end = properties.get(WINDOW_END) or properties[SNAPSHOT_AT]
    failpoint("state_before_commit")  # crash tests: the window's files are written, its snapshot not yet committed
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return commit_row_delta(handle, data, deletes, properties)
        except CommitFailedException as exc:
            handle.refresh()
            held = applied_ends(handle).get(end)
            if held is not None:
                log.info("current-state table %s: the window ending %s was committed by another run (snapshot %s)",
                         handle.name(), end, held)  # fmt: skip
                return held
            current = handle.current_snapshot()
            if (current and current.snapshot_id) != (base and base.snapshot_id):
                raise StateConflict(
                    f"current-state table {'.'.join(handle.name())}: another snapshot ({current and current.snapshot_id}) "
                    f"was committed while the window ending {end} was applied to snapshot {base and base.snapshot_id}"
                ) from exc
            if attempt == COMMIT_ATTEMPTS:
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def _seed(
    settings: Settings, catalog: Catalog, layout: LakeLayout, at: datetime, snapshot: dict[str, list[str]],
    rows: dict[str, int],
) -> None:
    """The initial snapshot's rows as each state table's first snapshot (named by T0), for the tables that have none
    (`snapshot`: each table's files; `rows`: their rows, as the store recorded them)."""
    from spanner_cdc.lake.state_table import SNAPSHOT_AT, ensure_state_table
    from spanner_cdc.spark.state_job import StateTask

    todo: dict[str, Table] = {}
    for table, paths in sorted(snapshot.items()):
        handle = _load(catalog, layout, table)
        if handle is not None and handle.snapshots():
            continue  # seeded (or past it) already
        facts = [f for f in _facts(paths, None, None) if f.table == table]
        if facts:
            todo[table] = ensure_state_table(catalog, layout, table, target_columns(facts, []))
    if not todo:
        return
    io = _io_properties(catalog)
    tasks = [StateTask("seed", t, h.metadata_location, io, [p]) for t, h in todo.items() for p in sorted(snapshot[t])]
    files = _run_tasks(settings, tasks, sum(rows.get(t, 0) for t in todo))
    for table, handle in todo.items():
        snapshot_id = _commit(
            handle, [f for f in files if f[0] == table], {SNAPSHOT_AT: at.astimezone(UTC).isoformat()}
        )
        log.info(
            "%s: current state of %s seeded from the snapshot at %s (snapshot %s)",
            layout.stream,
            table,
            _z(at),
            snapshot_id,
        )


def _apply_tasks(
    handle: Table, table: str, io: dict[str, str], paths: list[str], window: WindowRow, memory: int | None = None
) -> list[StateTask]:
    """A task per key bucket, each with the bucket's data files and the delete files that apply to them (and at most
    `memory` bytes to do it in, when bounded)."""
    from spanner_cdc.lake.state_table import BUCKETS
    from spanner_cdc.spark.state_job import Candidate, StateTask

    bucketed = bool(handle.spec().fields)
    candidates: dict[int | None, list[Candidate]] = {}
    if handle.current_snapshot() is not None:
        for planned in handle.scan().plan_files():
            bucket = planned.file.partition[0] if bucketed else None
            candidates.setdefault(bucket, []).append(
                Candidate(planned.file.file_path, sorted(d.file_path for d in planned.delete_files))
            )
    buckets: list[int | None] = list(range(BUCKETS)) if bucketed else [None]
    return [
        StateTask("apply", table, handle.metadata_location, io, paths, b, candidates.get(b, []), window.start, window.end,
                  memory)
        for b in buckets
    ]  # fmt: skip


def _step(
    settings: Settings, catalog: Catalog, layout: LakeLayout, store: MetadataStore, lineage_id: int, window: WindowRow,
    folded: bool = False,
) -> StateSummary:  # fmt: skip
    """One window applied to every state table that does not hold it yet: its tasks (here, or one Spark job when the
    window is large: `_run_tasks`), then a snapshot per table.
    A window whose store rows retention folded (`folded`) cannot be: its files are no longer in the manifest."""
    from spanner_cdc.lake.markers import read_marker
    from spanner_cdc.lake.state_table import (
        applied_ends,
        ensure_state_table,
        live_rows,
        state_columns,
        window_properties,
    )
    last = inclusive_end(window.end)
    changes: dict[str, list[str]] = {}
    rows: dict[str, int] = {}  # the manifest's rows of each table's files (other windows' commits among them)
    for f in store.manifest(lineage_id):
        if f.table_name and f.range_start <= last and f.range_end >= window.start:
            changes.setdefault(f.table_name, []).append(f.path)
            rows[f.table_name] = rows.get(f.table_name, 0) + f.rows
    facts = _facts(sorted(p for paths in changes.values() for p in paths), window.start, window.end)
    end_text = window.end.astimezone(UTC).isoformat()
    io = _io_properties(catalog)
    handles: dict[str, Table] = {}
    tasks = []
    for table in sorted(set(known_tables(catalog, layout)) | {f.table for f in facts}):
        handle = _load(catalog, layout, table)
        ends = applied_ends(handle) if handle is not None else {}
        if end_text in ends or any(e > end_text for e in ends):
            continue  # this window (or a later one) is in the table already: a re-run
        if folded:
            raise ExtractError(
                f"{layout.stream}: the current state of {table} does not hold window [{_z(window.start)}, "
                f"{_z(window.end)}), whose store rows were folded by metadata-store retention: its changes can no "
                "longer be applied; seed the state tables again (a new namespace with a snapshot), and keep "
                f"{setting('lineage_retention')} longer than a state table may fall behind"
            )
        table_facts = [f for f in facts if f.table == table]
        existing: list[Column] = state_columns(handle) if handle is not None else []
        if table_facts:
            handle = ensure_state_table(catalog, layout, table, target_columns(table_facts, existing))
            tasks += _apply_tasks(handle, table, io, sorted(changes.get(table, [])), window, settings.state_task_memory)
        if handle is not None:
            handles[table] = handle
    files = _run_tasks(settings, tasks, sum(rows.get(table, 0) for table in {t.table for t in tasks})) if tasks else []
    # the record the window's close wrote in its marker (a window closed by an older release has none)
    marker = read_marker(window.marker_path) if window.marker_path else None
    summary = StateSummary(window.end, window.start, completeness=(marker or {}).get("completeness"))
    properties = window_properties(window.start, window.end, summary.completeness)
    for table, handle in handles.items():
        table_files = [f for f in files if f[0] == table]
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            try:
                snapshot_id = _commit(handle, table_files, properties)
                break
            except StateConflict as exc:
                if attempt == COMMIT_ATTEMPTS:
                    raise
                log.warning("%s: applying the window to the new snapshot", exc)  # the files written are orphans
                handle.refresh()
                again = _apply_tasks(handle, table, io, sorted(changes.get(table, [])), window, settings.state_task_memory)
                table_files = _run_tasks(settings, again, rows.get(table, 0)) if table in changes else []
        summary.snapshots[table], summary.tables[table] = snapshot_id, live_rows(handle, snapshot_id)
    return summary


def _expire(catalog: Catalog, layout: LakeLayout, keep: int) -> None:
    """Keep each state table's newest `keep` window snapshots (and its current one); older ones are expired."""
    from spanner_cdc.lake.state_table import applied_ends

    for table in known_tables(catalog, layout):
        handle = _load(catalog, layout, table)
        if handle is None:
            continue
        current = handle.current_snapshot()
        ordered = sorted(applied_ends(handle).items())
        old = [sid for _, sid in ordered[:-keep]] if len(ordered) > keep else []
        old = [sid for sid in old if current is None or sid != current.snapshot_id]
        if old:
            handle.maintenance.expire_snapshots().by_ids(old).commit()


def update_current_state(
    settings: Settings, *, up_to: datetime | None = None, keep: int | None = None
) -> list[StateSummary]:
    """Every closed window (up to `up_to`) that a state table does not hold yet, oldest first, each one snapshot per
    table; the first time, the initial snapshot seeds the tables. A window no table needed is not reported."""
    from spanner_cdc.lake.iceberg import _dispose

    layout, keep = layout_of(settings), keep or settings.current_state_keep
    catalog = state_catalog(settings)
    try:
        with store_of(settings) as store:
            lineage = store.get_lineage(stream_of(settings), settings.namespace)
            windows = []
            for w in sorted(store.windows(lineage.id), key=lambda w: w.start):
                if w.state != "COMPLETE" or (up_to is not None and w.end > up_to):
                    break  # a state holds every change before its end: never past a window still open
                windows.append(w)
            taken = store.snapshot(lineage.id)
            if taken is not None and taken.complete:
                snapshot: dict[str, list[str]] = {}
                rows: dict[str, int] = {}
                for part in store.snapshot_files(lineage.id):
                    snapshot.setdefault(part.table, []).append(part.path)
                    rows[part.table] = rows.get(part.table, 0) + part.rows
                _seed(settings, catalog, layout, taken.at, snapshot, rows)
            made: list[StateSummary] = []
            folded = {(t.start, t.end) for t in store.window_totals(lineage.id)}
            for window in windows:
                summary = _step(settings, catalog, layout, store, lineage.id, window, (window.start, window.end) in folded)
                if summary.snapshots:
                    made.append(summary)
                    log.info("%s: current state as of %s: %s", layout.stream, _z(window.end), summary.tables)
            _expire(catalog, layout, keep)
    finally:
        _dispose(catalog)
    return made


def applied_through(settings: Settings) -> datetime | None:
    """The end of the newest window every current-state table of the lineage holds (its seed's time for one that holds
    no window yet); None when it has no state table. Retention keeps the store rows of the windows after it."""
    from spanner_cdc.lake.iceberg import _dispose
    from spanner_cdc.lake.state_table import applied_ends

    layout = layout_of(settings)
    catalog = state_catalog(settings)
    try:
        newest = []
        for table in known_tables(catalog, layout):
            handle = _load(catalog, layout, table)
            ends = [datetime.fromisoformat(e.replace("Z", "+00:00")) for e in (applied_ends(handle) if handle else {})]
            newest.append(max(ends, default=datetime.min.replace(tzinfo=UTC)))
        return min(newest, default=None)
    finally:
        _dispose(catalog)


@dataclass
class FoldSummary:
    """What folding a state table's delete files did."""

    table: str
    snapshot_id: int | None  # None: the table had no delete file
    replaced: int = 0
    written: int = 0
    deletes: int = 0


def fold_state_deletes(settings: Settings) -> list[FoldSummary]:
    """Maintenance of the state tables: each table's position deletes folded into its data files (a Spark task per
    bucket that has any), in one snapshot per table; reads give the same rows before, during and after."""
    from spanner_cdc.lake.iceberg import _dispose
    from spanner_cdc.lake.state_table import commit_fold

    layout = layout_of(settings)
    catalog = state_catalog(settings)
    out = []
    try:
        io = _io_properties(catalog)
        for table in known_tables(catalog, layout):
            handle = _load(catalog, layout, table)
            if handle is None or handle.current_snapshot() is None:
                continue
            bucketed = bool(handle.spec().fields)
            planned = list(handle.scan().plan_files())
            dirty = {p.file.partition[0] if bucketed else None for p in planned if p.delete_files}
            if not dirty:
                out.append(FoldSummary(table, None))
                continue
            # pyspark is imported only here, for a table with deletes to fold: most maintenance runs never need it
            from spanner_cdc.spark.session import spark_session
            from spanner_cdc.spark.state_job import Candidate, StateTask, run_state_job

            groups: dict[int | None, list[Any]] = {}
            for p in planned:
                bucket = p.file.partition[0] if bucketed else None
                if bucket in dirty:
                    groups.setdefault(bucket, []).append(p)
            tasks = [
                StateTask("compact", table, handle.metadata_location, io, [], bucket,
                          [Candidate(p.file.file_path, sorted(d.file_path for d in p.delete_files)) for p in group])
                for bucket, group in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
            ]  # fmt: skip
            files = run_state_job(spark_session(settings), tasks)
            for _, _, data_file in files:
                data_file.spec_id = handle.metadata.default_spec_id
            replaced = [p.file for group in groups.values() for p in group]
            deletes = len({d.file_path for p in planned for d in p.delete_files})
            snapshot_id = commit_fold(handle, replaced, [f for _, _, f in files], {"spanner-cdc.maintenance": "fold-deletes"})
            out.append(FoldSummary(table, snapshot_id, len(replaced), len(files), deletes))
            log.info("%s: current state of %s: %d delete files folded, %d data files rewritten as %d", layout.stream, table,
                     deletes, len(replaced), len(files))  # fmt: skip
    finally:
        _dispose(catalog)
    return out
