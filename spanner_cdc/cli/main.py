"""The `spanner-cdc` command line: discovers subcommands and turns project errors into one stderr line."""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from spanner_cdc.cli import commands
from spanner_cdc.errors import SpannerCdcError

# argparse's own wording of a bad value (Python 3.11), reworded like the settings' errors
_BAD_CHOICE = re.compile(r"^argument (?P<flag>[^/:]+)[^:]*: invalid choice: (?P<value>.*) \(choose from (?P<choices>.*)\)$")
_BAD_NUMBER = re.compile(r"^argument (?P<flag>[^/:]+)[^:]*: invalid (?P<kind>int|float) value: (?P<value>.*)$")
_NUMBER_KINDS = {"int": "an integer", "float": "a number"}


def one_line(message: str, prog: str) -> str:
    """An argparse error as one line in the settings' style; errors of form, not value, point at --help."""
    if match := _BAD_CHOICE.match(message):
        choices = re.sub(r"'([^']*)'", r"\1", match["choices"])
        return f"invalid {match['flag']}={match['value']}: expected one of {choices}"
    if match := _BAD_NUMBER.match(message):
        return f"invalid {match['flag']}={match['value']}: expected {_NUMBER_KINDS[match['kind']]}"
    return f"{message.removeprefix('argument ')} (see `{prog} --help`)"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one stderr line instead of the usage block (--help still prints it).

    Subcommand parsers are of the same class (argparse makes them with the parent's class).
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"spanner-cdc: error: {one_line(message, self.prog)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


def flag_namer(parser: argparse.ArgumentParser, command: str) -> Callable[[str], str]:
    """Settings named in an error, as the flags of `command` where it has one (else as the setting's name)."""
    flags: dict[str, str] = {}

    def collect(p: argparse.ArgumentParser, depth: int) -> None:
        for action in p._actions:  # argparse keeps subcommand parsers only here
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if depth or name == command:
                        collect(sub, depth + 1)
            elif depth and (long := [o for o in action.option_strings if o.startswith("--")]):
                flags.setdefault(action.dest, long[0])

    collect(parser, 0)
    return lambda name: flags.get(name, name)


def main(argv: Sequence[str] | None = None) -> int:
    # libraries' warnings (platformdirs' RuntimeDirWarning on a machine without XDG_RUNTIME_DIR) are not the user's
    # business: logged, and shown with --debug only, so a user error stays the one line on stderr
    logging.captureWarnings(True)
    logging.getLogger("py.warnings").setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py.warnings").setLevel(logging.DEBUG if args.debug else logging.ERROR)
    try:
        return int(args.func(args) or 0)
    except SpannerCdcError as exc:
        if args.debug:
            raise
        print(f"spanner-cdc: error: {exc.message(flag_namer(parser, args.command))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("spanner-cdc: interrupted", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """The `spanner-cdc` command (and `python -m spanner_cdc`): `main`, then the interpreter's ordinary exit."""
    sys.exit(main())
