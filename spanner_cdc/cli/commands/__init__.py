"""Subcommands of the CLI: each module has `register(subparsers)` and an optional ORDER."""
