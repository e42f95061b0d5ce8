"""`spanner-cdc demo` (the whole pipeline on embedded services, with a summary), `spanner-cdc up` (the Airflow UI) and
`spanner-cdc down` (stops the embedded Postgres): the commands of devstack/demo.py."""

from __future__ import annotations

import argparse

ORDER = 5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on embedded services and print a summary (make demo)",
        description="Start the embedded Postgres and the local Spanner server (clock in the past, accelerated; or, "
        "with --source emulator, Google's emulator in real time), write a few hours of changes with partition splits "
        "and merges, run the hourly DAG for each hour with Airflow, and print what landed against what was written. "
        "The lineage store is the one the CLI reads on the same --home, so the commands the summary prints see the "
        "demo; its lake and logs live in <home>/demo and are replaced on every run. Every process it starts it stops "
        "at the end (the embedded Postgres only if it was not running before); `spanner-cdc up` starts them again on "
        "the demo's data.",
    )
    demo.add_argument("--source", default="local", choices=("local", "emulator"),
                      help="the demo's Spanner: local (the local server, its clock in the past and accelerated; default) or "
                      "emulator (Google's Cloud Spanner emulator in real time: each hour of --hours is a minute window, "
                      "--workload-seconds is not used)")
    demo.add_argument("--hours", type=int, default=3, help="hours of stream history, one DAG run each (default 3)")
    demo.add_argument("--transactions", type=int, default=1200, help="transactions the workload writes (default 1200)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the workload (default 7)")
    demo.add_argument("--workload-seconds", type=float, default=30.0,
                      help="real seconds the workload takes; the clock is sped up to fit the hours in (default 30)")
    demo.add_argument("--partition-mode", default="IMMUTABLE_KEY_RANGE",
                      help="partition_mode of the demo's change stream: IMMUTABLE_KEY_RANGE (default; partitions split "
                      "and merge) or MUTABLE_KEY_RANGE (long-lived partitions, key ranges move between them)")
    demo.add_argument("--home", help="where the embedded services keep their data (default .local)")
    demo.add_argument("--spark-master", help="Spark master for the extract jobs (default local[*])")
    demo.add_argument(
        "--output-root",
        help="the demo's lake: a path, gs://bucket/prefix or s3://bucket/prefix (endpoint and credentials from the "
        "standard variables); its <root>/demo_stream/live is emptied first (default .local/demo/lake)",
    )
    demo.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    demo.set_defaults(func=run_demo)

    up = subparsers.add_parser(
        "up",
        help="run Airflow (UI, scheduler, dag-processor, triggerer) on the embedded stack until Ctrl-C (make up)",
        description="Serve the Airflow UI on http://127.0.0.1:PORT with the scheduler, dag-processor and "
        "triggerer, on the embedded Postgres. After `spanner-cdc demo` it shows the demo's runs and "
        "lineage and starts the demo's local Spanner server again so the DAGs can run. Ctrl-C stops "
        "everything it started.",
    )
    up.add_argument("--port", type=int, default=8080, help="port of the UI / API server (default 8080)")
    up.add_argument("--home", help="where the embedded services keep their data (default .local)")
    up.set_defaults(func=run_up)

    down = subparsers.add_parser(
        "down",
        help="stop the embedded Postgres (make down)",
        description="Stop the embedded Postgres under --home if it is running: CLI commands run on a laptop without "
        "SPANNER_CDC_METADATA_URL start it and leave it running for the next command. Its data is kept.",
    )
    down.add_argument("--home", help="where the embedded services keep their data (default .local)")
    down.set_defaults(func=run_down)


def run_demo(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.demo import DemoOptions, demo
    from spanner_cdc.errors import UsageError
    from spanner_cdc.names import PARTITION_MODES
    from spanner_cdc.settings import load_settings, output_root

    if not 1 <= args.hours <= 24:
        raise UsageError(f"--hours {args.hours}: expected 1 to 24")
    if args.transactions < 10:
        raise UsageError(f"--transactions {args.transactions}: expected at least 10")
    if not 5 <= args.workload_seconds <= 3600:
        raise UsageError(f"--workload-seconds {args.workload_seconds}: expected 5 to 3600")
    if args.partition_mode not in PARTITION_MODES:
        raise UsageError(f"--partition-mode {args.partition_mode}: expected {' or '.join(PARTITION_MODES)}")
    if args.source == "emulator" and args.partition_mode != PARTITION_MODES[0]:
        raise UsageError(f"--partition-mode {args.partition_mode}: Google's emulator has only {PARTITION_MODES[0]} (--source emulator)")
    settings = load_settings({"home": args.home, "spark_master": args.spark_master})
    lake_root = output_root("--output-root", args.output_root) if args.output_root is not None else None
    options = DemoOptions(
        hours=args.hours, transactions=args.transactions, seed=args.seed, workload_seconds=args.workload_seconds,
        lake_root=lake_root,
        partition_mode=args.partition_mode, source=args.source,
    )
    summary = demo(settings, options, echo=None if args.json else print)
    print(summary.to_json_text() if args.json else summary.render())
    return 0 if summary.ok else 1


def run_up(args: argparse.Namespace) -> int:
    from spanner_cdc.cli.commands._preflight import check_port_free
    from spanner_cdc.devstack.demo import up
    from spanner_cdc.settings import load_settings

    check_port_free(args.port)
    return up(load_settings({"home": args.home}), port=args.port)


def run_down(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.demo import down
    from spanner_cdc.settings import load_settings

    return down(load_settings({"home": args.home}))
