"""SVG rendering of a lineage with a split and a merge."""

from __future__ import annotations

import xml.etree.ElementTree as ET

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
