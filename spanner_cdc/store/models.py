"""Immutable values the metadata store hands out: lineages, claims, partitions, windows, manifest files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spanner_cdc.errors import StoreError
from spanner_cdc.lineage import rules

if TYPE_CHECKING:
    from spanner_cdc.model.records import ChildPartitionsRecord, PartitionEventRecord, PartitionStartRecord


class LeaseLost(StoreError):
    """A worker's claim on a token is no longer its own (lease expired and reclaimed, or finished)."""


@dataclass(frozen=True, slots=True)
class Lineage:
    """The partition lineage of one stream in one namespace (`live`, or one per backfill run)."""

    id: int
    stream: str
    namespace: str
    database: str
    created_at: datetime
    # the stream's retention_period as the lineage's last plan read it (None until then)
    retention_period_s: int | None = None

    @property
    def name(self) -> str:
        return f"{self.stream}/{self.namespace}"


@dataclass(frozen=True, slots=True)
class Claim:
    """A token leased to one worker for one attempt; `attempt` makes every later write a compare-and-set."""

    lineage_id: int
    token: str
    partition_start: datetime
    watermark: datetime | None
    owner: str
    attempt: int
    lease_expires_at: datetime

    @property
    def read_from(self) -> datetime:
        return rules.read_from(self.watermark, self.partition_start)


@dataclass(frozen=True, slots=True)
class ManifestFile:
    """One published file: its deterministic path and the (token, commit timestamp range) it holds."""

    path: str
    token: str
    range_start: datetime
    range_end: datetime
    window_start: datetime | None
    window_end: datetime | None
    rows: int
    bytes: int
    table_name: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    lineage_id: int
    token: str
    start: datetime
    end: datetime | None
    state: rules.State
    watermark: datetime | None
    created_at: datetime
    ready_at: datetime | None
    scheduled_at: datetime | None
    running_at: datetime | None
    finished_at: datetime | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    last_error: str | None
    parents: tuple[str, ...] = ()
    children: tuple[str, ...] = ()

    @property
    def read_from(self) -> datetime:
        return rules.read_from(self.watermark, self.start)

    @property
    def effective_watermark(self) -> datetime:
        return rules.effective_watermark(self.watermark, self.start)


@dataclass(frozen=True, slots=True)
class Completion:
    """One claim's landed range for `complete_many`: the same arguments `complete` takes for one token."""

    claim: Claim
    watermark: datetime
    finished: bool
    children: tuple[ChildPartitionsRecord, ...] = ()
    files: tuple[ManifestFile, ...] = ()
    records: int = 0
    window_start: datetime | None = None
    window_end: datetime | None = None
    started: tuple[PartitionStartRecord, ...] = ()  # MUTABLE_KEY_RANGE: partitions announced by start records
    moves: tuple[PartitionEventRecord, ...] = ()  # MUTABLE_KEY_RANGE: key range moves, kept as edges
    # completions of one group land together or not at all: tokens whose rows share a file (default: its own token)
    group: str = ""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch did: tokens landed, tokens whose claim was lost (left untouched), children made READY."""

    landed: tuple[str, ...]
    lost: tuple[LeaseLost, ...]
    promoted: tuple[str, ...]
    # tokens still held by their claim but not landed, because a token of their group lost its claim
    held_back: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WindowStatus:
    """Whether window [start, end) is complete, and which tokens hold it up, grouped by state."""

    lineage_id: int
    start: datetime
    end: datetime
    complete: bool
    partitions: int
    pending: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    closed: bool = False

    @property
    def pending_count(self) -> int:
        return sum(len(tokens) for tokens in self.pending.values())


@dataclass(frozen=True, slots=True)
class WindowRow:
    lineage_id: int
    start: datetime
    end: datetime
    state: str  # OPEN or COMPLETE
    records: int | None
    files: int | None
    transaction_check: Mapping[str, Any] | None
    marker_path: str | None
    opened_at: datetime
    closed_at: datetime | None
    verify: Mapping[str, Any] | None = None  # the last `spanner-cdc verify` of the window (None: never verified)


@dataclass(frozen=True, slots=True)
class WindowTotals:
    """What metadata-store retention folded of one closed window: the rows it deleted, counted (see store.retention)."""

    lineage_id: int
    start: datetime
    end: datetime
    partitions: int  # FINISHED partitions deleted with this window (those that ended before its end)
    attempts: int
    attempts_failed: int  # FAILED or EXPIRED among them
    attempt_records: int  # records the deleted attempts landed
    files: int  # manifest rows deleted (the files stay, listed by the window's marker and Iceberg snapshot)
    rows: int
    bytes: int
    moves: int  # MUTABLE_KEY_RANGE key range moves deleted
    folded_at: datetime


@dataclass(frozen=True, slots=True)
class LineageGraph:
    """Nodes and parent -> child edges of a lineage, for display; edges may name parents not yet known."""

    lineage: Lineage
    nodes: tuple[PartitionRow, ...]
    edges: tuple[tuple[str, str], ...]
    low_watermark: datetime | None
    windows: tuple[WindowRow, ...] = ()
    # MUTABLE_KEY_RANGE: (source, destination, time) of each key range move between partitions
    moves: tuple[tuple[str, str, datetime], ...] = ()
    # metadata-store retention: closed windows folded, and the FINISHED partitions deleted with them
    folded_windows: int = 0
    folded_partitions: int = 0
    # graph(recent_windows=N): windows left out of `windows` (all COMPLETE), their count and sums, from SQL
    older_windows: int = 0
    older_records: int = 0
    older_files: int = 0
