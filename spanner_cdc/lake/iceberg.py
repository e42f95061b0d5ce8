"""The lake as Apache Iceberg tables: the catalog, a table per stream and namespace, one snapshot per closed window."""

from __future__ import annotations

import importlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spanner_cdc.lake.columns import LAKE_SCHEMA
from spanner_cdc.lake.completeness import record_from_summary, summary_properties
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.storage import join, scheme_of
from spanner_cdc.store.models import ManifestFile

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from spanner_cdc.settings import Settings

log = logging.getLogger(__name__)

CATALOG_NAME = "spanner_cdc"
# The table's metadata lives under the lineage's root, in a directory readers of the plain files skip.
ICEBERG_DIR = "_iceberg"
WINDOW_START = "spanner-cdc.window-start"
WINDOW_END = "spanner-cdc.window-end"
# Declared in every change-log table: engines prune by table and hour, and read in commit order.
PARTITION = (("object", "identity", "table_name"), ("window_start", "hour", "window_hour"))
SORT_KEYS = ("commit_timestamp", "server_transaction_id", "record_sequence", "mod_index")
COMMIT_ATTEMPTS = 8
# Every table the lake keeps (change log, state tables): at each commit, Iceberg deletes the metadata.json files that
# fall out of the table's metadata log past this many previous versions (without them, one file per commit, forever).
METADATA_VERSIONS = 20
DEFAULT_S3_REGION = "us-east-1"  # an S3-compatible store's region when the environment names none (MinIO's default)
METADATA_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_VERSIONS),
}


def catalog_properties(catalog: str, *, metadata_url: str | None, warehouse: str) -> dict[str, str]:
    """pyiceberg's catalog properties for the setting, with the lake's own object store endpoints."""
    if catalog == "store":
        from spanner_cdc.store.url import normalise_url, require_metadata_url

        props = {"type": "sql", "uri": normalise_url(require_metadata_url(metadata_url))}
    elif catalog.startswith("thrift://"):
        props = {"type": "hive", "uri": catalog}
    else:
        props = {"type": "rest", "uri": catalog}
    props["warehouse"] = warehouse if scheme_of(warehouse) else "file://" + os.path.abspath(warehouse)
    if os.environ.get("AWS_ENDPOINT_URL"):  # the same S3 endpoint as lake/storage.py's s3fs
        props["s3.endpoint"] = os.environ["AWS_ENDPOINT_URL"]
        # and its region as botocore reads it: without one pyiceberg asks AWS itself where a bucket of that name is
        # (another owner's bucket, or ~6 s of retries offline), once per process, for a store that is not AWS
        props["s3.region"] = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_S3_REGION
    if os.environ.get("STORAGE_EMULATOR_HOST"):  # and the same GCS endpoint, without credentials
        props["gcs.service.host"] = os.environ["STORAGE_EMULATOR_HOST"]
        props["gcs.oauth2.token"] = "anonymous"  # the emulator checks no token; pyarrow wants one with an expiry
        props["gcs.oauth2.token-expires-at"] = str(int((time.time() + 86_400) * 1000))
    return props


# What committing a window imports (~0.8 s of CPU here), on the close's path after the last wave: `import_ahead`
# imports it while the extract's driver waits for its JVM, or else (a Connect session, a driver already up) once the
# first group of the waves has ended and others still run (`extract/wave.wait_for_groups`), once per process.
CLOSE_MODULES = (
    "pyiceberg.catalog", "pyiceberg.exceptions", "pyiceberg.expressions", "pyiceberg.io.pyarrow", "pyiceberg.table",
    "pyiceberg.table.snapshots", "pyiceberg.table.update.snapshot", "pyiceberg.transforms",
)  # fmt: skip
_imported_ahead = False


def import_ahead(settings: Settings) -> None:
    """The close's Iceberg modules imported now, when windows are committed to Iceberg and this process has not yet:
    called while the driver's JVM starts or while the waves' last groups run, when the run's own thread has nothing
    else to do. A failure is left to the close, which
    imports what it needs itself and says why it fails."""
    global _imported_ahead
    if settings.iceberg_catalog == "off" or _imported_ahead:
        return
    _imported_ahead = True
    for name in [*CLOSE_MODULES, "pyiceberg.catalog.sql"] if settings.iceberg_catalog == "store" else CLOSE_MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the close imports it again
            log.debug("iceberg: importing %s ahead failed: %s", name, exc)


def open_catalog(properties: dict[str, str]) -> Catalog:
    from pyiceberg.catalog import load_catalog

    return load_catalog(CATALOG_NAME, **properties)


def absolute(location: str) -> str:
    """A data file's location as Iceberg keeps it: a bucket URL as is, a local path absolute."""
    return location if scheme_of(location) else os.path.abspath(location)


def ensure_table(
    catalog: Catalog, identifier: tuple[str, str], schema: pa.Schema, *, location: str,
    partition: Sequence[tuple[str, str, str]] = (), sort_keys: Sequence[str] = (),
) -> Table:  # fmt: skip
    """The table, created with its partition spec and sort order if missing, its schema evolved to `schema`.

    Reusable for any table the lake keeps (the change log here; current-state tables too): columns are
    matched by name, so files written without Iceberg field ids are added as they are.
    """
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    catalog.create_namespace_if_not_exists(identifier[0])
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            table = _create(catalog, identifier, schema, location=location, partition=partition, sort_keys=sort_keys)
        except TableAlreadyExistsError:  # another closer created it first
            table = catalog.load_table(identifier)
    return evolve(table, schema)


def _create(
    catalog: Catalog, identifier: tuple[str, str], schema: pa.Schema, *, location: str,
    partition: Sequence[tuple[str, str, str]], sort_keys: Sequence[str],
) -> Table:  # fmt: skip
    from pyiceberg.table import TableProperties
    from pyiceberg.transforms import IdentityTransform, parse_transform

    with catalog.create_table_transaction(identifier, schema=schema, location=location) as tx:
        # add_files reads columns by name: the mapping is set once here and follows schema changes
        tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json(),
                           **METADATA_PROPERTIES})  # fmt: skip
        if partition:
            with tx.update_spec() as spec:
                for column, transform, name in partition:
                    spec.add_field(column, parse_transform(transform), name)
        if sort_keys:
            with tx.update_sort_order() as order:
                for column in sort_keys:
                    order.asc(column, IdentityTransform())
    log.info("created Iceberg table %s at %s", ".".join(identifier), location)
    return catalog.load_table(identifier)


def evolve(table: Table, schema: pa.Schema) -> Table:
    """Add the fields of `schema` the table lacks (a later release's envelope): old files read them as null."""
    known = {field.name for field in table.schema().fields}
    if all(name in known for name in schema.names):
        return table
    with table.update_schema() as update:
        update.union_by_name(schema)
    log.info("Iceberg table %s: schema evolved, added %s", table.name(), [n for n in schema.names if n not in known])
    return table


@dataclass(frozen=True)
class WindowCommit:
    """What committing a window did: the snapshot (None when the table already held exactly its files)."""

    snapshot_id: int | None
    added: int
    removed: int
    seconds: float


def changelog_table(catalog: Catalog, layout: LakeLayout) -> Table:
    """The lineage's change log: `<namespace>.<stream>`, its metadata under `<lineage root>/_iceberg/`."""
    return ensure_table(
        catalog, (layout.namespace, layout.stream), LAKE_SCHEMA, location=join(_absolute_root(layout), ICEBERG_DIR),
        partition=PARTITION, sort_keys=SORT_KEYS,
    )  # fmt: skip


def _absolute_root(layout: LakeLayout) -> str:
    return layout.location if layout.is_url else os.path.abspath(layout.location)


def commit_window(
    table: Table, *, window_start: datetime, window_end: datetime, files: Sequence[ManifestFile],
    completeness: Mapping[str, Any] | None = None,
) -> WindowCommit:  # fmt: skip
    """Make the table hold exactly the window's manifest files, in one snapshot naming the window and carrying
    its completeness record (`lake/completeness.py`).

    A re-run that finds them (same paths, rows and sizes) commits nothing; a re-landed window's files
    replace the ones the table had for it in the same snapshot, so a reader sees the old window or the new.
    A window without changes gets a snapshot that adds nothing, once: its completeness record is published too.
    """
    from pyiceberg.expressions import EqualTo

    start, end = window_start.astimezone(UTC).isoformat(), window_end.astimezone(UTC).isoformat()
    properties = {WINDOW_START: start, WINDOW_END: end, **(summary_properties(completeness) if completeness else {})}
    return replace_files(
        table, {f.path: (f.rows, f.bytes) for f in files},
        EqualTo("window_start", start),  # type: ignore[call-arg, arg-type]
        properties, empty_once=(WINDOW_START, start),
    )  # fmt: skip


def replace_files(
    table: Table, wanted: dict[str, tuple[int, int]], selection: Any, properties: dict[str, str],
    empty_once: tuple[str, str] | None = None,
) -> WindowCommit:  # fmt: skip
    """Make the data files matching `selection` (a pyiceberg row filter) exactly `wanted` ({path: (rows, bytes)}),
    in one snapshot with `properties` in its summary, or in none when they already are (any table of the lake).

    With `empty_once` = (summary key, value) and nothing wanted, a snapshot that changes no file is committed
    unless one whose summary has that value exists (a window without changes still gets its snapshot)."""
    started = time.monotonic()
    wanted = {absolute(path): size for path, size in wanted.items()}

    def attempt() -> WindowCommit:
        table.refresh()
        held = [task.file for task in table.scan(row_filter=selection).plan_files()] if table.current_snapshot() else []
        if {f.file_path: (f.record_count, f.file_size_in_bytes) for f in held} == wanted:
            if not wanted and empty_once is not None and not _has_snapshot(table, *empty_once):
                return _replace(table, [], [], properties, started)
            return WindowCommit(None, 0, 0, time.monotonic() - started)
        return _replace(table, held, sorted(wanted), properties, started)

    return _retrying(attempt)


def _replace(table: Table, held: list[Any], paths: list[str], properties: dict[str, str], started: float) -> WindowCommit:
    with table.transaction() as tx:
        data_files = data_files_of(tx.table_metadata, paths, table.io)
        update = tx.update_snapshot(snapshot_properties=properties)
        # a first commit only appends: a new manifest, without reading the table's existing ones
        with update.overwrite() if held else update.fast_append() as snapshot:
            _swap(snapshot, held, data_files)
    return _committed(table, data_files, held, started)


def _swap(snapshot: Any, held: list[Any], data_files: list[Any]) -> None:
    for old in held:
        snapshot.delete_data_file(old)
    for new in data_files:
        snapshot.append_data_file(new)


def _committed(table: Table, data_files: list[Any], held: list[Any], started: float) -> WindowCommit:
    current = table.current_snapshot()
    return WindowCommit(current.snapshot_id if current else None, len(data_files), len(held), time.monotonic() - started)


def _has_snapshot(table: Table, key: str, value: str) -> bool:
    return any(snap.summary is not None and snap.summary.additional_properties.get(key) == value for snap in table.snapshots())


def _retrying(attempt: Callable[[], WindowCommit]) -> WindowCommit:
    """Closers of other windows commit to the same table: a lost race re-reads the table and tries again."""
    from pyiceberg.exceptions import CommitFailedException

    for n in range(COMMIT_ATTEMPTS):
        try:
            return attempt()
        except CommitFailedException:
            if n == COMMIT_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (n + 1))  # back off a little before reading the new metadata
    raise AssertionError("unreachable")


def window_snapshots(table: Table) -> list[dict[str, Any]]:
    """The table's snapshots, oldest first, each with the window it committed and its counts."""
    current = table.current_snapshot()
    rows = []
    for snap in table.snapshots():
        summary = snap.summary.additional_properties if snap.summary else {}
        rows.append({
            "snapshot_id": snap.snapshot_id,
            "committed_at": datetime.fromtimestamp(snap.timestamp_ms / 1000, UTC).isoformat(),
            "operation": str(snap.summary.operation.value) if snap.summary else None,
            "window_start": summary.get(WINDOW_START),
            "window_end": summary.get(WINDOW_END),
            "added_files": int(summary.get("added-data-files", 0)),
            "removed_files": int(summary.get("deleted-data-files", 0)),
            "added_rows": int(summary.get("added-records", 0)),
            "removed_rows": int(summary.get("deleted-records", 0)),
            "total_rows": int(summary.get("total-records", 0)),
            "current": current is not None and snap.snapshot_id == current.snapshot_id,
            "completeness": record_from_summary(summary),
        })  # fmt: skip
    return rows


def land_window(
    settings: Settings, layout: LakeLayout, *, window_start: datetime, window_end: datetime, files: Sequence[ManifestFile],
    completeness: Mapping[str, Any] | None = None,
) -> WindowCommit | None:  # fmt: skip
    """Closing a window with `iceberg_catalog` set: its manifest files committed to the change log (None when off)."""
    if settings.iceberg_catalog == "off":
        return None
    catalog = open_catalog(
        catalog_properties(settings.iceberg_catalog, metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    )
    try:
        done = commit_window(
            changelog_table(catalog, layout), window_start=window_start, window_end=window_end, files=files,
            completeness=completeness,
        )  # fmt: skip
    finally:
        _dispose(catalog)
    log.info(
        "%s: window [%s, %s) %s", layout.stream, window_start.isoformat(), window_end.isoformat(),
        f"committed to Iceberg as snapshot {done.snapshot_id} ({done.added} files, {done.removed} replaced, {done.seconds:.3f} s)"
        if done.snapshot_id else "already in the Iceberg table",
    )  # fmt: skip
    return done


def table_snapshots(settings: Settings) -> dict[str, Any]:
    """`lake show`: the stream's change log (its name, current metadata file, snapshots); NotFound (one line) when
    it has none yet."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from spanner_cdc.errors import NotFound

    stream = settings.stream or ""
    catalog = open_catalog(
        catalog_properties(settings.iceberg_catalog, metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    )
    try:
        table = catalog.load_table((settings.namespace, stream))
    except (NoSuchTableError, NoSuchNamespaceError):
        raise NotFound(
            f"no Iceberg table {settings.namespace}.{stream} in the catalog: it is created when a window of the stream "
            "closes with iceberg_catalog set (SPANNER_CDC_ICEBERG_CATALOG=store)"
        ) from None
    finally:
        _dispose(catalog)
    return {"table": f"{settings.namespace}.{stream}", "metadata_location": table.metadata_location, "snapshots": window_snapshots(table)}


def _dispose(catalog: Catalog) -> None:
    """Close the SQL catalog's connections: one process may close many windows."""
    engine = getattr(catalog, "engine", None)
    if engine is not None:
        engine.dispose()


# Maintenance (`spanner-cdc lake maintain`): compaction's snapshot, snapshot expiry, the files live snapshots hold.
COMPACTED = "spanner-cdc.compacted"


def open_changelog(settings: Settings, layout: LakeLayout) -> tuple[Catalog, Table] | None:
    """The lineage's change log, for maintenance (None with iceberg_catalog off, or before its first window)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    if settings.iceberg_catalog == "off":
        return None
    catalog = open_catalog(
        catalog_properties(settings.iceberg_catalog, metadata_url=settings.metadata_url, warehouse=str(settings.output_root))
    )
    try:
        return catalog, catalog.load_table((layout.namespace, layout.stream))
    except (NoSuchTableError, NoSuchNamespaceError):
        _dispose(catalog)
        return None


def close_catalog(catalog: Catalog) -> None:
    _dispose(catalog)


def commit_compaction(
    table: Table, *, window_start: datetime, window_end: datetime, table_name: str, old: Sequence[str],
    new: Sequence[ManifestFile],
) -> WindowCommit:  # fmt: skip
    """One `replace` snapshot in which the window's `old` files of one table become the `new` ones holding the same
    rows. Nothing when the table already holds `new` there (a re-run); nothing either when it does not hold `old`
    (a window committed before Iceberg was on: its files are not the table's to replace)."""
    from pyiceberg.expressions import And, EqualTo

    start, end = window_start.astimezone(UTC).isoformat(), window_end.astimezone(UTC).isoformat()
    selection = And(EqualTo("window_start", start), EqualTo("object", table_name))  # type: ignore[call-arg, arg-type]
    started = time.monotonic()
    wanted = {absolute(f.path): (f.rows, f.bytes) for f in new}
    retired = {absolute(p) for p in old}

    def attempt() -> WindowCommit:
        table.refresh()
        held = [task.file for task in table.scan(row_filter=selection).plan_files()] if table.current_snapshot() else []
        paths = {f.file_path for f in held}
        if {f.file_path: (f.record_count, f.file_size_in_bytes) for f in held} == wanted or not paths & retired:
            return WindowCommit(None, 0, 0, time.monotonic() - started)
        return _compact(table, [f for f in held if f.file_path in retired], sorted(wanted),
                        {WINDOW_START: start, WINDOW_END: end, COMPACTED: table_name}, started)  # fmt: skip

    return _retrying(attempt)


def _compact(table: Table, held: list[Any], paths: list[str], properties: dict[str, str], started: float) -> WindowCommit:
    from pyiceberg.table.snapshots import Operation

    from spanner_cdc.compat.pyiceberg import replace_producer

    with table.transaction() as tx:
        data_files = data_files_of(tx.table_metadata, paths, table.io)
        with replace_producer()(operation=Operation.OVERWRITE, transaction=tx, io=table.io, snapshot_properties=properties) as snapshot:
            _swap(snapshot, held, data_files)
    return _committed(table, data_files, held, started)


def data_files_of(metadata: Any, paths: Sequence[str], io: Any) -> list[Any]:
    """The DataFiles of Parquet files (their footers read in parallel), with pyiceberg's public converter."""
    from concurrent.futures import ThreadPoolExecutor

    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    if len(paths) < 2:
        return [parquet_file_to_data_file(io, metadata, path) for path in paths]
    with ThreadPoolExecutor(max_workers=min(8, len(paths))) as pool:
        return list(pool.map(lambda path: parquet_file_to_data_file(io, metadata, path), paths))


def expire_snapshots(table: Table, older_than: datetime) -> int:
    """Expire the snapshots superseded before `older_than`: measured from when the next one was committed, not from
    their own commit, so a reader that planned on a snapshot a moment before it stopped being current has the whole
    retention to read its files. The current snapshot stays. Returns how many were expired."""
    cutoff_ms = int(older_than.timestamp() * 1000)
    table.refresh()
    log_ = sorted(table.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    old = [s.snapshot_id for s, successor in zip(log_, log_[1:], strict=False) if successor.timestamp_ms < cutoff_ms]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()
    return len(old)


def live_files(table: Table) -> set[str]:
    """Every data file a live snapshot of the table holds (as Iceberg names it)."""
    table.refresh()
    if table.current_snapshot() is None:
        return set()
    return set(table.inspect.all_data_files().column("file_path").to_pylist())


def bound_metadata_log(table: Table) -> bool:
    """METADATA_PROPERTIES set on a table made before them (one property update, on the next maintenance); True when
    they are set. A commit that lost a race leaves them for the next run (a state table's commits are not retried)."""
    from pyiceberg.exceptions import CommitFailedException

    table.refresh()
    if all(table.properties.get(k) == v for k, v in METADATA_PROPERTIES.items()):
        return True
    try:
        with table.transaction() as tx:
            tx.set_properties(METADATA_PROPERTIES)
    except CommitFailedException as exc:
        log.warning("Iceberg table %s: metadata log bound not set this time (%s)", table.name(), exc)
        return False
    log.info("Iceberg table %s: set %s", table.name(), METADATA_PROPERTIES)
    return True


def needed_files(table: Table) -> set[str]:
    """Every file the table's current metadata needs, from one read of it: the metadata file itself and those of its
    log, statistics files, and for every live snapshot its manifest list, its manifests and the data and delete files
    they name (a deleted entry too: conservative), as Iceberg names them."""
    table.refresh()
    metadata = table.metadata
    out = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    out |= {s.statistics_path for s in metadata.statistics} | {s.statistics_path for s in metadata.partition_statistics}
    read: set[str] = set()
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in read:  # a manifest is shared by the snapshots after it: read once
                continue
            read.add(manifest.manifest_path)
            out.add(manifest.manifest_path)
            out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return out
