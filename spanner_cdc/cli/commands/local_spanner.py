"""`spanner-cdc local-spanner`: run the local Spanner server, and force splits, merges, moves and faults on a running one."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from spanner_cdc.errors import ConfigError
from spanner_cdc.settings import load_settings

ORDER = 80
DEFAULT_PORT = 9010
log = logging.getLogger("spanner_cdc.local_spanner")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "local-spanner",
        help="the local Spanner server (the embedded default source)",
        description="A gRPC server speaking the real Spanner API (point SPANNER_EMULATOR_HOST at it), "
        "with change streams whose partitions split and merge.",
    )
    commands = parser.add_subparsers(dest="local_spanner_command", metavar="ACTION", required=True)
    _serve_parser(commands)
    for action, helptext in (("split", "split a partition now"), ("merge", "merge adjacent partitions now")):
        sub = commands.add_parser(action, help=helptext, description=f"{helptext.capitalize()} on a running local server.")
        _target_flags(sub)
        sub.add_argument("--stream", required=True, help="change stream name")
        if action == "split":
            sub.add_argument("--token", help="the partition to split (default: the widest alive one)")
        else:
            sub.add_argument("--token", action="append", dest="tokens", help="a partition to merge (repeat; default: a random adjacent pair)")
        sub.set_defaults(func=_split if action == "split" else _merge)
    move = commands.add_parser(
        "move", help="move a key range between neighbour partitions now (MUTABLE_KEY_RANGE streams)",
        description="Half of the source partition's key range moves to its neighbour, the destination, on a running local server.",
    )
    _target_flags(move)
    move.add_argument("--stream", required=True, help="change stream name (in partition_mode MUTABLE_KEY_RANGE)")
    move.add_argument("--from", dest="source", help="the source partition token (with --to; default: a random neighbour pair)")
    move.add_argument("--to", dest="destination", help="the destination partition token, a neighbour of --from")
    move.set_defaults(func=_move)
    fail = commands.add_parser("fail", help="make the next change stream reads fail with UNAVAILABLE",
                               description="Fault injection: the next N change stream reads send K rows, then fail with UNAVAILABLE.")
    _target_flags(fail, database=False)
    fail.add_argument("--reads", type=int, default=1, help="how many reads fail (default 1)")
    fail.add_argument("--after-rows", type=int, default=0, help="rows each sends before failing (default 0)")
    fail.set_defaults(func=_fail)
    status = commands.add_parser(
        "status", help="print the running server's state as JSON",
        description="Print the running local server's state as JSON: its clock (now, rate), each database's dialect, tables (rows) and change streams, and the faults pending and injected.",
    )  # fmt: skip
    _target_flags(status, database=False)
    status.set_defaults(func=_status)
    try:
        workload = importlib.import_module("spanner_cdc.cli.commands._workload")
    except ModuleNotFoundError as exc:
        if exc.name != "spanner_cdc.devstack.workload":
            raise
    else:
        workload.add_parser(commands)


def _serve_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run the server in the foreground until SIGTERM / SIGINT",
                                description="Run the local Spanner server; prints 'listening on HOST:PORT' when ready.")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--data-dir", type=Path, help="keep tables, change records and partitions here across restarts")
    serve.add_argument("--clock-start", help="server time at start (RFC 3339, e.g. 2024-05-01T00:00:00Z); default: now")
    serve.add_argument("--clock-rate", type=float, default=1.0, help="server seconds per real second (default 1)")
    serve.add_argument("--max-workers", type=int, default=128, help="gRPC worker threads: concurrent requests and reads")
    serve.add_argument("--fsync", action="store_true", help="fsync the journals before a commit is answered (once per group commit: a BatchWrite request, "
                       "or the commits that queued up while the previous group synced)")
    serve.add_argument("--ttl-interval", type=float, metavar="SECONDS",
                       help="real seconds between runs of the tables' row deletion policies (TTL), each a system transaction "
                            "per table with expired rows (default 5; 0: never)")
    group = serve.add_argument_group(
        "partition policy",
        "splits and merges, and key range moves in MUTABLE_KEY_RANGE streams (durations like 10m, 2h; 'none' disables)",
    )
    for f in _policy_fields():
        group.add_argument(f"--policy-{f.name.replace('_', '-')}", dest=f"policy_{f.name}", metavar="VALUE",
                           help=f"{POLICY_HELP[f.name]} (default {_show_default(f.default)})")
    serve.set_defaults(func=_serve)


# What each field of the local server's PartitionPolicy does, as its --policy-* flag says it.
POLICY_HELP = {
    "seed": "seed of the partitions that the timed events pick",
    "initial_partitions": "partitions of a new change stream",
    "min_partitions": "fewest partitions that automatic merges leave",
    "max_partitions": "most partitions that automatic splits make",
    "split_records": "a partition that receives this many records within --policy-split-period splits",
    "split_period": "the period of --policy-split-records",
    "split_ways": "children of a split",
    "merge_idle": "two adjacent partitions idle this long merge ('none': never)",
    "event_every": "server time between timed events: alternately a split and a merge (MUTABLE_KEY_RANGE: split, "
    "move, merge) ('none': no timed events)",
    "max_catchup_events": "most overdue timed events applied at once (after a long idle period)",
}


def _policy_fields() -> list[dataclasses.Field[Any]]:
    from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy

    return list(dataclasses.fields(PartitionPolicy))


def _show_default(value: Any) -> str:
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
        for unit, size in (("h", 3600), ("m", 60)):
            if seconds % size == 0:
                return f"{seconds // size}{unit}"
        return f"{seconds}s"
    return str(value)


def _policy(args: argparse.Namespace) -> Any:
    from spanner_cdc.local_spanner.changestream.policy import PartitionPolicy
    from spanner_cdc.local_spanner.ddl import parse_duration

    given: dict[str, Any] = {}
    for f in _policy_fields():
        raw = getattr(args, f"policy_{f.name}")
        if raw is None:
            continue
        flag = f"--policy-{f.name.replace('_', '-')}"
        if isinstance(f.default, timedelta) or f.default is None:
            if raw.lower() == "none":
                given[f.name] = None
                continue
            try:
                given[f.name] = parse_duration(raw)
            except ValueError:
                raise ConfigError(flag, raw, "a duration such as 30s, 10m, 2h, 1d, or none") from None
        else:
            try:
                given[f.name] = int(raw)
            except ValueError:
                raise ConfigError(flag, raw, "an integer") from None
    try:
        return PartitionPolicy(**given)
    except ValueError as exc:
        raise ConfigError("partition policy", given, str(exc)) from None


# gRPC core experiments the server's process turns off (unless GRPC_EXPERIMENTS is set), read when grpc is imported:
# on (grpc's default), the event engine's own threads read and write the sockets and hand every event to the thread
# polling the completion queue; off, that thread does the I/O itself, 3-4 fewer thread switches per call.
GRPC_EXPERIMENTS = "-event_engine_listener,-event_engine_for_all_other_endpoints,-event_engine_callback_cq"


def _serve(args: argparse.Namespace) -> int:
    os.environ.setdefault("GRPC_EXPERIMENTS", GRPC_EXPERIMENTS)  # before grpc's import: this process is the server's own
    from spanner_cdc.local_spanner.server import LocalSpannerServer, ServerOptions
    from spanner_cdc.local_spanner.values import parse_timestamp

    clock_start = None
    if args.clock_start:
        try:
            clock_start = parse_timestamp(args.clock_start)
        except ValueError:
            raise ConfigError("--clock-start", args.clock_start, "an RFC 3339 timestamp such as 2024-05-01T00:00:00Z") from None
    if args.clock_rate <= 0:
        raise ConfigError("--clock-rate", args.clock_rate, "a number > 0")
    if args.ttl_interval is not None and args.ttl_interval < 0:
        raise ConfigError("--ttl-interval", args.ttl_interval, "a number of seconds >= 0 (0: never)")
    options = ServerOptions(host=args.host, port=args.port, data_dir=args.data_dir, clock_start=clock_start,
                            clock_rate=args.clock_rate, policy=_policy(args), max_workers=args.max_workers, fsync=args.fsync,
                            **({} if args.ttl_interval is None else {"ttl_interval": args.ttl_interval}))
    server = LocalSpannerServer(options)
    try:
        server.start()
    except OSError as exc:
        raise ConfigError("--port", args.port, f"a free port ({exc})") from None
    server.settle_gc()  # this process is the server's own
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("local Spanner server on %s (server time %s, rate %s, data dir %s)",
             server.address, server.status()["now"], options.clock_rate, options.data_dir or "none: in memory")
    print(f"listening on {server.address}", flush=True)
    stop.wait()
    log.info("stopping the local Spanner server on %s", server.address)
    server.stop()
    return 0


def _target_flags(parser: argparse.ArgumentParser, database: bool = True) -> None:
    parser.add_argument("--host", help=f"host:port of the server (default: SPANNER_EMULATOR_HOST or 127.0.0.1:{DEFAULT_PORT})")
    if database:
        parser.add_argument("--database", help="projects/P/instances/I/databases/D, or a database id with --project/--instance")
        parser.add_argument("--project", help="Spanner project id (SPANNER_CDC_PROJECT)")
        parser.add_argument("--instance", help="Spanner instance id (SPANNER_CDC_INSTANCE)")


def _client(args: argparse.Namespace) -> Any:
    from spanner_cdc.local_spanner.control import ControlClient

    settings = load_settings({k: v for k, v in vars(args).items() if k in ("project", "instance")})
    return ControlClient(args.host or settings.emulator_host or f"127.0.0.1:{DEFAULT_PORT}")


def _database(args: argparse.Namespace) -> str:
    flags = {k: v for k, v in vars(args).items() if k in ("project", "instance", "database")}
    if args.database and args.database.startswith("projects/"):
        flags.pop("database")
        return str(args.database)
    settings = load_settings(flags)
    return f"projects/{settings.project}/instances/{settings.instance}/databases/{settings.database}"


def _split(args: argparse.Namespace) -> int:
    with _client(args) as client:
        tokens = client.split(_database(args), args.stream, args.token)
    print(json.dumps({"children": tokens}))
    return 0


def _merge(args: argparse.Namespace) -> int:
    with _client(args) as client:
        token = client.merge(_database(args), args.stream, args.tokens)
    print(json.dumps({"child": token}))
    return 0


def _move(args: argparse.Namespace) -> int:
    if (args.source is None) != (args.destination is None):
        raise ConfigError("--from/--to", (args.source, args.destination), "both partition tokens, or neither")
    tokens = None if args.source is None else [args.source, args.destination]
    with _client(args) as client:
        print(json.dumps({"partitions": client.move(_database(args), args.stream, tokens)}))
    return 0


def _fail(args: argparse.Namespace) -> int:
    if args.reads < 0 or args.after_rows < 0:
        raise ConfigError("--reads/--after-rows", (args.reads, args.after_rows), "numbers >= 0")
    with _client(args) as client:
        print(json.dumps(client.fail_next_reads(args.reads, args.after_rows)))
    return 0


def _status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        json.dump(client.status(), sys.stdout, indent=2)
    print()
    return 0
