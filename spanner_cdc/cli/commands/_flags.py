"""Flags that several commands share, with one help text each."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable

from spanner_cdc.settings import DIALECTS, TUNING_FIELDS, Settings, env_name

METADATA_URL_HELP = "Postgres URL of the metadata store (default: SPANNER_CDC_METADATA_URL, else the embedded Postgres)"


def add_spanner_flags(parser: argparse.ArgumentParser) -> None:
    """--project / --instance / --database, named like the Settings fields they override."""
    parser.add_argument("--project", help="Spanner project id (SPANNER_CDC_PROJECT)")
    parser.add_argument("--instance", help="Spanner instance id (SPANNER_CDC_INSTANCE)")
    parser.add_argument("--database", help="Spanner database id (SPANNER_CDC_DATABASE)")


def add_metadata_url_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-url", help=METADATA_URL_HELP)


def add_home_flag(parser: argparse.ArgumentParser) -> None:
    """--home: where the embedded services keep their data (the dev stack's store when no --metadata-url is set)."""
    parser.add_argument(
        "--home", help="where the embedded services keep their data; without a metadata URL, the store is the embedded "
        "Postgres there (SPANNER_CDC_HOME, default .local)",
    )


def any_case(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A flag's value in any case becomes its choice's spelling, as SPANNER_CDC_* values do."""

    def canonical(value: str) -> str:
        return next((choice for choice in choices if choice.upper() == value.upper()), value)

    return canonical


def int_or_text(value: str) -> int | str:
    """An integer flag of a setting: not-a-number passes through, so the setting's check names its range."""
    try:
        return int(value)
    except ValueError:
        return value


def add_dialect_flag(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--dialect", type=any_case(DIALECTS), choices=DIALECTS, help=f"{help} (SPANNER_CDC_DIALECT)")


def add_tuning_flags(parser: argparse.ArgumentParser) -> None:
    """The tuning section of Settings as flags, each with its variable and default (load_settings checks the values)."""
    group = parser.add_argument_group("tuning", "how the extract spends its work; each also SPANNER_CDC_<NAME> or the TOML key <name>")
    for setting in dataclasses.fields(Settings):
        if setting.name in TUNING_FIELDS:
            flag = "--" + setting.name.replace("_", "-")
            default = "unset" if setting.default is None else setting.default
            group.add_argument(flag, help=f"{setting.metadata['help']} ({env_name(setting.name)}, default {default})")


def add_read_flags(parser: argparse.ArgumentParser) -> None:
    """How the stream's reads spare production (docs/governance.md); load_settings checks the values."""
    group = parser.add_argument_group("reads", "how reads spare production; each also SPANNER_CDC_<NAME> or the stream's TOML key")
    group.add_argument(
        "--data-boost", action=argparse.BooleanOptionalAction, default=None,
        help="the snapshot's and verify's partitioned reads on Data Boost (SPANNER_CDC_DATA_BOOST; needs spanner.databases.useDataBoost)",
    )  # fmt: skip
    group.add_argument("--request-priority", help="priority of every query: low, medium or high (SPANNER_CDC_REQUEST_PRIORITY)")
    group.add_argument(
        "--directed-read", help='replicas every read goes to, as JSON: {"include": ["us-east1:READ_ONLY"]} or '
        '{"exclude": ["us-central1"]} (SPANNER_CDC_DIRECTED_READ)',
    )  # fmt: skip
