"""Renders a lineage graph as a text tree (states, watermarks, lag), JSON, or Graphviz dot."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from spanner_cdc.lineage.rules import State
from spanner_cdc.names import short_token
from spanner_cdc.store.models import LineageGraph, PartitionRow, WindowRow
from spanner_cdc.times import human_duration, iso_z

FORMATS = ("text", "json", "dot")
STATE_COLOURS = {
    State.CREATED: "#eeeeee",
    State.READY: "#bbdefb",
    State.SCHEDULED: "#fff9c4",
    State.RUNNING: "#ffe0b2",
    State.FINISHED: "#c8e6c9",
}


def render(graph: LineageGraph, fmt: str, *, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    if fmt == "text":
        return render_text(graph, now=now)
    if fmt == "json":
        return render_json(graph, now=now)
    if fmt == "dot":
        return render_dot(graph)
    raise ValueError(f"unknown format {fmt!r}: expected one of {', '.join(FORMATS)}")



def lag_seconds(node: PartitionRow, now: datetime) -> float | None:
    """How far the partition's landed data trails `now`; None once it is finished."""
    if node.state is State.FINISHED:
        return None
    return max(0.0, (now - node.effective_watermark).total_seconds())




def _node_line(node: PartitionRow, now: datetime, known: set[str]) -> str:
    parts = [short_token(node.token), node.state.value, f"start {iso_z(node.start)}"]
    if node.state is State.FINISHED:
        parts.append(f"end {iso_z(node.end)}")
    else:
        parts.append(f"watermark {iso_z(node.watermark) or '-'}")
        parts.append(f"lag {human_duration(lag_seconds(node, now))}")
    if node.attempts:
        parts.append(f"attempts {node.attempts}")
    if node.state in (State.RUNNING, State.SCHEDULED) and node.lease_owner:
        parts.append(f"lease {node.lease_owner} until {iso_z(node.lease_expires_at)}")
    if len(node.parents) > 1:
        parts.append("merge of " + ", ".join(short_token(p) for p in node.parents))
    # only a CREATED child waits for its parents; a parent another node lacks is one retention folded
    unknown = [p for p in node.parents if p not in known] if node.state is State.CREATED else []
    if unknown:
        parts.append("waiting for unknown parent " + ", ".join(short_token(p) for p in unknown))
    if node.last_error:
        error = node.last_error.splitlines()[0] if node.last_error.strip() else node.last_error
        parts.append(f"last error: {error[:80]}")
    return "  ".join(parts)


def _summary(graph: LineageGraph, now: datetime) -> list[str]:
    lineage = graph.lineage
    counts = Counter(node.state.value for node in graph.nodes)
    counts[State.FINISHED.value] += graph.folded_partitions  # deleted by retention, still counted
    by_state = ", ".join(f"{counts[s.value]} {s.value}" for s in State if counts[s.value])
    low = graph.low_watermark
    low_text = f"{iso_z(low)} (lag {human_duration(max(0.0, (now - low).total_seconds()))})" if low else "- (all finished)"
    database = f", database {lineage.database}" if lineage.database else ""
    lines = [
        f"lineage {lineage.name} (id {lineage.id}{database}): {len(graph.nodes) + graph.folded_partitions} partitions"
        + (f" ({by_state})" if by_state else ""),
        f"low watermark {low_text}",
    ]
    if graph.windows:
        complete = [w for w in graph.windows if w.state == "COMPLETE"]
        open_windows = [w for w in graph.windows if w.state != "COMPLETE"]
        text = f"windows: {len(complete)} complete, {len(open_windows)} open"
        if complete:
            last = complete[-1]
            text += f"; last complete [{iso_z(last.start)}, {iso_z(last.end)}) with {last.records} records in {last.files} files"
        lines.append(text)
    if graph.folded_windows:
        lines.append(
            f"retention: {graph.folded_windows} closed windows folded into per-window totals; their "
            f"{graph.folded_partitions} finished partitions are counted above, not listed below"
        )
    return lines


def render_text(graph: LineageGraph, *, now: datetime) -> str:
    by_token = {node.token: node for node in graph.nodes}
    known = set(by_token)
    children: dict[str, list[str]] = {}
    for parent, child in graph.edges:
        if parent in known and child in known:
            children.setdefault(parent, []).append(child)
    for tokens in children.values():
        tokens.sort(key=lambda t: (by_token[t].start, t))
    roots = [n.token for n in graph.nodes if not any(p in known for p in n.parents)]
    lines = _summary(graph, now)
    if not graph.nodes:
        lines.append("(no partitions yet: the first extract bootstraps the root partitions)")
        return "\n".join(lines) + "\n"
    shown: set[str] = set()

    def walk(token: str, prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└─ " if last else "├─ ")
        if token in shown:
            lines.append(f"{prefix}{branch}{short_token(token)}  (merge child, shown above)")
            return
        shown.add(token)
        lines.append(prefix + branch + _node_line(by_token[token], now, known))
        below = prefix if top else prefix + ("   " if last else "│  ")
        kids = children.get(token, [])
        for index, kid in enumerate(kids):
            walk(kid, below, index == len(kids) - 1, False)

    for root in roots:
        walk(root, "", True, True)
    if graph.moves:
        lines.append(f"key range moves: {len(graph.moves)}")
        lines.extend(f"  {iso_z(at)}  {short_token(source)} -> {short_token(destination)}" for source, destination, at in graph.moves)
    return "\n".join(lines) + "\n"


def _window_json(window: WindowRow) -> dict[str, Any]:
    return {
        "start": iso_z(window.start),
        "end": iso_z(window.end),
        "state": window.state,
        "records": window.records,
        "files": window.files,
        "transaction_check": window.transaction_check,
        "marker_path": window.marker_path,
        "opened_at": iso_z(window.opened_at),
        "closed_at": iso_z(window.closed_at),
    }


def _node_json(node: PartitionRow, now: datetime) -> dict[str, Any]:
    return {
        "token": node.token,
        "state": node.state.value,
        "start": iso_z(node.start),
        "end": iso_z(node.end),
        "watermark": iso_z(node.watermark),
        "lag_seconds": lag_seconds(node, now),
        "created_at": iso_z(node.created_at),
        "ready_at": iso_z(node.ready_at),
        "scheduled_at": iso_z(node.scheduled_at),
        "running_at": iso_z(node.running_at),
        "finished_at": iso_z(node.finished_at),
        "lease_owner": node.lease_owner,
        "lease_expires_at": iso_z(node.lease_expires_at),
        "attempts": node.attempts,
        "last_error": node.last_error,
        "parents": list(node.parents),
        "children": list(node.children),
    }


def render_json(graph: LineageGraph, *, now: datetime) -> str:
    lineage = graph.lineage
    low = graph.low_watermark
    document = {
        "lineage": {
            "id": lineage.id,
            "stream": lineage.stream,
            "namespace": lineage.namespace,
            "database": lineage.database,
            "created_at": iso_z(lineage.created_at),
        },
        "as_of": iso_z(now),
        "low_watermark": iso_z(low),
        "lag_seconds": None if low is None else max(0.0, (now - low).total_seconds()),
        "partitions": [_node_json(node, now) for node in graph.nodes],
        "edges": [{"parent": parent, "child": child} for parent, child in graph.edges],
        "windows": [_window_json(window) for window in graph.windows],
        "moves": [{"source": s, "destination": d, "at": iso_z(at)} for s, d, at in graph.moves],
    }
    if graph.folded_windows:  # retention: what the per-window totals hold (not listed above)
        document["folded"] = {"windows": graph.folded_windows, "partitions": graph.folded_partitions}
    return json.dumps(document, indent=2) + "\n"


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _dot_id(text: str) -> str:
    return '"' + _dot_escape(text) + '"'


def render_dot(graph: LineageGraph) -> str:
    lines = [
        f"digraph {_dot_id(graph.lineage.name)} {{",
        "  rankdir=LR;",
        '  node [shape=box, style="rounded,filled", fontname="monospace"];',
    ]
    known = {node.token for node in graph.nodes}
    for node in graph.nodes:
        mark = iso_z(node.end) if node.state is State.FINISHED else (iso_z(node.watermark) or "-")
        label = f"{_dot_escape(short_token(node.token))}\\n{node.state.value}\\n{'end' if node.state is State.FINISHED else 'wm'} {mark}"
        lines.append(f'  {_dot_id(node.token)} [label="{label}", fillcolor="{STATE_COLOURS[node.state]}"];')
    for parent in sorted({p for p, _ in graph.edges} - known):
        lines.append(f'  {_dot_id(parent)} [label="{_dot_escape(short_token(parent))}\\nunknown", style=dashed, fillcolor=white];')
    for parent, child in graph.edges:
        lines.append(f"  {_dot_id(parent)} -> {_dot_id(child)};")
    for source, destination, at in graph.moves:  # key range moves: dashed, labelled with their time
        lines.append(f'  {_dot_id(source)} -> {_dot_id(destination)} [style=dashed, label="{_dot_escape(iso_z(at) or "")}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
