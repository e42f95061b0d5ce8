"""The `spanner-cdc` command line: discovers subcommands and turns project errors into one stderr line."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from spanner_cdc import commands
from spanner_cdc.errors import SpannerCdcError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spanner-cdc",
        description="Extract Cloud Spanner change streams into a data lake, one fixed window at a time.",
        epilog="Settings: flags beat SPANNER_CDC_* environment variables, which beat the TOML file "
        "named by SPANNER_CDC_CONFIG.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [
        importlib.import_module(f"{commands.__name__}.{info.name}")
        for info in pkgutil.iter_modules(commands.__path__)
        if not info.name.startswith("_")
    ]
    for module in sorted(modules, key=lambda m: getattr(m, "ORDER", 100)):
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except SpannerCdcError as exc:
        if args.debug:
            raise
        print(f"spanner-cdc: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("spanner-cdc: interrupted", file=sys.stderr)
        return 130
