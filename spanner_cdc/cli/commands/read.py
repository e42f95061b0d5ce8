"""`spanner-cdc read`: print a change stream's records as they come (one partition, or all of them)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import TextIO

from spanner_cdc.cli.commands._flags import add_dialect_flag, add_spanner_flags, int_or_text
from spanner_cdc.errors import ConfigError, RetentionError, UsageError
from spanner_cdc.model.record_json import record_to_json
from spanner_cdc.model.records import (
    ChangeRecord,
    ChildPartitionsRecord,
    DataChangeRecord,
    HeartbeatRecord,
    PartitionEndRecord,
    PartitionEventRecord,
    PartitionStartRecord,
    dispatch,
)
from spanner_cdc.source.out_of_range import CREATION, classify, spanner_now
from spanner_cdc.times import parse_rfc3339, rfc3339

ORDER = 20
TIMESTAMP_FORMAT = "an RFC 3339 timestamp with Z or an offset (e.g. 2024-05-01T09:00:00Z, 2024-05-01T11:00:00.5+02:00) or 'now'"


def parse_timestamp(value: str, flag: str) -> datetime:
    """--start / --end: RFC 3339 with Z or an offset, or 'now'; anything else names the flag."""
    text = value.strip()
    if text.lower() == "now":
        return datetime.now(UTC)
    try:
        return parse_rfc3339(text)
    except ValueError:
        raise ConfigError(flag, value, TIMESTAMP_FORMAT) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "read",
        help="print change records of a stream (one partition or all)",
        description="Run change stream queries and print the records as they come. Without --token or "
        "--all-partitions, runs the first (NULL-token) query, which returns the root partitions. Streams of "
        "either partition mode are read (asked from the database): IMMUTABLE_KEY_RANGE streams yield "
        "child_partitions records, MUTABLE_KEY_RANGE streams partition_start / partition_event / partition_end "
        "records (read in queries of at most 30 minutes each, as that mode requires).",
    )
    add_spanner_flags(parser)
    parser.add_argument("--stream", help="change stream name (SPANNER_CDC_STREAM)")
    parser.add_argument("--start", required=True, help="start timestamp (inclusive): RFC 3339 with Z or offset, or 'now'")
    parser.add_argument("--end", help="end timestamp (inclusive); without it, read until the partitions end")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--token", help="read this partition token")
    which.add_argument(
        "--all-partitions", action="store_true",
        help="run the whole query workflow: roots, then every child (or every started partition)",
    )
    # a bad value is refused by load_settings, in the same words as through SPANNER_CDC_* (with the range)
    parser.add_argument("--heartbeat-ms", type=int_or_text, help="heartbeat_milliseconds, 1000..300000 (default 10000)")
    parser.add_argument("--format", choices=("jsonl", "text"), default="jsonl", help="output format (default jsonl)")
    add_dialect_flag(parser, "SQL dialect (default: auto-detect)")
    parser.add_argument("--concurrency", type=int_or_text, help="partitions queried at once with --all-partitions and --end, 1..256")
    parser.set_defaults(func=handle)


# what a text line names as the partition of the root query's records (the root query reads no token)
ROOT_LABEL = "(root)"


def format_text(token: str | None, record: ChangeRecord) -> str:
    return dispatch(record, _TextLine(token))


class _TextLine:
    """One line per record: its timestamp, the partition it came from, its kind and what tells it apart."""

    def __init__(self, token: str | None) -> None:
        self.token = token if token is not None else ROOT_LABEL

    def data_change(self, record: DataChangeRecord) -> str:
        keys = json.dumps([m.keys for m in record.mods], separators=(",", ":"))
        return (
            f"{rfc3339(record.commit_timestamp)} {self.token} data_change {record.mod_type} {record.table_name} "
            f"txn={record.server_transaction_id} seq={record.record_sequence} mods={len(record.mods)} keys={keys}"
        )

    def heartbeat(self, record: HeartbeatRecord) -> str:
        return f"{rfc3339(record.timestamp)} {self.token} heartbeat"

    def child_partitions(self, record: ChildPartitionsRecord) -> str:
        kids = " ".join(f"{c.token}<-[{','.join(c.parent_partition_tokens)}]" for c in record.child_partitions)
        return f"{rfc3339(record.start_timestamp)} {self.token} child_partitions seq={record.record_sequence} {kids}"

    def partition_start(self, record: PartitionStartRecord) -> str:
        tokens = " ".join(record.partition_tokens)
        return f"{rfc3339(record.start_timestamp)} {self.token} partition_start seq={record.record_sequence} {tokens}"

    def partition_end(self, record: PartitionEndRecord) -> str:
        return f"{rfc3339(record.end_timestamp)} {self.token} partition_end seq={record.record_sequence}"

    def partition_event(self, record: PartitionEventRecord) -> str:
        moves = [f"in<-{t}" for t in record.move_in_from] + [f"out->{t}" for t in record.move_out_to]
        return f"{rfc3339(record.commit_timestamp)} {self.token} partition_event seq={record.record_sequence} {' '.join(moves)}"


def write_records(records: Iterable[tuple[str | None, ChangeRecord]], fmt: str, out: TextIO) -> int:
    count = 0
    for token, record in records:
        if fmt == "jsonl":
            line = json.dumps(record_to_json(record, token), separators=(",", ":"), ensure_ascii=False)
        else:
            line = format_text(token, record)
        out.write(line + "\n")
        out.flush()  # a debugging tool: each record shows up as soon as it is read
        count += 1
    return count


def handle(args: argparse.Namespace) -> int:
    from spanner_cdc.settings import load_settings
    from spanner_cdc.source.all_partitions import AllPartitions
    from spanner_cdc.source.client import detect_dialect, format_retention, open_database, stream_metadata
    from spanner_cdc.source.reader import PartitionReader

    settings = load_settings(vars(args))
    if not settings.stream:
        raise ConfigError("--stream", None, "the name of a change stream (or SPANNER_CDC_STREAM)")
    start = parse_timestamp(args.start, "--start")
    end = parse_timestamp(args.end, "--end") if args.end else None
    if end is not None and end < start:
        raise UsageError(f"--end {rfc3339(end)} is before --start {rfc3339(start)}: --end must be at or after --start")
    from spanner_cdc.cli.commands._preflight import check_credentials_file, check_emulator_host

    check_credentials_file(settings)
    check_emulator_host(settings)  # a mistyped host: one line now, not the client's deadline
    database = open_database(settings)
    dialect = detect_dialect(database, settings.dialect)
    metadata = stream_metadata(database, settings.stream, dialect)
    reader = PartitionReader(
        database, settings.stream, dialect=dialect, heartbeat_ms=settings.heartbeat_ms, request_tag="spanner-cdc-read"
    )
    records: Iterator[tuple[str | None, ChangeRecord]]
    if args.all_partitions:
        records = iter(AllPartitions(reader, start, end, concurrency=settings.concurrency))
    else:
        token = args.token
        records = ((token, record) for record in reader.read(token, start, end))
    try:
        write_records(records, args.format, sys.stdout)
    except RetentionError as exc:
        found = classify(exc.spanner_message, metadata.retention, spanner_now(database, dialect))
        created_at = metadata.created_at or (found.earliest if found.cause == CREATION else None)
        created = f", created {rfc3339(created_at)}" if created_at else ""
        said = str(exc)
        if found.cause == CREATION and classify(exc.spanner_message).cause != CREATION:
            # Spanner's words did not say it; its earliest readable time, well inside the retention, does
            said = f"{metadata.name}: --start {rfc3339(start)} precedes the change stream's creation: there are no changes before it (Spanner: {exc.spanner_message}); start at or after the stream's creation"
        raise RetentionError(
            f"{said} [stream {metadata.name}: retention_period {format_retention(metadata.retention)}{created}]"
        ) from None
    except BrokenPipeError:  # `| head`: the reader of our output is gone, which is not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
