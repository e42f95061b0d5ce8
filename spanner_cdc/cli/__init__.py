"""The `spanner-cdc` command line: `main` discovers the subcommands in `cli/commands/`. The only production package that may
import devstack/ (the demo, `up`, the local server and the embedded store for local runs), and only inside commands."""
