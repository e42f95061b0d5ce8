"""`spanner-cdc verify`: proof on demand that the lake holds the source, for one closed window."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from spanner_cdc.cli.commands._flags import (
    add_dialect_flag,
    add_metadata_url_flag,
    add_read_flags,
    add_spanner_flags,
    int_or_text,
)

ORDER = 66


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="compare a closed window's state tables and change log with the source; exit 1 on a mismatch",
        description="Compare one closed window of a stream's lineage with the source. Each current-state table's "
        "Iceberg snapshot of the window is compared, key by key (a hash of each row), with a stale read of the "
        "source at the window's end - 1 microsecond (PartitionQuery, a Spark task per partition and per key bucket); "
        "--fraction compares only that share of the 16 key buckets, drawn at random with --seed (printed, so a run "
        "can be repeated). A window older than the database's version_retention_period can no longer be read stale: "
        "its tables are listed as not compared, with the reason. The window's change log is compared by uuid with a "
        "fresh read of the window from the change stream (every partition) while the window is within the stream's "
        "retention_period (past it, that part says it was not compared); a file the manifest lists but the lake lost "
        "is named. The result (rows compared, mismatches with their keys, the first 20 shown, which window) is "
        "printed, kept with the window in the metadata store (/metrics, lake show --json), and the exit status is 1 "
        "when anything differs.",
    )
    parser.add_argument("--stream", help="change stream name, or a stream configured in SPANNER_CDC_CONFIG")
    parser.add_argument("--namespace", help="lineage namespace (default: live)")
    parser.add_argument(
        "--window-end", help="the end of the closed window to verify, RFC 3339 with Z or an offset (default: the newest closed window)"
    )  # fmt: skip
    parser.add_argument(
        "--fraction", default="1", help="share of the key buckets of each state table compared, in (0, 1] (default 1: every row)"
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, help="seed of the buckets drawn for --fraction (default: a random one, printed)"
    )
    parser.add_argument(
        "--output-root",
        help="root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (SPANNER_CDC_OUTPUT_ROOT)",
    )
    parser.add_argument(
        "--iceberg-catalog", help="the catalog of the state tables: store (the metadata store's SQL catalog) or a REST/Hive "
        "catalog URL (SPANNER_CDC_ICEBERG_CATALOG)",
    )  # fmt: skip
    add_spanner_flags(parser)
    add_read_flags(parser)
    add_dialect_flag(parser, "SQL dialect (default: auto)")
    parser.add_argument(
        "--spark-master", help="local[*], spark://host:port, sc://host:port, yarn or k8s://https://host:port (SPANNER_CDC_SPARK_MASTER)"
    )
    parser.add_argument(
        "--concurrency",
        type=int_or_text,
        help="partitions asked per table and partitions read at once, 1..256 (default 4)",
    )
    add_metadata_url_flag(parser)
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON on stdout (the one kept with the window)"
    )
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from spanner_cdc.cli.commands._preflight import check_services
    from spanner_cdc.cli.commands.extract import resolve_settings
    from spanner_cdc.cli.commands.read import parse_timestamp
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.errors import ConfigError
    from spanner_cdc.extract.verify import run_verify
    from spanner_cdc.lake.verify_rows import check_fraction
    from spanner_cdc.spark.session import check_java, live_sessions, stop_sessions

    callers = live_sessions()  # this process's before the command (an in-process caller's): they stay open
    logging.getLogger("py4j").setLevel(logging.WARNING)
    fraction = check_fraction(args.fraction)
    window_end = parse_timestamp(args.window_end, "--window-end") if args.window_end else None
    settings = resolve_settings(args)
    if not settings.stream:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    check_java(settings.spark_master)
    check_services(settings)
    settings = with_dev_store(settings)
    try:
        result = run_verify(settings, window_end=window_end, fraction=fraction, seed=args.seed)
    finally:
        stop_sessions(keep=callers)
    if args.json:
        print(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(result.lines()))
    if result.ok:
        return 0
    print(f"verify: mismatches found ({result.mismatches}) in window [{result.window_start}, {result.window_end}) of "
          f"{result.stream}/{result.namespace}", file=sys.stderr)  # fmt: skip
    return 1
