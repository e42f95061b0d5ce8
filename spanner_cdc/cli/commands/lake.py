"""`spanner-cdc lake show`: the Iceberg change log of a stream, one snapshot per closed window."""

from __future__ import annotations

import argparse
import json
import sys

from spanner_cdc.cli.commands._flags import add_metadata_url_flag

ORDER = 65
FORMATS = ("text", "json")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("lake", help="the lake's Iceberg tables", description=__doc__)
    actions = parser.add_subparsers(dest="lake_action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="list the change log table's snapshots with their windows and counts",
        description="List the snapshots of a stream's Iceberg change log (one per closed window, a re-landed "
        "window's replacement too): when, which window, files and rows added and replaced, rows in the table; "
        "--json also gives each window's completeness record (the one its marker and asset event carry).",
    )
    show.add_argument("--stream", help="change stream name (default: SPANNER_CDC_STREAM)")
    show.add_argument("--namespace", help="lineage namespace: live, or a backfill run's (default: live)")
    show.add_argument("--output-root", help="root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (SPANNER_CDC_OUTPUT_ROOT)")
    show.add_argument(
        "--iceberg-catalog", help="store (the metadata store's SQL catalog, the default here) or a REST/Hive catalog URL "
        "(SPANNER_CDC_ICEBERG_CATALOG)",
    )  # fmt: skip
    show.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    show.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    add_metadata_url_flag(show)
    show.set_defaults(func=run_show)


def run_show(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.errors import ConfigError
    from spanner_cdc.lake.iceberg import table_snapshots
    from spanner_cdc.settings import load_settings

    settings = load_settings(vars(args))
    if settings.stream is None:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    if settings.iceberg_catalog == "off":  # showing needs a catalog: the store's unless another is named
        settings = replace(settings, iceberg_catalog="store")
    shown = table_snapshots(with_dev_store(settings) if settings.iceberg_catalog == "store" else settings)
    if args.format == "json":
        sys.stdout.write(json.dumps(shown, indent=1) + "\n")
        return 0
    print(f"table {shown['table']}  metadata {shown['metadata_location']}")
    print(f"{'snapshot':>20}  {'committed at':25}  {'window':47}  {'operation':9}  {'files +/-':>9}  {'rows +/-':>13}  {'total rows':>10}")
    for r in shown["snapshots"]:
        window = f"[{r['window_start']}, {r['window_end']})" if r["window_start"] else "-"
        mark = " *" if r["current"] else ""
        print(f"{r['snapshot_id']:>20}  {r['committed_at'][:25]:25}  {window:47}  {r['operation'] or '-':9}  "
              f"{r['added_files']:>4}/{r['removed_files']:<4}  {r['added_rows']:>6}/{r['removed_rows']:<6}  {r['total_rows']:>10}{mark}")  # fmt: skip
    return 0
