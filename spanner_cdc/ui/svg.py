"""Inline SVG of a partition lineage by time: a column per window, boxes coloured by state, parent -> child arrows."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from html import escape

from spanner_cdc.names import short_token
from spanner_cdc.ui.health import parent_map, splits_and_merges
from spanner_cdc.ui.time_layout import NODE_BUDGET, NODE_HEIGHT, NODE_WIDTH, Column, TimedNode
from spanner_cdc.ui.time_layout import layout as time_layout
from spanner_cdc.ui.view import PartitionView, StreamView

# Fill and text colour per state, close to Airflow's task-state palette so operators read them the same way.
STATE_COLOURS: dict[str, tuple[str, str]] = {
    "CREATED": ("#e0e0e0", "#212121"),
    "READY": ("#90caf9", "#0d2b45"),
    "SCHEDULED": ("#d2b48c", "#3e2a10"),
    "RUNNING": ("#7cdd5a", "#10310a"),
    "FINISHED": ("#2e7d32", "#ffffff"),
}
UNKNOWN_COLOUR = ("#ffffff", "#000000")
SPLIT_EDGE = "#6a1b9a"
MERGE_EDGE = "#e65100"
MOVE_EDGE = "#00838f"
PLAIN_EDGE = "#607d8b"


def _time(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%m-%d %H:%M:%S")


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _edge(parent: str, child: str, a: tuple[int, int], b: tuple[int, int], kind: str) -> str:
    colour = {"merge": MERGE_EDGE, "split": SPLIT_EDGE, "plain": PLAIN_EDGE}[kind]
    x1, y1 = a[0] + NODE_WIDTH, a[1] + NODE_HEIGHT // 2
    x2, y2 = b[0], b[1] + NODE_HEIGHT // 2
    if x2 <= x1:  # a child that starts where its parent does: leave from the parent's bottom edge
        x1, y1 = a[0] + NODE_WIDTH // 2, a[1] + NODE_HEIGHT
    bend = max((x2 - x1) // 2, 20)
    return (
        f'<path class="edge edge-{kind}" data-parent="{_attr(parent)}" data-child="{_attr(child)}" '
        f'd="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" fill="none" stroke="{colour}" '
        f'stroke-width="2" marker-end="url(#arrow-{kind})"/>'
    )


def _node(p: PartitionView, x: int, y: int, tags: list[str], is_stuck: bool) -> str:
    fill, ink = STATE_COLOURS.get(p.state, UNKNOWN_COLOUR)
    border = ' stroke="#c62828" stroke-width="3" stroke-dasharray="6 3"' if is_stuck else ' stroke="#37474f"'
    classes = " ".join(["node", f"state-{p.state}", *tags, *(["stuck"] if is_stuck else [])])
    tooltip = f"{p.token}\nstate {p.state.lower()}\nstart {p.start}\ncheckpoint (watermark) {p.watermark}\nattempts {p.attempts}"
    return (
        f'<g class="{classes}" data-token="{_attr(p.token)}" data-state="{_attr(p.state)}" '
        f'transform="translate({x},{y})"><title>{escape(tooltip)}</title>'
        f'<rect width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="8" fill="{fill}"{border}/>'
        f'<text x="10" y="20" fill="{ink}" font-family="monospace" font-size="13" font-weight="bold">'
        f"{escape(short_token(p.token))}</text>"
        f'<text x="10" y="38" fill="{ink}" font-family="sans-serif" font-size="12">{escape(p.state.lower())}'
        f"{escape(' · ' + ' + '.join(tags)) if tags else ''}</text>"
        f'<text x="10" y="55" fill="{ink}" font-family="sans-serif" font-size="11">checkpoint {_time(p.watermark)}</text>'
        "</g>"
    )


def _column(col: Column, expand_href: Callable[[datetime], str] | None) -> str:
    label = f"{col.start:%m-%d %H:%M} → {col.end:%H:%M}"
    out = [
        f'<g class="window-column" data-window-start="{_attr(col.start.isoformat())}" '
        f'data-expanded="{str(col.expanded).lower()}" data-hidden="{len(col.hidden)}">'
        f'<rect x="{col.x}" y="0" width="{col.width - 4}" height="100%" fill="#f1f4f8" opacity="0.6"/>'
        f'<text x="{col.x + 8}" y="18" font-family="sans-serif" font-size="12" fill="#37474f">window {escape(label)}</text>'
    ]
    if col.hidden:
        text = f"{len(col.hidden)} finished partition{'s' if len(col.hidden) != 1 else ''}"
        box = (
            f'<rect x="{col.x + 8}" y="28" width="{col.width - 20}" height="48" rx="6" fill="#ffffff" '
            f'stroke="#90a4ae" stroke-dasharray="4 3"/>'
            f'<text x="{col.x + 16}" y="48" font-family="sans-serif" font-size="12">{escape(text)}</text>'
            f'<text x="{col.x + 16}" y="66" font-family="sans-serif" font-size="11" fill="#1565c0">show them</text>'
        )
        href = expand_href(col.start) if expand_href else None
        out.append(f'<a class="history" href="{_attr(href)}">{box}</a>' if href else box)
    out.append("</g>")
    return "".join(out)


def render_lineage_svg(
    view: StreamView,
    stuck_tokens: frozenset[str] = frozenset(),
    *,
    expand: frozenset[datetime] = frozenset(),
    budget: int = NODE_BUDGET,
    expand_href: Callable[[datetime], str] | None = None,
) -> str:
    """The graph by time as one <svg>: a column per window, finished history of older windows collapsed into
    a box that links to `expand_href(window start)`; nodes and edges carry data-* attributes."""
    parents = parent_map(view)
    by_token = {p.token: p for p in view.partitions}
    nodes = [TimedNode(p.token, p.start, p.end, p.state == "FINISHED") for p in view.partitions]
    placed = time_layout(nodes, [(w.start, w.end) for w in view.windows], expand, budget)
    splits, merges = splits_and_merges(view, parents)
    width, height = max(placed.width, 1), max(placed.height, 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" '
        f'aria-label="partition lineage of {_attr(view.lineage.stream)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        "<defs>",
    ]
    for name, colour in (("plain", PLAIN_EDGE), ("split", SPLIT_EDGE), ("merge", MERGE_EDGE), ("move", MOVE_EDGE)):
        out.append(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
        )
    out.append("</defs>")
    out += [_column(col, expand_href) for col in placed.columns]
    at = placed.positions
    for child in sorted(at):
        for parent in parents[child]:
            if parent in at:
                kind = "merge" if child in merges else "split" if parent in splits else "plain"
                out.append(_edge(parent, child, at[parent], at[child], kind))
    out.extend(_move_paths(view, at))
    for token in sorted(at):
        tags = [t for t, on in (("split", token in splits), ("merge", token in merges)) if on]
        out.append(_node(by_token[token], *at[token], tags, token in stuck_tokens))
    out.append("</svg>")
    return "".join(out)


def legend_svg() -> str:
    """The state colours and edge kinds, drawn the same way as the graph."""
    items = []
    x = 0
    for state, (fill, ink) in STATE_COLOURS.items():
        items.append(
            f'<g transform="translate({x},0)"><rect width="96" height="22" rx="5" fill="{fill}" stroke="#37474f"/>'
            f'<text x="8" y="15" fill="{ink}" font-family="sans-serif" font-size="11">{state}</text></g>'
        )
        x += 104
    for label, colour in (("split edge", SPLIT_EDGE), ("merge edge", MERGE_EDGE)):
        items.append(
            f'<g transform="translate({x},0)"><line x1="0" y1="11" x2="28" y2="11" stroke="{colour}" stroke-width="3"/>'
            f'<text x="34" y="15" font-family="sans-serif" font-size="11">{label}</text></g>'
        )
        x += 110
    return f'<svg xmlns="http://www.w3.org/2000/svg" class="legend" width="{x}" height="24">{"".join(items)}</svg>'


def _move_paths(view: StreamView, placed: dict[str, tuple[int, int]]) -> list[str]:
    """Key range moves (MUTABLE_KEY_RANGE): dashed arcs on the right of the two partitions, with their time."""
    out = []
    for index, (source, destination, at) in enumerate(view.moves):
        if source not in placed or destination not in placed:
            continue
        a, b = placed[source], placed[destination]
        x1, y1 = a[0] + NODE_WIDTH, a[1] + NODE_HEIGHT // 2 - 6
        x2, y2 = b[0] + NODE_WIDTH, b[1] + NODE_HEIGHT // 2 + 6
        bulge = 30 + 12 * (index % 4)  # moves between the same neighbours stay apart
        out.append(
            f'<path class="edge edge-move" data-source="{_attr(source)}" data-destination="{_attr(destination)}" '
            f'data-at="{_attr(at.isoformat())}" d="M {x1} {y1} C {x1 + bulge} {y1}, {x2 + bulge} {y2}, {x2} {y2}" '
            f'fill="none" stroke="{MOVE_EDGE}" stroke-width="2" stroke-dasharray="5 3" marker-end="url(#arrow-move)">'
            f"<title>{escape(f'keys moved {short_token(source)} -> {short_token(destination)} at {at}')}</title></path>"
        )
    return out
