"""`spanner-cdc lake show|maintain`: the Iceberg tables of a stream (change log, current-state tables), a snapshot per
window, and the change log's upkeep."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spanner_cdc.cli.commands._flags import add_home_flag, add_metadata_url_flag

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings

ORDER = 65
FORMATS = ("text", "json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("lake", help="the lake's Iceberg tables", description=__doc__)
    actions = parser.add_subparsers(dest="lake_action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="list the stream's Iceberg tables and their snapshots with their windows and counts",
        description="List the snapshots of a stream's Iceberg change log (one per closed window, a re-landed "
        "window's replacement too): when, which window, files and rows added and replaced, rows in the table; "
        "then each current-state table's (its seed from the initial snapshot, one per window). With --json: the "
        "change log's fields, each window's completeness record (the one its marker and asset event carry), and "
        "`tables`: every table with its identifier, kind (change_log or current_state), source_table and snapshots (a "
        "window's with the same completeness record, which its Iceberg summary carries); a "
        "window that `spanner-cdc verify` checked has its last result under `verify` beside its completeness record.",
    )
    _lineage_flags(show)
    show.add_argument(
        "--iceberg-catalog", help="store (the metadata store's SQL catalog, the default; off reads it too) or a REST/Hive catalog URL "
        "(SPANNER_CDC_ICEBERG_CATALOG)",
    )  # fmt: skip
    show.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    show.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    add_metadata_url_flag(show)
    add_home_flag(show)
    show.set_defaults(func=run_show)
    maintain = actions.add_parser(
        "maintain",
        help="compact closed windows' small files, expire old snapshots, remove files nothing lists",
        description="Maintain one lineage's change log: each closed window's files of a table rewritten into files "
        "near --target-file-size (one Iceberg replace snapshot each, then the window's next marker generation, then "
        "the manifest), snapshots older than --snapshot-retention expired (never the current one), and data files no "
        "manifest row, live snapshot or marker lists removed once older than --orphan-min-age, as are the change "
        "log's Iceberg files (metadata, manifest lists, manifests) that no live snapshot or metadata log needs. Each "
        "step is idempotent and safe to kill; a re-run finishes the work. Compaction and expiry need the Iceberg "
        "catalog. Then metadata-store retention: the partitions, attempts and manifest rows of windows closed longer "
        "than --lineage-retention ago are folded into per-window totals and deleted, one transaction per window (the "
        "windows' rows, the open frontier and every open window stay; the files stay listed by their markers and "
        "snapshots). Last, the current-state tables' position-delete files are folded into their data files (Spark "
        "starts only for a table that has any), and their Iceberg files (metadata, manifests, data and delete files) "
        "that no live snapshot or metadata log needs are removed once older than --orphan-min-age.",
    )
    _lineage_flags(maintain)
    maintain.add_argument("--iceberg-catalog", help="store (default), off, or a REST/Hive catalog URL (SPANNER_CDC_ICEBERG_CATALOG)")
    maintain.add_argument("--target-file-size", help="size compaction aims at, such as 256MB (SPANNER_CDC_TARGET_FILE_SIZE, default 256MB)")
    maintain.add_argument("--snapshot-retention", help="expire snapshots older than this, such as 7d (SPANNER_CDC_SNAPSHOT_RETENTION, default 7d)")
    maintain.add_argument("--orphan-min-age", help="remove unlisted files only once older than this, such as 24h (SPANNER_CDC_ORPHAN_MIN_AGE, default 24h)")
    maintain.add_argument("--lineage-retention", help="fold the store's rows of windows closed longer ago than this, such as 30d (SPANNER_CDC_LINEAGE_RETENTION, default 30d)")
    maintain.add_argument("--json", action="store_true", help="print what was done as JSON")
    add_metadata_url_flag(maintain)
    add_home_flag(maintain)
    maintain.set_defaults(func=run_maintain)


def run_show(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.errors import ConfigError, NotFound
    from spanner_cdc.lake.iceberg import table_snapshots
    from spanner_cdc.settings import load_settings

    settings = load_settings(vars(args))
    if settings.stream is None:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    if settings.iceberg_catalog == "off":  # showing needs a catalog: the store's unless another is named
        settings = replace(settings, iceberg_catalog="store")
    settings = with_dev_store(settings) if settings.iceberg_catalog == "store" else settings
    tables = _tables(settings)
    try:
        shown = table_snapshots(settings)
    except NotFound:
        if not tables:
            raise
        shown = {}  # no change log in the catalog (iceberg_catalog off while extracting), current-state tables only
    verified = _verified(settings)
    for snap in [*shown.get("snapshots", []), *(s for t in tables for s in t["snapshots"])]:
        if snap.get("window_start") and snap.get("window_end"):
            result = verified.get(datetime.fromisoformat(snap["window_end"]))
            if result is not None:
                snap["verify"] = result  # beside the completeness record, not in it: a verify comes later
    if args.format == "json":
        sys.stdout.write(json.dumps({**shown, "tables": tables}, indent=1) + "\n")
        return 0
    if shown:
        _print_changelog(shown)
    for table in tables:
        if table["kind"] == "current_state":
            print(f"\ncurrent state of {table['source_table']}: table {'.'.join(table['identifier'])}")
            for r in table["snapshots"]:
                window = f"[{r['window_start']}, {r['window_end']})" if r["window_start"] else f"seed at {r['window_end']}"
                print(f"{r['snapshot_id']:>20}  {window:58}  rows +{r['rows_added']}/-{r['rows_removed']}")
    for end in sorted(verified):
        result = verified[end]
        verdict = "clean" if result.get("ok") else f"{result.get('mismatches')} mismatches"
        print(f"\nverify of window [{result.get('window_start')}, {result.get('window_end')}) at {result.get('verified_at')}: "
              f"{verdict}, {result.get('rows_compared')} rows compared")  # fmt: skip
    return 0


def _verified(settings: Settings) -> dict[datetime, dict[str, Any]]:
    """Window end -> the last `spanner-cdc verify` result kept with that closed window; none when the store holds no
    lineage of the stream, or no schema of this release (a catalog's tables are shown all the same: showing reads)."""
    from spanner_cdc.errors import NotFound, SchemaOutdated
    from spanner_cdc.extract.inputs import store_of, stream_of

    try:
        with store_of(settings) as store:
            lineage = store.get_lineage(stream_of(settings), settings.namespace)
            return {w.end: dict(w.verify) for w in store.windows(lineage.id) if w.verify}
    except (NotFound, SchemaOutdated):
        return {}


def _tables(settings: Settings) -> list[dict[str, Any]]:
    from spanner_cdc.extract.inputs import layout_of
    from spanner_cdc.lake.iceberg import _dispose, catalog_properties, open_catalog
    from spanner_cdc.lake.state_table import stream_tables

    catalog = open_catalog(catalog_properties(settings.iceberg_catalog, metadata_url=settings.metadata_url, warehouse=str(settings.output_root)))
    try:
        return stream_tables(catalog, layout_of(settings))
    finally:
        _dispose(catalog)


def _print_changelog(shown: dict[str, Any]) -> None:
    print(f"table {shown['table']}  metadata {shown['metadata_location']}")
    print(f"{'snapshot':>20}  {'committed at':25}  {'window':47}  {'operation':9}  {'files +/-':>9}  {'rows +/-':>13}  {'total rows':>10}")
    for r in shown["snapshots"]:
        window = f"[{r['window_start']}, {r['window_end']})" if r["window_start"] else "-"
        mark = " *" if r["current"] else ""
        print(f"{r['snapshot_id']:>20}  {r['committed_at'][:25]:25}  {window:47}  {r['operation'] or '-':9}  "
              f"{r['added_files']:>4}/{r['removed_files']:<4}  {r['added_rows']:>6}/{r['removed_rows']:<6}  {r['total_rows']:>10}{mark}")  # fmt: skip


def run_maintain(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.errors import ConfigError
    from spanner_cdc.extract.maintain import maintain
    from spanner_cdc.settings import load_settings

    settings = load_settings(vars(args))
    if settings.stream is None:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    summary = maintain(with_dev_store(settings))
    if args.json:
        sys.stdout.write(json.dumps(summary.to_json(), indent=1) + "\n")
        return 0
    print(f"{summary.stream} {summary.namespace}: {summary.windows_compacted} window(s) compacted "
          f"({summary.files_before} -> {summary.files_after} files), {summary.snapshots_expired} snapshot(s) expired, "
          f"{len(summary.orphans_removed)} orphan(s) removed, {len(summary.metadata_removed)} Iceberg metadata file(s) "
          f"removed, {summary.windows_folded} window(s) folded in the store "
          f"({summary.partitions_deleted} partitions, {summary.attempts_deleted} attempts, {summary.manifest_rows_deleted} "
          f"manifest rows deleted) in {summary.elapsed_s:.1f} s")  # fmt: skip
    return 0


def _lineage_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that name one lineage's lake: its stream, namespace and root."""
    parser.add_argument("--stream", help="change stream name (default: SPANNER_CDC_STREAM)")
    parser.add_argument("--namespace", help="lineage namespace: live, or a backfill run's (default: live)")
    parser.add_argument("--output-root", help="root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (SPANNER_CDC_OUTPUT_ROOT)")
