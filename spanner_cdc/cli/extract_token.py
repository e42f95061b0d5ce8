"""spark-submit entry point: extract a window, or only the named tokens of it, with this application as the driver.

    spark-submit --master spark://host:7077 "$(python -m spanner_cdc.cli.extract_token --path)" \
        --stream S --window-start 2024-05-01T10:00:00Z --window-end 2024-05-01T11:00:00Z [--token T ...] [--json]

Settings come from SPANNER_CDC_* variables and the flags of `spanner-cdc extract`; the Spark master is
spark-submit's. With --token, only those tokens are claimed and extracted (the window must be planned
already, e.g. by the DAG's plan task); without it, the whole window runs: plan, waves, close.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--path"]:  # this file, for spark-submit's primary resource
        print(__file__)
        return 0
    from pyspark.sql import SparkSession

    from spanner_cdc.cli.commands.extract import register as register_extract
    from spanner_cdc.cli.commands.extract import resolve_settings
    from spanner_cdc.cli.commands.read import parse_timestamp
    from spanner_cdc.cli.main import main as cli_main
    from spanner_cdc.errors import SpannerCdcError

    args_list = list(sys.argv[1:] if argv is None else argv)
    tokens_parser = argparse.ArgumentParser(add_help=False)
    tokens_parser.add_argument("--token", action="append", default=[])
    known, rest = tokens_parser.parse_known_args(args_list)
    # spark-submit made the context and chose the master: every token job of this run uses its session
    session = SparkSession.builder.appName("spanner-cdc-extract").getOrCreate()
    master = str(session.sparkContext.master)
    if not known.token:
        return cli_main(["extract", *rest, "--spark-master", master])

    from spanner_cdc.extract.window import extract_tokens

    parser = argparse.ArgumentParser(prog="extract_token.py")
    parser.add_argument("--debug", action="store_true")
    register_extract(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["extract", *rest])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        settings = dataclasses.replace(resolve_settings(args), spark_master=master)
        results = extract_tokens(
            settings,
            parse_timestamp(args.window_start, "--window-start"),
            parse_timestamp(args.window_end, "--window-end"),
            known.token,
            read_method=args.read_method,
        )
    except SpannerCdcError as exc:
        print(f"extract_token.py: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(json.dumps([dataclasses.asdict(r) for r in results], indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
