"""Plain view rows the UI renders, and the one adapter that reads them from the metadata store."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

STATES = ("CREATED", "READY", "SCHEDULED", "RUNNING", "FINISHED")
ONE_MICROSECOND = timedelta(microseconds=1)
# Windows a stream's view reads (with every open window and the newest verified one): a week of hourly windows, the
# windows table's first seven pages; older ones are counted and summed by the store (StreamView.older_windows).
RECENT_WINDOWS = 168


@dataclass(frozen=True)
class LineageView:
    id: Any
    stream: str
    namespace: str
    database: str | None = None
    created_at: datetime | None = None
    retention_period_s: int | None = None  # the stream's retention_period as the lineage's last plan read it


@dataclass(frozen=True)
class PartitionView:
    token: str
    state: str
    start: datetime | None = None
    end: datetime | None = None
    watermark: datetime | None = None
    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()
    attempts: int = 0
    last_error: str | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    state_times: Mapping[str, datetime | None] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowView:
    start: datetime
    end: datetime
    state: str
    records: int | None = None
    files: int | None = None
    transaction_check: Mapping[str, Any] | None = None
    opened_at: datetime | None = None
    completed_at: datetime | None = None
    verify: Mapping[str, Any] | None = None  # the last `spanner-cdc verify` of the window
    marker_path: str | None = None  # the window's `_windows/` marker in the lake, once it closed

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE"

    @property
    def check_passed(self) -> bool | None:
        """The transaction check's verdict (its `ok`, `passed` or `status` entry), None when there is none."""
        check = self.transaction_check or {}
        for key in ("ok", "passed"):
            if isinstance(check.get(key), bool):
                return bool(check[key])
        status = check.get("status")
        if isinstance(status, str):
            return status.lower() in ("ok", "passed", "pass")
        return None

    @property
    def check_text(self) -> str:
        if not self.transaction_check:
            return "—"
        return ", ".join(f"{k}={v}" for k, v in sorted(self.transaction_check.items()))

    @property
    def duration_seconds(self) -> float | None:
        """Wall-clock time from opening the window to marking it complete."""
        if self.opened_at is None or self.completed_at is None:
            return None
        return (self.completed_at - self.opened_at).total_seconds()


@dataclass(frozen=True)
class StreamView:
    """Everything one page shows about one lineage (a stream in one namespace), read in one snapshot."""

    lineage: LineageView
    partitions: tuple[PartitionView, ...]
    windows: tuple[WindowView, ...]
    low_watermark: datetime | None
    edges: tuple[tuple[str, str], ...] = ()
    moves: tuple[tuple[str, str, datetime], ...] = ()  # MUTABLE_KEY_RANGE: (source, destination, time)
    # FINISHED partitions that metadata-store retention (lineage_retention) deleted: counted, no longer listed
    folded_partitions: int = 0
    # COMPLETE windows older than `windows` holds (RECENT_WINDOWS): how many, and their records and files
    older_windows: int = 0
    older_records: int = 0
    older_files: int = 0

    @property
    def windows_total(self) -> int:
        return len(self.windows) + self.older_windows

    @property
    def windows_complete(self) -> int:
        return sum(1 for w in self.windows if w.complete) + self.older_windows

    @property
    def records_total(self) -> int:
        return sum(w.records or 0 for w in self.windows) + self.older_records

    @property
    def files_total(self) -> int:
        return sum(w.files or 0 for w in self.windows) + self.older_files

    @property
    def newest_window(self) -> WindowView | None:
        return max(self.windows, key=lambda w: w.end) if self.windows else None


class StoreLike(Protocol):
    """The part of the metadata store (spanner_cdc.store.MetadataStore) the UI reads."""

    def lineages(self) -> list[Any]: ...

    def get_lineage(self, stream: str, namespace: str) -> Any: ...

    def graph(self, lineage_id: int, *, recent_windows: int | None = None) -> Any: ...


def lineage_view(row: Any) -> LineageView:
    """From spanner_cdc.store.Lineage."""
    return LineageView(id=row.id, stream=row.stream, namespace=row.namespace, database=row.database or None,
                       created_at=row.created_at, retention_period_s=getattr(row, "retention_period_s", None))


def partition_view(row: Any) -> PartitionView:
    """From spanner_cdc.store.PartitionRow."""
    return PartitionView(
        token=row.token,
        state=str(row.state),
        start=row.start,
        end=row.end,
        watermark=row.watermark,
        parents=tuple(row.parents),
        children=tuple(row.children),
        attempts=int(row.attempts),
        last_error=row.last_error,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        state_times={state: getattr(row, f"{state.lower()}_at") for state in STATES},
    )


def window_view(row: Any) -> WindowView:
    """From spanner_cdc.store.WindowRow."""
    return WindowView(
        start=row.start,
        end=row.end,
        state=str(row.state),
        records=row.records,
        files=row.files,
        transaction_check=row.transaction_check,
        opened_at=row.opened_at,
        completed_at=row.closed_at,
        verify=getattr(row, "verify", None),
        marker_path=getattr(row, "marker_path", None),
    )


def load_stream(store: StoreLike, stream: str, namespace: str) -> StreamView:
    """Read one lineage from the store (the store raises NotFound, naming the known lineages, when it is absent)."""
    lineage = store.get_lineage(stream, namespace)
    graph = store.graph(lineage.id, recent_windows=RECENT_WINDOWS)
    return StreamView(
        lineage=lineage_view(graph.lineage),
        partitions=tuple(partition_view(p) for p in graph.nodes),
        windows=tuple(sorted((window_view(w) for w in graph.windows), key=lambda w: w.start)),
        low_watermark=graph.low_watermark,
        edges=tuple(graph.edges),
        moves=tuple(getattr(graph, "moves", ())),
        folded_partitions=int(getattr(graph, "folded_partitions", 0)),
        older_windows=int(getattr(graph, "older_windows", 0)),
        older_records=int(getattr(graph, "older_records", 0)),
        older_files=int(getattr(graph, "older_files", 0)),
    )


def load_lineages(store: StoreLike) -> list[LineageView]:
    return sorted((lineage_view(row) for row in store.lineages()), key=lambda ln: (ln.stream, ln.namespace))
