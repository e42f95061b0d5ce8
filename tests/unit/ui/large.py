"""A synthetic lineage of thousands of partitions (store row types): every window, each live token splits in two."""

from __future__ import annotations

from datetime import timedelta

from spanner_cdc.lineage.rules import State
from spanner_cdc.store.models import LineageGraph, PartitionRow, WindowRow
from tests.unit.ui.sample import HOUR, LINEAGE, T0, partition

US = timedelta(microseconds=1)


def large_graph(windows: int = 6, roots: int = 120, stuck: int = 3) -> LineageGraph:
    """Each window, half the live tokens split at its middle; the last window is open. `stuck` tokens fail."""
    rows: dict[str, PartitionRow] = {}
    edges: list[tuple[str, str]] = []
    live = [f"r{i:04d}" for i in range(roots)]
    for token in live:
        rows[token] = partition(token, State.READY, T0, None)
    for w in range(windows):
        at = T0 + w * HOUR + HOUR / 2
        survivors = []
        for i, token in enumerate(live):
            if i % 2 == 0:
                kids = (f"{token}.{w}a", f"{token}.{w}b")
                rows[token] = partition(token, State.FINISHED, rows[token].start, at - US, end=at, children=kids,
                                        parents=rows[token].parents)
                for kid in kids:
                    rows[kid] = partition(kid, State.READY, at, None, parents=(token,))
                    edges.append((token, kid))
                survivors += kids
            else:
                survivors.append(token)
        live = survivors
    last_wm = T0 + windows * HOUR - HOUR - US
    for i, token in enumerate(live):
        row = rows[token]
        extra = {"last_error": "DeadlineExceeded", "attempts": 3} if i < stuck else {}
        rows[token] = partition(token, State.READY, row.start, max(last_wm, row.start), parents=row.parents, **extra)
    window_rows = tuple(
        WindowRow(7, T0 + w * HOUR, T0 + (w + 1) * HOUR, "COMPLETE" if w < windows - 1 else "OPEN",
                  1000 if w < windows - 1 else None, 10, {"ok": True} if w < windows - 1 else None, None,
                  T0 + (w + 1) * HOUR, T0 + (w + 1) * HOUR + timedelta(seconds=60) if w < windows - 1 else None)
        for w in range(windows)
    )  # fmt: skip
    low = min(r.watermark for r in rows.values() if r.state != State.FINISHED and r.watermark)
    return LineageGraph(LINEAGE, tuple(rows.values()), tuple(edges), low, window_rows)


# Cloud Spanner's partition tokens are long base64 strings that share most of their start (about 120 characters)
SPANNER_LIKE_PREFIX = "__8BAYEHRk5KCAgIAAAACAAAAgQwAAAAAHAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAQEgA_"


def with_long_tokens(graph: LineageGraph, prefix: str = SPANNER_LIKE_PREFIX) -> LineageGraph:
    """The same lineage with every token as long as a real one: `prefix` + the synthetic name."""
    import dataclasses

    def long(token: str) -> str:
        return prefix + token

    nodes = tuple(
        dataclasses.replace(p, token=long(p.token), parents=tuple(map(long, p.parents)), children=tuple(map(long, p.children)))
        for p in graph.nodes
    )
    edges = tuple((long(a), long(b)) for a, b in graph.edges)
    return dataclasses.replace(graph, nodes=nodes, edges=edges)
