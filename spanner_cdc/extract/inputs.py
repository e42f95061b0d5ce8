"""What each lineage operation of a run (extract, snapshot, current state, verify, maintain) starts from: its change
stream, its lake layout, its metadata store, and timestamps given with their zone. Light to import: the commands that
need no Spark (maintain, verify, the orchestration's plan and next-wave tasks) import this, not the extract path."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from spanner_cdc.errors import UsageError, setting
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.times import utc

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings
    from spanner_cdc.store import MetadataStore


def utc_given(value: datetime, name: str) -> datetime:
    """`value` in UTC; a value without a time zone is refused, naming the field."""
    try:
        return utc(value)
    except ValueError:
        raise UsageError(f"{name} {value.isoformat()} has no time zone: give it with Z or an offset") from None


def stream_of(settings: Settings) -> str:
    if not settings.stream:
        raise UsageError(f"no change stream given: set {setting('stream')} (or SPANNER_CDC_STREAM)")
    return settings.stream


def layout_of(settings: Settings) -> LakeLayout:
    return LakeLayout(settings.output_root, stream_of(settings), settings.namespace)


def store_of(settings: Settings) -> MetadataStore:
    """The settings' metadata store (`with store_of(settings) as store:` closes it on the way out); the store's
    modules are imported here, at first use."""
    from spanner_cdc.store import open_store

    return open_store(settings)
