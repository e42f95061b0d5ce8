import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.lineage.rules import State
from spanner_cdc.names import short_token as short
from spanner_cdc.store.models import Lineage, LineageGraph, PartitionRow, WindowRow
from spanner_cdc.store.render import render
from spanner_cdc.times import human_duration
from spanner_cdc.times import iso_z as iso

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(hours=3)
LONG = "AUZd5xQ9cJkO" + "x" * 60 + "tail1234"


def node(token: str, state: State, start: datetime, **kw: object) -> PartitionRow:
    values: dict[str, object] = {
        "lineage_id": 1, "token": token, "start": start, "end": None, "state": state, "watermark": None,
        "created_at": T0, "ready_at": None, "scheduled_at": None, "running_at": None, "finished_at": None,
        "lease_owner": None, "lease_expires_at": None, "attempts": 0, "last_error": None,
    }
    values.update(kw)
    return PartitionRow(**values)  # type: ignore[arg-type]


def graph() -> LineageGraph:
    split_at = T0 + timedelta(minutes=10)
    merge_at = T0 + timedelta(minutes=40)
    nodes = (
        node("r1", State.FINISHED, T0, end=split_at, watermark=split_at, attempts=1, children=("a", "b")),
        node("a", State.FINISHED, split_at, end=merge_at, parents=("r1",), children=("m",), attempts=2),
        node("b", State.FINISHED, split_at, end=merge_at, parents=("r1",), children=("m",), attempts=1),
        node(
            "m", State.RUNNING, merge_at, watermark=T0 + timedelta(hours=2), parents=("a", "b"), attempts=3,
            lease_owner="worker-7", lease_expires_at=NOW + timedelta(minutes=1), last_error="boom\nstack",
        ),
        node(LONG, State.CREATED, T0, parents=("ghost",)),
    )
    edges = (("a", "m"), ("b", "m"), ("ghost", LONG), ("r1", "a"), ("r1", "b"))
    window = WindowRow(1, T0, T0 + timedelta(hours=1), "COMPLETE", 42, 3, {"ok": True}, "_windows/x.json", T0, NOW)
    lineage = Lineage(1, "orders", "live", "cdc", T0)
    return LineageGraph(lineage, nodes, edges, low_watermark=T0 - timedelta(microseconds=1), windows=(window,))


def test_text_tree_shows_states_watermarks_lag_and_each_merge_child_once() -> None:
    text = render(graph(), "text", now=NOW)
    lines = text.splitlines()
    assert lines[0] == "lineage orders/live (id 1, database cdc): 5 partitions (1 CREATED, 1 RUNNING, 3 FINISHED)"
    assert lines[1] == "low watermark 2024-12-31T23:59:59.999999Z (lag 3h00m)"
    assert lines[2].startswith("windows: 1 complete, 0 open; last complete [2025-01-01T00:00:00Z, 2025-01-01T01:00:00Z)")
    assert lines[3].startswith("r1  FINISHED  start 2025-01-01T00:00:00Z  end 2025-01-01T00:10:00Z")
    assert lines[4].startswith("├─ a  FINISHED")
    assert lines[5].startswith("│  └─ m  RUNNING  start 2025-01-01T00:40:00Z  watermark 2025-01-01T02:00:00Z  lag 1h00m")
    assert "lease worker-7 until 2025-01-01T03:01:00Z" in lines[5]
    assert "merge of a, b" in lines[5]
    assert lines[5].endswith("last error: boom")
    assert lines[6].startswith("└─ b  FINISHED")
    assert lines[7] == "   └─ m  (merge child, shown above)"
    assert lines[8].startswith(short(LONG) + "  CREATED")
    assert "waiting for unknown parent ghost" in lines[8]
    assert len(lines) == 9


def test_a_node_past_created_never_waits_and_folded_partitions_still_count() -> None:
    """After retention folded a finished parent, its READY child lacks it: it waits for nothing (only a CREATED node
    waits), its line reads as before, and the folded partitions still count in the summary."""
    before = graph()
    after = dataclasses.replace(
        before, nodes=tuple(n for n in before.nodes if n.token != "r1"), folded_windows=2, folded_partitions=1
    )
    ready_child = dataclasses.replace(after, nodes=tuple(
        dataclasses.replace(n, state=State.READY) if n.token == "a" else n for n in after.nodes))  # fmt: skip
    lines = render(ready_child, "text", now=NOW).splitlines()
    assert lines[0] == "lineage orders/live (id 1, database cdc): 5 partitions (1 CREATED, 1 READY, 1 RUNNING, 2 FINISHED)"
    assert lines[3] == "retention: 2 closed windows folded into per-window totals; their 1 finished partitions are counted above, not listed below"
    a_line = next(line for line in lines if line.startswith("a  READY"))
    assert "unknown parent" not in a_line
    assert json.loads(render(after, "json", now=NOW))["folded"] == {"windows": 2, "partitions": 1}
    assert "folded" not in json.loads(render(before, "json", now=NOW))


def test_json_has_every_token_whole_and_lag_in_seconds() -> None:
    doc = json.loads(render(graph(), "json", now=NOW))
    assert doc["lineage"]["stream"] == "orders"
    tokens = {p["token"]: p for p in doc["partitions"]}
    assert LONG in tokens
    assert tokens["m"]["lag_seconds"] == 3600.0
    assert tokens["r1"]["lag_seconds"] is None
    assert tokens["m"]["parents"] == ["a", "b"]
    assert {"parent": "a", "child": "m"} in doc["edges"]
    assert doc["windows"][0]["records"] == 42
    assert doc["lag_seconds"] == pytest.approx(3 * 3600, abs=0.001)


def test_dot_has_every_node_and_edge_and_marks_unknown_parents() -> None:
    dot = render(graph(), "dot", now=NOW)
    assert dot.startswith('digraph "orders/live" {')
    assert dot.rstrip().endswith("}")
    assert dot.count(" -> ") == 5
    assert '"r1" -> "a";' in dot
    assert '"ghost" [label="ghost\\nunknown", style=dashed' in dot
    assert f'"{LONG}" [label="{short(LONG)}\\nCREATED' in dot


def test_empty_lineage_text_says_how_it_fills() -> None:
    empty = LineageGraph(Lineage(2, "s", "backfill_1", "", T0), (), (), None)
    text = render(empty, "text", now=NOW)
    assert "0 partitions" in text
    assert "low watermark - (all finished)" in text
    assert "bootstraps the root partitions" in text


def test_helpers() -> None:
    assert iso(datetime(2025, 1, 1, 0, 0, 0, 5, tzinfo=UTC)) == "2025-01-01T00:00:00.000005Z"
    assert human_duration(None) == "-"
    assert human_duration(0.2) == "<1s"
    assert human_duration(65) == "1m05s"
    assert human_duration(2 * 86400 + 3 * 3600) == "2d03h"
    assert short("abc") == "abc"
    assert short(LONG) == "…" + LONG[-10:]
    with pytest.raises(ValueError, match="text, json, dot"):
        render(graph(), "yaml", now=NOW)
