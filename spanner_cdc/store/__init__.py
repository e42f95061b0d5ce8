"""Lineage and checkpoint store in Postgres: partition state machine, windows, manifests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from spanner_cdc.lineage.rules import State
from spanner_cdc.store.metadata_store import MetadataStore
from spanner_cdc.store.models import (
    BatchResult,
    Claim,
    Completion,
    LeaseLost,
    Lineage,
    LineageGraph,
    ManifestFile,
    PartitionRow,
    WindowRow,
    WindowStatus,
    WindowTotals,
)

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings

__all__ = [
    "BatchResult",
    "Claim",
    "Completion",
    "LeaseLost",
    "Lineage",
    "LineageGraph",
    "ManifestFile",
    "MetadataStore",
    "PartitionRow",
    "State",
    "WindowRow",
    "WindowStatus",
    "WindowTotals",
    "open_store",
]


def open_store(settings: Settings, *, check_schema: bool = True) -> MetadataStore:
    """The store the settings name, schema checked unless told not to.

    No URL is an error here (StoreNotConfigured), never a Postgres started on whatever machine runs
    this: only the dev stack's entry points (the CLI, demo, up) fill in the embedded store first.
    """
    from spanner_cdc.store.url import require_metadata_url

    store = MetadataStore.connect(require_metadata_url(settings.metadata_url))
    if check_schema:
        try:
            store.check_schema()
        except BaseException:
            store.close()
            raise
    return store
