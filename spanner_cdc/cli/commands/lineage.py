"""`spanner-cdc lineage show|list`: partition lineage with states, watermarks and lag."""

from __future__ import annotations

import argparse
import sys

from spanner_cdc.cli.commands._flags import add_home_flag, add_metadata_url_flag

ORDER = 60
FORMATS = ("text", "json", "dot")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lineage", help="partition lineage with states and watermarks", description=__doc__
    )
    actions = parser.add_subparsers(dest="lineage_action", metavar="ACTION", required=True)
    show = actions.add_parser(
        "show",
        help="show one lineage as a tree, JSON or Graphviz dot",
        description="Show the partition lineage of a stream: a tree with states, watermarks and lag (text), "
        "every field (json), or a graph for Graphviz (dot).",
    )
    show.add_argument("--stream", help="change stream name (default: SPANNER_CDC_STREAM)")
    show.add_argument("--namespace", help="lineage namespace: live, or a backfill run's (default: live)")
    show.add_argument("--format", choices=FORMATS, default="text", help="output format (default: text)")
    add_metadata_url_flag(show)
    add_home_flag(show)
    show.set_defaults(func=run_show)
    listing = actions.add_parser(
        "list", help="list the lineages in the metadata store",
        description="List every lineage in the metadata store, one line each: its name (stream/namespace), id, "
        "database and low watermark.",
    )  # fmt: skip
    add_metadata_url_flag(listing)
    add_home_flag(listing)
    listing.set_defaults(func=run_list)


def run_show(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.errors import ConfigError
    from spanner_cdc.settings import load_settings
    from spanner_cdc.store import open_store
    from spanner_cdc.store.render import render

    settings = load_settings(vars(args))
    if settings.stream is None:
        raise ConfigError("--stream", None, "a change stream name (or set SPANNER_CDC_STREAM)")
    with open_store(with_dev_store(settings)) as store:
        lineage = store.get_lineage(settings.stream, settings.namespace)
        graph = store.graph(lineage.id)
    sys.stdout.write(render(graph, args.format))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from spanner_cdc.devstack.embedded_pg import with_dev_store
    from spanner_cdc.settings import load_settings
    from spanner_cdc.store import open_store
    from spanner_cdc.times import iso_z as iso

    with open_store(with_dev_store(load_settings(vars(args)))) as store:
        for lineage in store.lineages():
            low = store.low_watermark(lineage.id)
            print(f"{lineage.name}\tid {lineage.id}\tdatabase {lineage.database or '-'}\tlow watermark {iso(low) or '-'}")
    return 0
