"""A lineage laid out by time: one column per window, boxes at their start time, finished history collapsed."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

NODE_WIDTH = 200
NODE_HEIGHT = 64
GAP = 24
ROW_GAP = 14
HEADER = 96  # window label, and the summary box of a collapsed window's history
MARGIN = 16
EXPANDED_WIDTH = 3 * (NODE_WIDTH + GAP) + GAP
COLLAPSED_WIDTH = NODE_WIDTH + 2 * GAP
# Boxes drawn before older windows are collapsed: about what a browser draws in well under a second.
NODE_BUDGET = 1200


@dataclass(frozen=True)
class TimedNode:
    token: str
    start: datetime | None
    end: datetime | None
    finished: bool


@dataclass(frozen=True)
class Column:
    start: datetime
    end: datetime
    x: int
    width: int
    expanded: bool
    hidden: tuple[str, ...]  # finished partitions of this window that are not drawn


@dataclass(frozen=True)
class TimeLayout:
    columns: tuple[Column, ...]
    positions: dict[str, tuple[int, int]]  # token -> (x, y) of its box
    width: int
    height: int


def _columns(windows: Sequence[tuple[datetime, datetime]], nodes: Sequence[TimedNode]) -> list[tuple[datetime, datetime]]:
    if windows:
        return sorted(set(windows))
    starts = [n.start for n in nodes if n.start is not None]
    first = min(starts, default=datetime(1970, 1, 1))
    return [(first, max(starts, default=first) + timedelta(seconds=1))]


def _column_of(starts: list[datetime], at: datetime | None) -> int:
    """The window holding `at`, clamped to the first and last window (None: the first)."""
    return 0 if at is None else max(0, bisect_right(starts, at) - 1)


def _finished_in(node: TimedNode) -> datetime | None:
    # a finished partition belongs to the history of the window it ended in
    return node.end or node.start


def layout(
    nodes: Sequence[TimedNode],
    windows: Sequence[tuple[datetime, datetime]],
    expand: frozenset[datetime] = frozenset(),
    budget: int = NODE_BUDGET,
) -> TimeLayout:
    """Every unfinished partition is drawn; finished ones only in expanded windows.

    The newest window is always expanded, then older ones while the drawing stays within `budget` boxes;
    windows whose start is in `expand` are expanded whatever the budget.
    """
    spans = _columns(windows, nodes)
    starts = [s for s, _ in spans]
    history: list[list[str]] = [[] for _ in spans]
    shown = [n for n in nodes if not n.finished]
    for n in nodes:
        if n.finished:
            history[_column_of(starts, _finished_in(n))].append(n.token)
    expanded = {i for i, (s, _) in enumerate(spans) if s in expand}
    count = len(shown) + sum(len(history[i]) for i in expanded)
    for i in reversed(range(len(spans))):
        if i in expanded:
            continue
        if i == len(spans) - 1 or count + len(history[i]) <= budget:
            expanded.add(i)
            count += len(history[i])
        else:
            break
    by_token = {n.token: n for n in nodes}
    shown += [by_token[t] for i in sorted(expanded) for t in history[i]]
    columns, x = [], MARGIN
    for i, (s, e) in enumerate(spans):
        width = EXPANDED_WIDTH if i in expanded else COLLAPSED_WIDTH
        columns.append(Column(s, e, x, width, i in expanded, () if i in expanded else tuple(sorted(history[i]))))
        x += width
    positions = _place(shown, columns, starts)
    height = max((y + NODE_HEIGHT for _, y in positions.values()), default=HEADER) + MARGIN
    return TimeLayout(tuple(columns), positions, x + MARGIN, height)


def _place(nodes: Sequence[TimedNode], columns: Sequence[Column], starts: list[datetime]) -> dict[str, tuple[int, int]]:
    """x from the start time within its window's column; y the first lane free at that x (no two boxes overlap)."""
    xs: dict[str, int] = {}
    for n in nodes:
        col = columns[_column_of(starts, n.start)]
        if not col.expanded or n.start is None:
            xs[n.token] = col.x + GAP
            continue
        span = (col.end - col.start).total_seconds() or 1.0
        fraction = min(max((n.start - col.start).total_seconds() / span, 0.0), 1.0)
        xs[n.token] = col.x + GAP + int(fraction * (col.width - NODE_WIDTH - 2 * GAP))
    free: list[tuple[int, int]] = []  # (right edge of its last box, lane), the lane that frees first on top
    lanes = 0
    placed: dict[str, tuple[int, int]] = {}
    for token in sorted(xs, key=lambda t: (xs[t], t)):
        x = xs[token]
        if free and free[0][0] + GAP <= x:
            _, lane = heapq.heappop(free)
        else:
            lane, lanes = lanes, lanes + 1
        heapq.heappush(free, (x + NODE_WIDTH, lane))
        placed[token] = (x, HEADER + lane * (NODE_HEIGHT + ROW_GAP))
    return placed
