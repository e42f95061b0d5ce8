"""SVG rendering of a lineage with a split and a merge."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

from spanner_cdc.lineage.rules import State
from spanner_cdc.ui.svg import render_lineage_svg
from tests.unit.ui.sample import T0, partition, sample_view

SVG = "{http://www.w3.org/2000/svg}"


def test_svg_shows_nodes_states_edges_split_and_merge() -> None:
    root = ET.fromstring(render_lineage_svg(sample_view()))
    nodes = {g.get("data-token"): g for g in root.iter(f"{SVG}g") if g.get("data-token")}
    assert set(nodes) == {"A", "B", "C", "D"}
    assert {t: g.get("data-state") for t, g in nodes.items()} == {
        "A": "FINISHED", "B": "FINISHED", "C": "FINISHED", "D": "READY"
    }
    assert "split" in (nodes["A"].get("class") or "").split()
    assert "merge" in (nodes["D"].get("class") or "").split()
    edges = {(p.get("data-parent"), p.get("data-child")): p.get("class") for p in root.iter(f"{SVG}path")
             if p.get("data-parent")}
    assert edges == {
        ("A", "B"): "edge edge-split", ("A", "C"): "edge edge-split",
        ("B", "D"): "edge edge-merge", ("C", "D"): "edge edge-merge",
    }
    fills = {t: g.find(f"{SVG}rect").get("fill") for t, g in nodes.items()}  # type: ignore[union-attr]
    assert fills["A"] != fills["D"]


def test_svg_escapes_tokens_and_marks_stuck_nodes() -> None:
    evil = 'tok<script>"&'
    view = sample_view(D=partition(evil, State.RUNNING, T0, None, parents=("B", "C")))
    text = render_lineage_svg(view, frozenset({evil}))
    assert "<script>" not in text
    root = ET.fromstring(text)
    stuck = [g for g in root.iter(f"{SVG}g") if g.get("data-token") == evil]
    assert len(stuck) == 1 and "stuck" in (stuck[0].get("class") or "").split()


def test_svg_draws_key_range_moves_of_long_lived_partitions() -> None:
    from spanner_cdc.store.models import LineageGraph
    from spanner_cdc.ui.app import stream_json
    from spanner_cdc.ui.view import load_stream
    from tests.unit.ui.sample import LINEAGE, FakeStore

    moved_at = T0 + timedelta(minutes=7)
    rows = (partition("P", State.READY, T0, None), partition("Q", State.READY, T0 + timedelta(minutes=5), None))
    graph = LineageGraph(LINEAGE, rows, (), None, (), moves=(("P", "Q", moved_at), ("P", "gone", moved_at)))
    view = load_stream(FakeStore(graph), "orders", "live")
    root = ET.fromstring(render_lineage_svg(view))
    moves = [p for p in root.iter(f"{SVG}path") if "edge-move" in (p.get("class") or "")]
    # one arc between known partitions (a move naming an unknown one is not drawn), with its time
    assert [(p.get("data-source"), p.get("data-destination"), p.get("data-at")) for p in moves] == [
        ("P", "Q", moved_at.isoformat())
    ]
    assert not [p for p in root.iter(f"{SVG}path") if p.get("data-parent")]  # no parent edges in this mode
    document = stream_json(view, moved_at + timedelta(hours=1))
    assert document["moves"][0] == {"source": "P", "destination": "Q", "at": moved_at.isoformat()}
