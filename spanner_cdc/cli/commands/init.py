"""`spanner-cdc init DIR`: write the example streams file, alert rules, Grafana dashboard and DAG file out for editing."""

from __future__ import annotations

import argparse
from pathlib import Path

ORDER = 25


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "init",
        help="write the example config, alert rules, dashboard and DAG file into a directory",
        description="Copy the files the package ships for a deployment into DIR: streams.toml (point SPANNER_CDC_CONFIG "
        "at it), prometheus/ (alert rules and their promtool tests), grafana/ (a dashboard) and dags/ (a DAG file "
        "for Airflow's dags folder). Existing files are kept unless --force.",
    )
    parser.add_argument("directory", type=Path, metavar="DIR", help="where to write (created if missing)")
    parser.add_argument("--force", action="store_true", help="overwrite files that already exist")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from spanner_cdc.resources import write_examples

    for path in write_examples(args.directory, overwrite=args.force):
        print(path)
    return 0
