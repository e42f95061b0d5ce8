"""`spanner-cdc verify`: a closed window's state tables and change log compared with the source, the result kept with it."""

from __future__ import annotations

import base64
import logging
import random
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import NotFound, UsageError, setting
from spanner_cdc.extract.inputs import layout_of, store_of, stream_of
from spanner_cdc.lake import storage
from spanner_cdc.lake.verify_rows import (
    SHOWN,
    ChangeLogCheck,
    Mismatch,
    TableCheck,
    VerifyResult,
    check_fraction,
    choose_buckets,
    compare_changes,
)
from spanner_cdc.lineage.rules import inclusive_end

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from spanner_cdc.lake.layout import LakeLayout
    from spanner_cdc.policy import PolicyApplier
    from spanner_cdc.settings import Settings
    from spanner_cdc.spark.verify_job import VerifyTask
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.models import Lineage, WindowRow

log = logging.getLogger(__name__)
MICROSECOND = timedelta(microseconds=1)


def _z(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _lineage(store: MetadataStore, stream: str, namespace: str) -> Lineage:
    try:
        return store.get_lineage(stream, namespace)
    except NotFound as exc:
        raise NotFound(f"{setting('stream')} {stream}: {exc}") from None


def closed_window(store: MetadataStore, lineage: Lineage, window_end: datetime | None) -> WindowRow:
    """The window verified: the closed one ending at `window_end`, or the newest closed one."""
    windows = store.windows(lineage.id)
    closed = [w for w in windows if w.state == "COMPLETE"]
    if window_end is None:
        if not closed:
            raise UsageError(
                f"lineage {lineage.name} has no closed window yet: nothing to verify (extract a window first)"
            )
        return _not_folded(store, lineage, max(closed, key=lambda w: w.end))
    found = next((w for w in windows if w.end == window_end), None)
    if found is not None and found.state == "COMPLETE":
        return _not_folded(store, lineage, found)
    newest = ", ".join(_z(w.end) for w in sorted(closed, key=lambda w: w.end)[-3:]) or "none yet"
    what = f"is still {found.state}" if found is not None else "is not a window of the lineage"
    raise UsageError(
        f"{setting('window_end')} {_z(window_end)}: the window ending then {what}; only a closed window can be "
        f"verified (lineage {lineage.name}'s newest closed windows end at {newest})"
    )


def _not_folded(store: MetadataStore, lineage: Lineage, window: WindowRow) -> WindowRow:
    """The window, unless metadata-store retention folded its rows: the manifest no longer lists its files."""
    if any((t.start, t.end) == (window.start, window.end) for t in store.window_totals(lineage.id)):
        raise UsageError(
            f"window [{_z(window.start)}, {_z(window.end)}) of lineage {lineage.name}: its store rows were folded by "
            f"metadata-store retention ({setting('lineage_retention')}), its manifest rows with them; verify a window "
            "closed within the retention"
        )
    return window


def run_verify(
    settings: Settings, *, window_end: datetime | None = None, fraction: float = 1.0, seed: int | None = None
) -> VerifyResult:
    """Compare a closed window's state tables (a `fraction` of their key buckets, drawn with `seed`) with a stale read
    of the source at its end - 1 us, and its change log with a fresh read of the window while the stream keeps it;
    the result is kept with the window (`verify` of its row in the store)."""
    from spanner_cdc.lake.state_table import BUCKETS
    from spanner_cdc.source.client import detect_dialect, open_database, server_now, stream_metadata

    fraction = check_fraction(fraction)
    seed = random.SystemRandom().randrange(1 << 31) if seed is None else seed
    stream, layout = stream_of(settings), layout_of(settings)
    with store_of(settings) as store:
        lineage = _lineage(store, stream, settings.namespace)
        window = closed_window(store, lineage, window_end)
        database = open_database(settings)
        dialect = detect_dialect(database, settings.dialect)
        meta = stream_metadata(database, stream, dialect)
        result = VerifyResult(
            stream, settings.namespace, _z(window.start), _z(window.end), _z(server_now(database)), fraction, seed,
            choose_buckets(fraction, seed, BUCKETS),
        )  # fmt: skip
        policy = _window_policy(settings, layout, window)
        found = _verify_state(settings, layout, database, dialect, window, result, policy)
        result.change_log, changes = _verify_change_log(
            settings, store, lineage, database, dialect, meta, window, result, policy
        )
        result.examples = sorted(found, key=lambda m: (m.table, m.key))[:SHOWN] + changes
        result.examples = result.examples[:SHOWN]
        store.record_verify(lineage.id, window.start, window.end, result.to_json())
    log.info("%s: verify of window [%s, %s): %d rows compared, %d mismatches", stream, result.window_start, result.window_end,
             result.rows_compared, result.mismatches)  # fmt: skip
    return result


def _window_policy(settings: Settings, layout: LakeLayout, window: WindowRow) -> PolicyApplier:
    """The landing policy the window was extracted under (the stream's current one when none is recorded), with its
    key: the source's rows go through it before they are compared with the lake's."""
    from spanner_cdc.lake.window_policy import recorded_policy
    from spanner_cdc.policy import PolicyApplier, resolve_key

    policy = recorded_policy(layout, window.start, window.end) or settings.policy
    return PolicyApplier(policy, resolve_key(policy))


def _verify_state(
    settings: Settings, layout: LakeLayout, database: Any, dialect: str, window: WindowRow, result: VerifyResult,
    policy: PolicyApplier,
) -> list[Mismatch]:  # fmt: skip
    """Each state table's snapshot of the window vs a stale read at its end - 1 us (through the window's landing
    policy), hashed per key in Spark tasks."""
    from spanner_cdc.extract.current_state import _load, known_tables, state_catalog
    from spanner_cdc.lake.iceberg import _dispose
    from spanner_cdc.lake.state_table import snapshot_at
    from spanner_cdc.spark.session import spark_session
    from spanner_cdc.spark.verify_job import run_verify_job

    catalog = state_catalog(settings)
    batch = None
    gone = _versions_gone(database, inclusive_end(window.end))
    try:
        tasks: list[VerifyTask] = []
        for table in known_tables(catalog, layout):
            handle = _load(catalog, layout, table)
            snapshot_id = snapshot_at(handle, window.end) if handle is not None else None
            check = TableCheck(table, snapshot_id)
            result.tables.append(check)
            if gone:
                check.skipped = gone
                continue
            if handle is None or snapshot_id is None:
                check.skipped = (
                    "the table has no snapshot of this window (expired past the kept ones, or never applied)"
                )
                continue
            if batch is None:  # one read-only transaction at end - 1 us for every table
                batch = database.batch_snapshot(read_timestamp=inclusive_end(window.end))
            tasks += _table_tasks(settings, catalog, handle, table, snapshot_id, dialect, batch, result.buckets)
        landing = "" if policy.policy.empty else str(policy.policy)
        compared = run_verify_job(spark_session(settings), tasks, landing, policy.key.hex()) if tasks else {}
    finally:
        if batch is not None:
            batch.close()
        _dispose(catalog)
    found: list[Mismatch] = []
    for check in result.tables:
        if check.skipped:
            continue
        one = compared.get(check.table)
        if one is not None:
            check.lake_rows, check.source_rows, check.mismatches = one.lake_rows, one.source_rows, one.mismatches
            found += [Mismatch("state", check.table, key, problem) for key, problem in one.examples]
    return found


def _versions_gone(database: Any, at: datetime) -> str | None:
    """Why the source cannot be read at `at` any more (None: it can): older than the database's oldest version."""
    database.reload()
    earliest = database.earliest_version_time
    if earliest is None or at >= earliest.astimezone(UTC):
        return None
    return (
        f"the source can no longer be read at {_z(at)}: database {database.database_id} keeps versions back to "
        f"{_z(earliest)} (version_retention_period {database.version_retention_period or '1h'}); verify a window "
        "within it, or raise the database's version_retention_period (ALTER DATABASE ... SET OPTIONS)"
    )


def _table_tasks(
    settings: Settings,
    catalog: Catalog,
    handle: Any,
    table: str,
    snapshot_id: int,
    dialect: str,
    batch: Any,
    buckets: list[int],
) -> list[VerifyTask]:
    """A lake task per chosen bucket (its data files at the snapshot, with their deletes), a source task per partition."""
    from spanner_cdc.extract.current_state import _io_properties
    from spanner_cdc.source.snapshot_tables import WatchedTable
    from spanner_cdc.spark.state_job import Candidate
    from spanner_cdc.spark.verify_job import VerifyTask

    snapshot = handle.snapshot_by_id(snapshot_id)
    schema = handle.metadata.schema_by_id(snapshot.schema_id) or handle.schema()
    keys = [schema.find_field(i).name for i in schema.identifier_field_ids]
    bucketed = bool(handle.spec().fields)
    chosen = buckets if bucketed else None
    io = _io_properties(catalog)
    common = {
        "table": table,
        "metadata_location": handle.metadata_location,
        "io": io,
        "schema_id": schema.schema_id,
        "buckets": chosen,
    }
    candidates: dict[int | None, list[Candidate]] = {}
    for planned in handle.scan(snapshot_id=snapshot_id).plan_files():
        bucket = planned.file.partition[0] if bucketed else None
        candidates.setdefault(bucket, []).append(
            Candidate(planned.file.file_path, sorted(d.file_path for d in planned.delete_files))
        )
    lake_buckets: list[int | None] = list(chosen) if chosen is not None else [None]
    tasks = [VerifyTask("lake", **common, candidates=candidates[b]) for b in lake_buckets if b in candidates]
    columns = tuple(f.name for f in schema.fields if f.name not in keys)
    sql = WatchedTable(table, tuple(keys), columns, ()).select(dialect)
    shared = batch.to_dict()
    reads = settings.read_options
    for part in batch.generate_query_batches(sql, max_partitions=max(2, settings.concurrency), **reads.partition_kwargs()):
        tasks.append(VerifyTask(
            "source", **common, project=str(settings.project), instance=str(settings.instance), database=str(settings.database),
            emulator_host=settings.emulator_host, sql=sql, session_id=shared["session_id"],
            transaction_id=base64.b64encode(shared["transaction_id"]).decode(), partition=base64.b64encode(part["partition"]).decode(),
            read_options=str(reads),
        ))  # fmt: skip
    return tasks


def _verify_change_log(
    settings: Settings, store: MetadataStore, lineage: Lineage, database: Any, dialect: str, meta: Any, window: WindowRow,
    result: VerifyResult, policy: PolicyApplier,
) -> tuple[ChangeLogCheck, list[Mismatch]]:  # fmt: skip
    """The window's change log vs a fresh read of the window from the change stream, by uuid (ids are deterministic),
    the read's records through the window's landing policy (a table left out is compared as absent on both sides)."""
    from spanner_cdc.source.client import format_retention, server_now

    now = server_now(database)
    if window.start < now - meta.retention:
        reason = (f"the window began {_z(window.start)}, before the stream's retention_period "
                  f"({format_retention(meta.retention)}) back from {_z(now)}: the change stream no longer holds it")  # fmt: skip
        return ChangeLogCheck(False, reason), []
    source = _fresh_read(settings, database, dialect, meta, window, policy)
    check = ChangeLogCheck(True, source_rows=len(source))
    lake = _lake_changes(store, lineage, window, check)
    check.lake_rows, check.missing, check.extra, found = compare_changes(source, lake)
    return check, found


def _fresh_read(
    settings: Settings, database: Any, dialect: str, meta: Any, window: WindowRow, policy: PolicyApplier
) -> dict[str, tuple[str, str]]:
    """Every mod committed in the window, read again from every partition of the stream: uuid -> (table, keys JSON),
    through the extract's reader and envelope (so a uuid is the one the extract landed)."""
    from spanner_cdc.extract.planning import effective_start
    from spanner_cdc.lake.envelope import EnvelopeBatcher, EnvelopeContext
    from spanner_cdc.model.records import DataChangeRecord
    from spanner_cdc.source.all_partitions import AllPartitions
    from spanner_cdc.source.reader import PartitionReader

    stream = meta.name
    start = effective_start(stream, meta.created_at, window.start, window.end)
    reader = PartitionReader(
        database, stream, dialect=dialect, heartbeat_ms=settings.heartbeat_ms, request_tag="spanner-cdc-verify",
        read_options=settings.read_options,
    )
    batcher = EnvelopeBatcher(
        EnvelopeContext(stream, "verify", "", window.start, window.end), with_partition_column=False
    )
    out: dict[str, tuple[str, str]] = {}

    def drain() -> None:
        batch = batcher.take()
        if batch is not None:
            columns = (batch.column(n).to_pylist() for n in ("uuid", "object", "keys"))
            out.update((u, (t, k)) for u, t, k in zip(*columns, strict=True))

    for _, record in AllPartitions(reader, start, inclusive_end(window.end), concurrency=settings.concurrency):
        if isinstance(record, DataChangeRecord) and window.start <= record.commit_timestamp < window.end:
            landing = policy.record(record)
            if landing is None:
                continue
            batcher.add(landing)
            if batcher.full:
                drain()
    drain()
    return out


def _lake_changes(
    store: MetadataStore, lineage: Lineage, window: WindowRow, check: ChangeLogCheck
) -> list[tuple[str, str, str]]:
    """(uuid, table, keys JSON) of every landed row committed in the window, from the files the manifest lists that
    overlap it (a token that fell behind lands older commits with a later window's files); a file gone is noted."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from spanner_cdc.lake.columns import TIMESTAMP

    last = inclusive_end(window.end)
    bounds = pa.scalar(window.start, TIMESTAMP), pa.scalar(window.end, TIMESTAMP)
    out: list[tuple[str, str, str]] = []
    for f in store.manifest(lineage.id):
        if f.range_start > last or f.range_end < window.start:
            continue
        if not storage.exists(f.path):
            check.missing_files.append(f.path)
            continue
        with pq.ParquetFile(storage.bare(f.path), filesystem=storage.filesystem(f.path)) as parquet:
            for batch in parquet.iter_batches(
                columns=["uuid", "object", "keys", "commit_timestamp"], batch_size=65_536
            ):
                stamp = batch.column("commit_timestamp")
                keep = pc.and_(pc.greater_equal(stamp, bounds[0]), pc.less(stamp, bounds[1]))
                data = pa.Table.from_batches([batch]).filter(keep)
                out += zip(*(data.column(n).to_pylist() for n in ("uuid", "object", "keys")), strict=True)
    check.missing_files.sort()
    return out
