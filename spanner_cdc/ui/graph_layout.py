"""A deterministic layered layout of a partition lineage: roots on the left, children one column to the right."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

NODE_WIDTH = 200
NODE_HEIGHT = 64
COLUMN_GAP = 90
ROW_GAP = 22
MARGIN = 20


@dataclass(frozen=True)
class NodeInput:
    token: str
    parents: tuple[str, ...]
    start: datetime | None = None


@dataclass(frozen=True)
class PlacedNode:
    token: str
    layer: int
    row: int
    x: int
    y: int


@dataclass(frozen=True)
class Layout:
    nodes: Mapping[str, PlacedNode]
    edges: tuple[tuple[str, str], ...]
    width: int
    height: int


def _layers(nodes: Mapping[str, NodeInput]) -> dict[str, int]:
    """Layer = length of the longest parent chain, so a merge child sits right of all its parents."""
    pending = {token: [p for p in node.parents if p in nodes] for token, node in nodes.items()}
    layer: dict[str, int] = {}
    while pending:
        ready = sorted(t for t, parents in pending.items() if all(p in layer for p in parents))
        if not ready:
            # A cycle cannot come from Spanner; place what is left after everything else rather than loop.
            base = max(layer.values(), default=-1) + 1
            layer.update(dict.fromkeys(pending, base))
            break
        for token in ready:
            layer[token] = 1 + max((layer[p] for p in pending[token]), default=-1)
            del pending[token]
    return layer


def _sort_key(node: NodeInput) -> tuple[float, str]:
    return (node.start.timestamp() if node.start else float("-inf"), node.token)


def layout(inputs: Iterable[NodeInput]) -> Layout:
    """Place every token; rows within a column follow the mean row of the parents, then start, then token."""
    nodes = {n.token: n for n in inputs}
    layers = _layers(nodes)
    columns: dict[int, list[str]] = {}
    for token, index in layers.items():
        columns.setdefault(index, []).append(token)
    rows: dict[str, float] = {}
    for index in sorted(columns):
        def key(token: str) -> tuple[float, float, str]:
            parent_rows = [rows[p] for p in nodes[token].parents if p in rows]
            centre = sum(parent_rows) / len(parent_rows) if parent_rows else 0.0
            return (centre, *_sort_key(nodes[token]))

        columns[index].sort(key=key)
        for row, token in enumerate(columns[index]):
            rows[token] = float(row)
    tallest = max((len(c) for c in columns.values()), default=0)
    placed: dict[str, PlacedNode] = {}
    for index, tokens in columns.items():
        # Centre short columns against the tallest one so splits fan out and merges fan in visibly.
        offset = (tallest - len(tokens)) * (NODE_HEIGHT + ROW_GAP) // 2
        for row, token in enumerate(tokens):
            placed[token] = PlacedNode(
                token=token,
                layer=index,
                row=row,
                x=MARGIN + index * (NODE_WIDTH + COLUMN_GAP),
                y=MARGIN + offset + row * (NODE_HEIGHT + ROW_GAP),
            )
    edges = tuple(
        sorted((parent, token) for token, node in nodes.items() for parent in node.parents if parent in nodes)
    )
    width = 2 * MARGIN + len(columns) * NODE_WIDTH + max(len(columns) - 1, 0) * COLUMN_GAP
    height = 2 * MARGIN + tallest * NODE_HEIGHT + max(tallest - 1, 0) * ROW_GAP
    return Layout(nodes=placed, edges=edges, width=width, height=height)
