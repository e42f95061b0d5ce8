"""`spanner-cdc extract`: extract one window of a change stream end to end (the code the DAG runs), without a scheduler."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

from spanner_cdc.cli.commands._flags import (
    add_dialect_flag,
    add_home_flag,
    add_metadata_url_flag,
    add_read_flags,
    add_spanner_flags,
    add_tuning_flags,
    int_or_text,
)
from spanner_cdc.cli.commands._policy_flags import add_policy_flags, policy_from_flags
from spanner_cdc.names import READ_METHODS

if TYPE_CHECKING:
    from spanner_cdc.extract.window import Progress, WindowSummary
    from spanner_cdc.settings import Settings

ORDER = 40


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "extract",
        help="extract one window [start, end) of a change stream into the lake",
        description="Bootstrap the stream's lineage if new, finish first any earlier window of the lineage that was "
        "left open, then read every ready partition token over the window in waves (children born in the window in "
        "the next wave; a wave's tokens go in --concurrency groups of at most --wave-group-tokens, one Spark job and "
        "one store commit each), land Parquet, commit checkpoints, and close the window (transaction check, _windows/ "
        "marker, the Iceberg snapshot) when every partition is done with it. Flags, settings, the window and the "
        "services it reaches are checked before anything starts; a --window-end Spanner's clock has not reached is "
        "refused (or, with --wait, waited for).",
    )
    parser.add_argument("--stream", help="change stream name, or a stream configured in SPANNER_CDC_CONFIG")
    parser.add_argument("--window-start", required=True, help="window start (inclusive), RFC 3339 with Z or an offset")
    parser.add_argument("--window-end", required=True, help="window end (exclusive), RFC 3339 with Z or an offset")
    parser.add_argument("--namespace", help="lineage namespace (default: live)")
    parser.add_argument("--output-root", help="root of the data lake: a path, gs://bucket/prefix or s3://bucket/prefix (SPANNER_CDC_OUTPUT_ROOT)")
    parser.add_argument(
        "--iceberg-catalog", help="commit each closed window to the stream's Iceberg table: store (default: a SQL "
        "catalog in the metadata store), off, or a REST/Hive catalog URL (SPANNER_CDC_ICEBERG_CATALOG)",
    )  # fmt: skip
    add_spanner_flags(parser)
    add_dialect_flag(parser, "SQL dialect (default: auto)")
    # a bad value is refused by load_settings, in the same words as through SPANNER_CDC_* (with the range)
    parser.add_argument("--heartbeat-ms", type=int_or_text, help="heartbeat_milliseconds of the queries, 1000..300000 (default 10000)")
    parser.add_argument("--spark-master", help="local[*], spark://host:port, sc://host:port, yarn or k8s://https://host:port (SPANNER_CDC_SPARK_MASTER)")
    parser.add_argument("--concurrency", type=int_or_text, help="Spark jobs run at once, 1..256 (default 4): a wave's tokens go in that many groups, a job each")
    add_metadata_url_flag(parser)
    add_home_flag(parser)
    parser.add_argument(
        "--read-method", choices=READ_METHODS, default=READ_METHODS[0], help="read_method column (backfills: the second)"
    )
    parser.add_argument("--max-waves", type=int, default=20, help="bound on waves of children per run (default 20)")
    parser.add_argument(
        "--current-state", action="store_true", help="once the window is complete, apply it to each table's current-state "
        "Iceberg table <namespace>.<stream>__current__<table> (files under _current/): one snapshot per table as of the "
        "window's end (SPANNER_CDC_CURRENT_STATE_KEEP window snapshots kept, default 24)"
    )  # fmt: skip
    parser.add_argument(
        "--wait", action="store_true", help="a --window-end still in the future (by Spanner's clock) is waited for, with a "
        "line on stderr every 10 s; without it such a window is refused, naming the time it can be extracted",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the window summary as JSON on stdout")
    add_tuning_flags(parser)
    add_policy_flags(parser)
    add_read_flags(parser)
    parser.set_defaults(func=handle)


def resolve_settings(args: argparse.Namespace) -> Settings:
    """Flags / env / config file; a --stream naming a configured [streams.<name>] table takes its values."""
    from spanner_cdc.settings import load_settings
    from spanner_cdc.stream_config import load_streams

    args.policy = policy_from_flags(args)  # the policy flags, as one setting
    settings = load_settings(vars(args))
    if settings.stream and settings.streams:
        streams = load_streams(settings)
        if settings.stream in streams:
            flags = {k: v for k, v in vars(args).items() if v is not None and k in settings.field_names()}
            flags.pop("stream", None)
            settings = streams[settings.stream].settings(settings)
            explicit = load_settings(flags, env={})  # flags still beat the stream table
            settings = dataclasses.replace(settings, **{k: getattr(explicit, k) for k in flags})
    return settings


class ProgressLine:
    """On a terminal, one line rewritten in place; the pipeline's log lines go quiet meanwhile."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.width = 0

    def __call__(self, state: Progress) -> None:
        text = (
            f"wave {state.wave}: tokens done {state.done}, running {state.running}, waiting {state.waiting}"
            f"{f', failed {state.failed}' if state.failed else ''}; {state.records:,} records landed"
        )
        self.out.write("\r" + text.ljust(self.width))
        self.out.flush()
        self.width = len(text)

    def finish(self) -> None:
        if self.width:
            self.out.write("\n")
            self.out.flush()


def describe(summary: WindowSummary) -> str:
    window = f"[{summary.window_start.isoformat()}, {summary.window_end.isoformat()})"
    head = f"{summary.stream}/{summary.namespace} window {window}: "
    if summary.complete:
        check = summary.transaction_check
        return (
            head + f"complete; {summary.records} records in {summary.files} files from {summary.tokens} partitions "
            f"({summary.extracted_tokens} token jobs in {summary.waves} waves, {summary.elapsed_s:.1f}s); "
            f"transaction check: {check.get('transactions', 0)} transactions ok; marker {summary.marker_path}"
        )
    return (
        head + f"NOT complete: {len(summary.pending)} of {summary.tokens} partitions pending after {summary.waves} "
        f"waves ({summary.records} records landed so far); run the same command again to continue"
    )


def handle(args: argparse.Namespace) -> int:
    from spanner_cdc.cli.commands._preflight import check_services, check_window, require_stream, wait_for_window_end
    from spanner_cdc.cli.commands.read import parse_timestamp
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.lake.layout import check_output_root
    from spanner_cdc.spark.session import check_java, live_sessions, start_in_background, stop_sessions

    callers = live_sessions()  # this process's before the command (an in-process caller's): they stay open
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines are per connection, not ours
    settings = resolve_settings(args)
    start = parse_timestamp(args.window_start, "--window-start")
    end = parse_timestamp(args.window_end, "--window-end")
    # flags, settings and the window, then what the run needs locally and the services it will reach: all before
    # it touches the store or starts a JVM
    require_stream(settings)
    check_window(start, end)
    check_output_root(settings.output_root)
    check_java(settings.spark_master)
    check_services(settings)
    if end > datetime.now(UTC):  # by this machine's clock: only then is Spanner's asked (a window's end it must have passed)
        from spanner_cdc.source.client import open_database

        wait_for_window_end(open_database(settings), end, wait=args.wait, out=sys.stderr)
    settings = with_dev_store(settings)  # the CLI on a laptop: the embedded store when none is configured
    progress = ProgressLine(sys.stderr) if sys.stderr.isatty() and not args.debug else None
    if progress is not None:
        logging.getLogger("spanner_cdc").setLevel(logging.WARNING)
    try:
        start_in_background(settings)  # the driver's JVM starts while the rest is imported and the window planned
        from spanner_cdc.extract.current_state import update_current_state
        from spanner_cdc.extract.window import RunSource, catch_up, run_window

        source = RunSource(settings)  # one Spanner client for the windows left open and this one
        catch_up(settings, start, read_method=args.read_method, max_waves=args.max_waves, source=source)
        summary = run_window(
            settings, start, end, read_method=args.read_method, max_waves=args.max_waves, progress=progress, source=source
        )
        states = update_current_state(settings, up_to=end) if args.current_state and summary.complete else []
    finally:
        if progress is not None:
            progress.finish()
        stop_sessions(keep=callers)
    if args.json:
        extra = {"current_state": [s.to_json() for s in states]} if args.current_state else {}
        print(json.dumps({**summary.to_json(), **extra}, indent=2, sort_keys=True, default=str))
    else:
        print(describe(summary))
    return 0 if summary.complete else 1
