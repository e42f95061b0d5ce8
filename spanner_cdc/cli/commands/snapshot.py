"""`spanner-cdc snapshot`: a lineage's initial snapshot, every watched table read at one timestamp T0, into the lake (the
command of extract/snapshot.py)."""

from __future__ import annotations

import argparse
import json
import logging

from spanner_cdc.cli.commands._flags import (
    add_dialect_flag,
    add_home_flag,
    add_metadata_url_flag,
    add_read_flags,
    add_spanner_flags,
    int_or_text,
)
from spanner_cdc.cli.commands._policy_flags import add_policy_flags

ORDER = 41


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "snapshot",
        help="read every table the stream watches at one timestamp T0 into the lake (the lineage's initial snapshot)",
        description="Read the watched columns of every table the change stream watches with a stale read at exactly T0, "
        "one Spark task per PartitionQuery partition, into <output root>/<stream>/<namespace>/snapshot/ "
        "(read_method spanner-snapshot, change_type INSERT, deterministic ids) with its marker snapshot/_snapshot.json. "
        "The lineage's change extraction then starts right after T0. A re-run finishes an interrupted snapshot at the "
        "same T0 (tables committed before are not read again) and does nothing once it is complete.",
    )
    parser.add_argument("--stream", help="change stream name, or a stream configured in SPANNER_CDC_CONFIG")
    parser.add_argument(
        "--at", help="T0, RFC 3339 with Z or an offset, within the database's version_retention_period "
        "(default: now; for a lineage that already extracts changes, just before its first change)"
    )  # fmt: skip
    parser.add_argument("--namespace", help="lineage namespace (default: live)")
    parser.add_argument("--output-root", help="root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (SPANNER_CDC_OUTPUT_ROOT)")
    add_spanner_flags(parser)
    add_dialect_flag(parser, "SQL dialect (default: auto)")
    parser.add_argument("--spark-master", help="local[*], spark://host:port, sc://host:port, yarn or k8s://https://host:port (SPANNER_CDC_SPARK_MASTER)")
    parser.add_argument("--concurrency", type=int_or_text, help="partitions asked per table, 1..256 (default 4; at least 2)")
    add_metadata_url_flag(parser)
    add_home_flag(parser)
    parser.add_argument("--json", action="store_true", help="print the snapshot's summary as JSON on stdout (`at` is T0)")
    add_policy_flags(parser)
    add_read_flags(parser)
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from spanner_cdc.cli.commands._preflight import check_services, require_stream
    from spanner_cdc.cli.commands.extract import resolve_settings
    from spanner_cdc.cli.commands.read import parse_timestamp
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.extract.snapshot import run_snapshot
    from spanner_cdc.lake.layout import check_output_root
    from spanner_cdc.spark.session import check_java, live_sessions, stop_sessions

    callers = live_sessions()  # this process's before the command (an in-process caller's): they stay open
    logging.getLogger("py4j").setLevel(logging.WARNING)
    settings = resolve_settings(args)
    at = parse_timestamp(args.at, "--at") if args.at else None
    require_stream(settings)
    check_output_root(settings.output_root)
    check_java(settings.spark_master)
    check_services(settings)
    settings = with_dev_store(settings)
    try:
        summary = run_snapshot(settings, at=at)
    finally:
        stop_sessions(keep=callers)
    if args.json:
        print(json.dumps(summary.to_json(), indent=2, sort_keys=True))
    else:
        print(
            f"{summary.stream}/{summary.namespace} snapshot at {summary.to_json()['at']}: {summary.rows} rows of "
            f"{len(summary.tables)} tables in {summary.files} files ({len(summary.read_now)} tables read now); "
            f"marker {summary.marker_path}; changes from {summary.to_json()['changes_from']}"
        )
    return 0
