"""Inline SVG of a partition lineage: one box per token coloured by state, parent -> child arrows."""

from __future__ import annotations

from datetime import datetime
from html import escape

from spanner_cdc.names import short_token
from spanner_cdc.ui.graph_layout import NODE_HEIGHT, NODE_WIDTH, NodeInput, layout
from spanner_cdc.ui.health import parent_map, splits_and_merges
from spanner_cdc.ui.view import StreamView

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
PLAIN_EDGE = "#607d8b"


def _time(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%m-%d %H:%M:%S")


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def render_lineage_svg(view: StreamView, stuck_tokens: frozenset[str] = frozenset()) -> str:
    """The whole graph as one <svg> element; nodes and edges carry data-* attributes for scripts and tests."""
    parents = parent_map(view)
    by_token = {p.token: p for p in view.partitions}
    placed = layout(NodeInput(t, parents[t], by_token[t].start) for t in sorted(by_token))
    splits, merges = splits_and_merges(view)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" role="img" '
        f'aria-label="partition lineage of {_attr(view.lineage.stream)}" '
        f'width="{max(placed.width, 1)}" height="{max(placed.height, 1)}" '
        f'viewBox="0 0 {max(placed.width, 1)} {max(placed.height, 1)}">',
        "<defs>",
    ]
    for name, colour in (("plain", PLAIN_EDGE), ("split", SPLIT_EDGE), ("merge", MERGE_EDGE)):
        out.append(
            f'<marker id="arrow-{name}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{colour}"/></marker>'
        )
    out.append("</defs>")
    for parent, child in placed.edges:
        a, b = placed.nodes[parent], placed.nodes[child]
        kind = "merge" if child in merges else "split" if parent in splits else "plain"
        colour = {"merge": MERGE_EDGE, "split": SPLIT_EDGE, "plain": PLAIN_EDGE}[kind]
        x1, y1 = a.x + NODE_WIDTH, a.y + NODE_HEIGHT // 2
        x2, y2 = b.x, b.y + NODE_HEIGHT // 2
        bend = (x2 - x1) // 2
        out.append(
            f'<path class="edge edge-{kind}" data-parent="{_attr(parent)}" data-child="{_attr(child)}" '
            f'd="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" fill="none" stroke="{colour}" '
            f'stroke-width="2" marker-end="url(#arrow-{kind})"/>'
        )
    for token in sorted(placed.nodes):
        node, p = placed.nodes[token], by_token[token]
        fill, ink = STATE_COLOURS.get(p.state, UNKNOWN_COLOUR)
        tags = [t for t, on in (("split", token in splits), ("merge", token in merges)) if on]
        is_stuck = token in stuck_tokens
        border = ' stroke="#c62828" stroke-width="3" stroke-dasharray="6 3"' if is_stuck else ' stroke="#37474f"'
        classes = " ".join(["node", f"state-{p.state}", *tags, *(["stuck"] if is_stuck else [])])
        tooltip = f"{token}\nstate {p.state}\nstart {p.start}\nwatermark {p.watermark}\nattempts {p.attempts}"
        out.append(
            f'<g class="{classes}" data-token="{_attr(token)}" data-state="{_attr(p.state)}" '
            f'transform="translate({node.x},{node.y})"><title>{escape(tooltip)}</title>'
            f'<rect width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="8" fill="{fill}"{border}/>'
            f'<text x="10" y="20" fill="{ink}" font-family="monospace" font-size="13" font-weight="bold">'
            f"{escape(short_token(token))}</text>"
            f'<text x="10" y="38" fill="{ink}" font-family="sans-serif" font-size="12">{escape(p.state)}'
            f"{escape(' · ' + ' + '.join(tags)) if tags else ''}</text>"
            f'<text x="10" y="55" fill="{ink}" font-family="sans-serif" font-size="11">wm {_time(p.watermark)}</text>'
            "</g>"
        )
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
