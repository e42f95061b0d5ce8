"""Uses of other libraries' internals that have no public equivalent: one module per library, each with a contract test."""

from __future__ import annotations

from importlib import metadata


def version(distribution: str) -> str:
    """The installed version of `distribution`, or "not installed"."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


class ContractBroken(RuntimeError):
    """An internal of another library is not what a compat module expects (its contract test raises this)."""


def expect(distribution: str, holds: bool, what: str) -> None:
    """Raise ContractBroken naming the library, its installed version and the internal, unless `holds`."""
    if not holds:
        raise ContractBroken(
            f"{distribution} {version(distribution)}: {what} is not as spanner_cdc.compat expects; "
            "this release needs spanner_cdc/compat updated (or a public API of the library used instead)"
        )
