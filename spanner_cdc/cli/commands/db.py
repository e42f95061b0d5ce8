"""`spanner-cdc db upgrade|status`: create or migrate the metadata store schema, and show its version."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from spanner_cdc.cli.commands._flags import add_metadata_url_flag

if TYPE_CHECKING:
    from spanner_cdc.store import MetadataStore

ORDER = 30


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("db", help="create / migrate the metadata store schema", description=__doc__)
    actions = parser.add_subparsers(dest="db_action", metavar="ACTION", required=True)
    upgrade = actions.add_parser(
        "upgrade",
        help="apply pending schema migrations and install this release's functions",
        description="Create or migrate the metadata store schema, and install the functions this release's claims and "
        "landings call (run it after installing another release too).",
    )
    add_metadata_url_flag(upgrade)
    upgrade.set_defaults(func=run_upgrade)
    status = actions.add_parser(
        "status",
        help="show the schema version and lineages",
        description="Show the metadata store's schema version and lineages; exits 1 when an upgrade is needed.",
    )
    add_metadata_url_flag(status)
    status.set_defaults(func=run_status)


def _connect(args: argparse.Namespace) -> MetadataStore:
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.settings import load_settings
    from spanner_cdc.store import MetadataStore

    settings = with_dev_store(load_settings(vars(args)))
    assert settings.metadata_url is not None
    return MetadataStore.connect(settings.metadata_url)


def run_upgrade(args: argparse.Namespace) -> int:
    from spanner_cdc.store.migrations import SCHEMA_VERSION

    with _connect(args) as store:
        applied = store.upgrade()
        if applied:
            print(f"metadata store at {store.url}: applied {', '.join(applied)}; schema version {SCHEMA_VERSION}")
        else:
            print(f"metadata store at {store.url}: schema version {SCHEMA_VERSION} is up to date")
    return 0


def run_status(args: argparse.Namespace) -> int:
    from spanner_cdc.store.migrations import SCHEMA_VERSION, discover

    with _connect(args) as store:
        version = store.schema_version()
        print(f"metadata store: {store.url}")
        print(f"schema version: {version} (this code needs {SCHEMA_VERSION})")
        for _, name, applied_at in store.applied_migrations():
            print(f"  applied {name} at {applied_at}")
        pending = [m.name for m in discover() if m.version > version]
        if pending:
            print(f"pending migrations: {', '.join(pending)}: run `spanner-cdc db upgrade`")
            return 1
        if version > SCHEMA_VERSION:
            print("the store is newer than this code: upgrade spanner-cdc")
            return 1
        missing = store.missing_functions()
        if missing:
            print(f"missing functions of this release: {', '.join(missing)}: run `spanner-cdc db upgrade`")
            return 1
        lineages = store.lineages()
        print(f"lineages: {len(lineages)}")
        for lineage in lineages:
            print(f"  {lineage.name} (id {lineage.id}, database {lineage.database or '-'})")
    return 0
