"""Layered layout and SVG rendering of a lineage with a split and a merge."""

from __future__ import annotations

import random
import xml.etree.ElementTree as ET

from spanner_cdc.lineage.rules import State
from spanner_cdc.ui.graph_layout import NODE_WIDTH, NodeInput, layout
from spanner_cdc.ui.svg import render_lineage_svg
from tests.unit.ui.sample import T0, partition, sample_view

SVG = "{http://www.w3.org/2000/svg}"


def test_layers_follow_the_longest_parent_chain() -> None:
    # A -> B -> C and A -> D, then C and D merge into E: E must sit right of C, not of D.
    nodes = [NodeInput("A", ()), NodeInput("B", ("A",)), NodeInput("C", ("B",)), NodeInput("D", ("A",)),
             NodeInput("E", ("C", "D"))]
    placed = layout(nodes)
    assert {t: n.layer for t, n in placed.nodes.items()} == {"A": 0, "B": 1, "D": 1, "C": 2, "E": 3}
    assert placed.edges == (("A", "B"), ("A", "D"), ("B", "C"), ("C", "E"), ("D", "E"))
    assert placed.nodes["E"].x > placed.nodes["C"].x > placed.nodes["B"].x > placed.nodes["A"].x
    assert placed.width >= placed.nodes["E"].x + NODE_WIDTH


def test_layout_is_deterministic_whatever_the_input_order() -> None:
    nodes = [NodeInput(f"t{i}", (f"t{i // 2}",) if i else (), T0) for i in range(15)]
    expected = layout(nodes)
    rng = random.Random(3)
    for _ in range(5):
        rng.shuffle(nodes)
        assert layout(nodes) == expected


def test_rows_in_a_column_do_not_overlap_and_children_follow_their_parents() -> None:
    nodes = [NodeInput("r1", ()), NodeInput("r2", ()), NodeInput("a", ("r2",)), NodeInput("b", ("r1",))]
    placed = layout(nodes)
    # b descends from the upper root r1, so it is drawn above a.
    assert placed.nodes["b"].y < placed.nodes["a"].y
    ys = sorted(n.y for n in placed.nodes.values() if n.layer == 1)
    assert ys[1] - ys[0] > 0


def test_a_cycle_is_laid_out_instead_of_looping() -> None:
    placed = layout([NodeInput("x", ("y",)), NodeInput("y", ("x",)), NodeInput("r", ())])
    assert set(placed.nodes) == {"x", "y", "r"}
    assert placed.nodes["x"].layer == placed.nodes["y"].layer > placed.nodes["r"].layer


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
