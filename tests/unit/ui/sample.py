"""A small lineage built from the store's own row types: root A splits into B and C, which merge into D."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spanner_cdc.lineage.rules import State
from spanner_cdc.store.models import Lineage, LineageGraph, PartitionRow, WindowRow
from spanner_cdc.ui.view import StreamView, load_stream

T0 = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
NOW = T0 + 2 * HOUR + timedelta(minutes=30)
LINEAGE = Lineage(7, "orders", "live", "cdc", T0)


def partition(token: str, state: State, start: datetime, watermark: datetime | None, **extra: object) -> PartitionRow:
    values: dict[str, object] = {
        "lineage_id": 7, "token": token, "start": start, "end": None, "state": state, "watermark": watermark,
        "created_at": start, "ready_at": None, "scheduled_at": None, "running_at": None, "finished_at": None,
        "lease_owner": None, "lease_expires_at": None, "attempts": 1, "last_error": None,
    }
    values.update(extra)
    return PartitionRow(**values)  # type: ignore[arg-type]


def sample_graph(**overrides: PartitionRow) -> LineageGraph:
    split_at, merge_at = T0 + timedelta(minutes=20), T0 + HOUR + timedelta(minutes=10)
    rows = {
        "A": partition("A", State.FINISHED, T0, split_at, end=split_at, children=("B", "C")),
        "B": partition("B", State.FINISHED, split_at, merge_at, end=merge_at, parents=("A",), children=("D",)),
        "C": partition("C", State.FINISHED, split_at, merge_at, end=merge_at, parents=("A",), children=("D",)),
        "D": partition("D", State.READY, merge_at, T0 + 2 * HOUR - timedelta(microseconds=1), parents=("B", "C")),
    }
    rows.update(overrides)
    windows = (
        WindowRow(7, T0, T0 + HOUR, "COMPLETE", 120, 3, {"ok": True, "transactions": 40}, None, T0 + HOUR,
                  T0 + HOUR + timedelta(seconds=95)),
        WindowRow(7, T0 + HOUR, T0 + 2 * HOUR, "COMPLETE", 80, 2, {"ok": True}, None, T0 + 2 * HOUR,
                  T0 + 2 * HOUR + timedelta(seconds=65)),
        WindowRow(7, T0 + 2 * HOUR, T0 + 3 * HOUR, "OPEN", None, None, None, None, T0 + 3 * HOUR, None),
    )
    edges = (("A", "B"), ("A", "C"), ("B", "D"), ("C", "D"))
    low = min((r.watermark for r in rows.values() if r.state != State.FINISHED and r.watermark), default=None)
    return LineageGraph(LINEAGE, tuple(rows.values()), edges, low, windows)


class FakeStore:
    """Answers like MetadataStore from a fixed graph; `error` is raised by every call when set."""

    def __init__(self, graph: LineageGraph | None = None, error: Exception | None = None) -> None:
        self.graph_value = graph or sample_graph()
        self.error = error
        self.closed = False

    def _check(self) -> None:
        if self.error is not None:
            raise self.error

    def lineages(self) -> list[Lineage]:
        self._check()
        return [self.graph_value.lineage]

    def get_lineage(self, stream: str, namespace: str) -> Lineage:
        from spanner_cdc.errors import NotFound

        self._check()
        lineage = self.graph_value.lineage
        if (stream, namespace) != (lineage.stream, lineage.namespace):
            raise NotFound(f"no lineage for stream {stream!r} in namespace {namespace!r}")
        return lineage

    def graph(self, lineage_id: int, *, recent_windows: int | None = None) -> LineageGraph:
        self._check()
        return self.graph_value

    def close(self) -> None:
        self.closed = True


def sample_view(**overrides: PartitionRow) -> StreamView:
    return load_stream(FakeStore(sample_graph(**overrides)), "orders", "live")
