"""A lineage's initial snapshot run: every watched table read at T0, table by table, exactly once; extraction starts after T0."""

from __future__ import annotations

import base64
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import ConfigError, RetentionError, UsageError, setting
from spanner_cdc.extract.failpoints import failpoint
from spanner_cdc.extract.inputs import layout_of, store_of, stream_of, utc_given
from spanner_cdc.extract.planning import check_retention, root_partitions
from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import check_output_root
from spanner_cdc.lake.snapshot import write_snapshot_marker
from spanner_cdc.store.snapshots import SnapshotFile

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings
    from spanner_cdc.source.snapshot_tables import WatchedTable
    from spanner_cdc.store import MetadataStore

log = logging.getLogger(__name__)
MICROSECOND = timedelta(microseconds=1)


@dataclass
class SnapshotSummary:
    stream: str
    namespace: str
    lineage_id: int
    at: datetime
    tables: dict[str, int] = field(default_factory=dict)
    files: int = 0
    marker_path: str = ""
    read_now: list[str] = field(default_factory=list)  # tables read by this run (the others were committed before)
    changes_from: datetime | None = None
    elapsed_s: float = 0.0

    @property
    def rows(self) -> int:
        return sum(self.tables.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "stream": self.stream, "namespace": self.namespace, "lineage_id": self.lineage_id,
            "at": _z(self.at), "changes_from": _z(self.changes_from), "complete": True, "tables": self.tables,
            "rows": self.rows, "files": self.files, "marker": self.marker_path, "tables_read_now": self.read_now,
            "elapsed_s": round(self.elapsed_s, 3),
        }  # fmt: skip


def _z(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_snapshot_time(database: Any, stream: str, at: datetime, now: datetime, retention: timedelta, namespace: str) -> None:
    """Refuse up front a T0 in the future, past the database's version_retention_period, or the stream's retention."""
    if at > now:
        raise UsageError(f"snapshot timestamp {_z(at)} is in the future (Spanner's time is {_z(now)}): give {setting('at')} in the past, or leave it out for now")
    database.reload()
    earliest = database.earliest_version_time
    if earliest is not None and at < utc_given(earliest, "earliest_version_time"):
        raise RetentionError(
            f"snapshot timestamp {_z(at)} is older than database {database.database_id}'s oldest readable version "
            f"({_z(earliest)}; version_retention_period {database.version_retention_period or '1h'}): rows as of then are gone. "
            f"Give a later {setting('at')}, or raise the database's version_retention_period (ALTER DATABASE ... SET OPTIONS)"
        )
    check_retention(stream, at + MICROSECOND, retention, namespace, now=now)


def _begin(settings: Settings, store: MetadataStore, database: Any, meta: Any, dialect: str, at: datetime | None) -> tuple[int, datetime]:
    """The lineage and its snapshot's T0: the one begun before, or a new one checked and recorded with the lineage's roots."""
    stream, namespace = stream_of(settings), settings.namespace
    lineage = store.ensure_lineage(stream, namespace, database=database.name)
    existing = store.snapshot(lineage.id)
    if existing is not None:
        if at is not None and at != existing.at:
            raise UsageError(f"lineage {lineage.name} has a snapshot at {_z(existing.at)}, not {setting('at')} {_z(at)}: leave {setting('at')} out to finish it, or use another {setting('namespace')}")
        return lineage.id, existing.at
    partitions = store.partitions(lineage.id)
    if partitions and store.window_totals(lineage.id):
        raise UsageError(
            f"lineage {lineage.name} has extracted changes for longer than its metadata store keeps their partitions "
            f"({setting('lineage_retention')}): its first partitions are folded, so its snapshot's time is no longer "
            f"known; snapshot into another {setting('namespace')}"
        )
    if partitions:
        start = min(p.start for p in partitions)
        if at is not None and at != start - MICROSECOND:
            raise UsageError(
                f"lineage {lineage.name} already extracts changes from {_z(start)}: its snapshot can only be at {_z(start - MICROSECOND)} "
                f"(leave {setting('at')} out), or snapshot into another {setting('namespace')}"
            )
        at = start - MICROSECOND
    from spanner_cdc.source.client import server_now

    now = server_now(database, dialect)
    at = now if at is None else at
    check_snapshot_time(database, stream, at, now, meta.retention, namespace)
    if not partitions:  # extraction starts right after T0: commits at T0 are in the snapshot, later ones in the change log
        begin, roots = root_partitions(
            database, stream, dialect=dialect, heartbeat_ms=settings.heartbeat_ms, at=at + MICROSECOND,
            retention=meta.retention, namespace=namespace, read_options=settings.read_options,
        )  # fmt: skip
        store.bootstrap(lineage.id, begin, roots)
    return lineage.id, store.begin_snapshot(lineage.id, at).at


def _read_table(settings: Settings, spark: Any, database: Any, table: WatchedTable, at: datetime, dialect: str, capture: str) -> list[SnapshotFile]:
    """One Spark job over the table's partitions (a task each) in one read-only transaction at `at`."""
    from spanner_cdc.policy import resolve_key
    from spanner_cdc.spark.snapshot_job import SnapshotJobSpec, run_snapshot_job

    batch = database.batch_snapshot(read_timestamp=at)
    try:
        sql = table.select(dialect)
        reads = settings.read_options
        parts = list(batch.generate_query_batches(sql, max_partitions=max(2, settings.concurrency), **reads.partition_kwargs()))
        shared = batch.to_dict()
        spec = SnapshotJobSpec(
            project=settings.project, instance=settings.instance, database=settings.database, emulator_host=settings.emulator_host,
            stream=stream_of(settings), namespace=settings.namespace, output_root=str(settings.output_root), table=table.name,
            sql=sql, keys=json.dumps(list(table.keys)), ordinals=json.dumps(dict(table.ordinals)), value_capture_type=capture,
            at=at, session_id=shared["session_id"], transaction_id=base64.b64encode(shared["transaction_id"]).decode(),
            partitions=json.dumps([base64.b64encode(p["partition"]).decode() for p in parts]),
            policy="" if settings.policy.empty else str(settings.policy), policy_secret=resolve_key(settings.policy).hex(),
            read_options=str(reads),
        )  # fmt: skip
        listing = run_snapshot_job(spark, spec)
    finally:
        batch.close()
    return [SnapshotFile(row["table"], row["path"], int(row["rows"]), int(row["bytes"])) for row in listing]


def _check_policy(settings: Settings, tables: list[WatchedTable]) -> None:
    """A column rule naming no column of a watched table (a typo would land the clear value) stops the snapshot."""
    from spanner_cdc.policy import unmatched_rules

    problems = unmatched_rules(settings.policy, {t.name: (*t.keys, *t.columns) for t in tables})
    if problems:
        raise ConfigError("policy", problems[0], "rules that name watched columns as Table.Column (fix the name, or drop the rule)")


def run_snapshot(settings: Settings, *, at: datetime | None = None) -> SnapshotSummary:
    """Snapshot the stream's lineage at `at` (default: now, or just before the changes it already extracts)."""
    from spanner_cdc.source.client import detect_dialect, open_database, stream_metadata
    from spanner_cdc.source.snapshot_tables import watched_tables
    from spanner_cdc.spark.session import spark_session

    began = time.monotonic()
    stream, layout = stream_of(settings), layout_of(settings)
    at = None if at is None else utc_given(at, setting("at"))
    check_output_root(settings.output_root)
    database = open_database(settings)
    dialect = detect_dialect(database, settings.dialect)
    meta = stream_metadata(database, stream, dialect)
    with store_of(settings) as store:
        lineage_id, at = _begin(settings, store, database, meta, dialect, at)
        summary = SnapshotSummary(stream, settings.namespace, lineage_id, at)
        done = store.snapshot_tables(lineage_id)
        current = store.snapshot(lineage_id)
        if current is None or not current.complete:
            tables = watched_tables(database, stream, dialect, at)
            _check_policy(settings, tables)
            for table in tables:
                if table.name in done or not settings.policy.table_lands(table.name):  # a table left out lands nothing
                    continue
                storage.remove_tree(layout.snapshot_table_location(table.name))  # what a crashed attempt left
                files = _read_table(settings, spark_session(settings), database, table, at, dialect, meta.value_capture_type)
                failpoint("snapshot_after_job")
                store.commit_snapshot_table(lineage_id, table.name, files)
                failpoint("snapshot_after_commit")
                summary.read_now.append(table.name)
                log.info("%s: snapshot of %s at %s: %d rows in %d files", stream, table.name, _z(at), sum(f.rows for f in files), len(files))
            files = store.snapshot_files(lineage_id)
            marker = write_snapshot_marker(layout, at, files, policy=settings.policy)
            failpoint("snapshot_after_marker")
            current = store.complete_snapshot(lineage_id, rows=sum(f.rows for f in files), files=len(files), marker_path=marker)
        summary.tables = store.snapshot_tables(lineage_id)
        summary.files = int(current.files or 0)
        summary.marker_path = current.marker_path or ""
        partitions = store.partitions(lineage_id)
        summary.changes_from = min((p.start for p in partitions), default=None)
    summary.elapsed_s = time.monotonic() - began
    return summary
