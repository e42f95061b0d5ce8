"""Flags that several commands share, with one help text each."""

from __future__ import annotations

import argparse

METADATA_URL_HELP = "Postgres URL of the metadata store (default: SPANNER_CDC_METADATA_URL, else the embedded Postgres)"


def add_spanner_flags(parser: argparse.ArgumentParser) -> None:
    """--project / --instance / --database, named like the Settings fields they override."""
    parser.add_argument("--project", help="Spanner project id (SPANNER_CDC_PROJECT)")
    parser.add_argument("--instance", help="Spanner instance id (SPANNER_CDC_INSTANCE)")
    parser.add_argument("--database", help="Spanner database id (SPANNER_CDC_DATABASE)")


def add_metadata_url_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metadata-url", help=METADATA_URL_HELP)
