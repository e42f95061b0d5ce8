"""Subcommands of the CLI: each module has `register(subparsers)` and an optional ORDER.

A module is named after its subcommand, so `extract`, `lineage`, `local_spanner` and `demo` share names with the
packages or modules they drive (extract/, lineage/, local_spanner/, devstack/demo.py): the same concept, seen from the
command line."""
