"""`spanner-cdc local-spanner workload`: its flags, and the run of devstack.workload they ask for."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from spanner_cdc.cli.commands._flags import add_spanner_flags
from spanner_cdc.devstack.workload import run_workload, setup_database
from spanner_cdc.devstack.workload_schema import GOOGLE_STANDARD_SQL, POSTGRESQL
from spanner_cdc.errors import ConfigError
from spanner_cdc.names import IMMUTABLE_KEY_RANGE


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "workload",
        help="write a seeded insert/update/delete workload and its ground truth",
        description="Write inserts, updates and deletes over several tables through google-cloud-spanner at a "
        "given rate, and log every committed row change (JSON lines) as ground truth.",
    )
    parser.add_argument("--host", help="host:port of the server (default: SPANNER_EMULATOR_HOST or 127.0.0.1:9010)")
    add_spanner_flags(parser)
    parser.add_argument(
        "--dialect", choices=(GOOGLE_STANDARD_SQL, POSTGRESQL), help="database dialect (default GOOGLE_STANDARD_SQL)"
    )
    parser.add_argument("--stream", help="change stream created by --setup (default workload_stream)")
    parser.add_argument("--value-capture-type", default="OLD_AND_NEW_VALUES", help="of the stream created by --setup")
    parser.add_argument("--partition-mode", default=IMMUTABLE_KEY_RANGE,
                        help="of the stream created by --setup: IMMUTABLE_KEY_RANGE (default) or MUTABLE_KEY_RANGE")
    parser.add_argument("--transactions", type=int, required=True, help="how many transactions to commit")
    parser.add_argument("--rate", type=float, help="transactions per second (default: as fast as possible)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--batch", type=int, default=1, help="transactions per BatchWrite request, each its own transaction and commit "
        "timestamp, tagged per request (default 1: one Commit per transaction, every fifth a read-write transaction)"
    )
    parser.add_argument(
        "--ground-truth", type=Path, required=True, help="JSON-lines file of every committed row change"
    )
    parser.add_argument(
        "--setup", action="store_true", help="create the instance, database, tables and change stream first"
    )
    parser.set_defaults(func=_run_cli)


def _run_cli(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.spanner_server import spanner_client
    from spanner_cdc.settings import load_settings

    flags = {k: getattr(args, k) for k in ("project", "instance", "database", "stream") if getattr(args, k)}
    settings = load_settings(flags)
    dialect = args.dialect or (settings.dialect if settings.dialect != "auto" else GOOGLE_STANDARD_SQL)
    host = args.host or settings.emulator_host or "127.0.0.1:9010"
    client = spanner_client(host, settings.project)
    instance = client.instance(
        settings.instance,
        configuration_name=f"projects/{settings.project}/instanceConfigs/emulator-config",
        display_name=settings.instance,
        node_count=1,
    )
    database = _database(instance, settings.database, dialect)
    if args.setup:
        if not instance.exists():
            instance.create().result(120)
        setup_database(database, dialect, settings.stream or "workload_stream", args.value_capture_type, args.partition_mode)
    elif not database.exists():
        raise ConfigError("--database", settings.database, "an existing database on the server (or pass --setup)")
    stats = run_workload(
        database,
        transactions=args.transactions,
        tx_per_second=args.rate,
        seed=args.seed,
        ground_truth=args.ground_truth,
        batch=args.batch,
    )
    summary = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in vars(stats).items()}
    print(json.dumps({**summary, "tx_per_second": round(stats.tx_per_second, 1)}))
    return 0


def _database(instance: Any, database_id: str, dialect: str) -> Any:
    if dialect == POSTGRESQL:
        from google.cloud.spanner_admin_database_v1 import DatabaseDialect

        return instance.database(database_id, database_dialect=DatabaseDialect.POSTGRESQL)
    return instance.database(database_id)
