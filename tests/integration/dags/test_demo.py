"""`spanner-cdc demo` end to end: its summary's numbers, checked against the lake, the store and the ground truth."""

from __future__ import annotations

import datetime as dt
import json
import os
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack import embedded_pg
from spanner_cdc.devstack.demo import LINEAGE_DATABASE
from spanner_cdc.devstack.embedded_pg import EmbeddedPostgres
from spanner_cdc.devstack.workload import load_ground_truth
from spanner_cdc.store import MetadataStore

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(67)]

HOURS = 2


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("demo-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPANNER_CDC_", "AIRFLOW", "SPANNER_EMULATOR"))}
    command = [sys.executable, "-m", "spanner_cdc", "demo", "--json", "--home", str(home),
               "--hours", str(HOURS), "--transactions", "300", "--workload-seconds", "12", "--spark-master", "local[2]"]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
        state = json.loads((home / "demo" / "demo.json").read_text()) if (home / "demo" / "demo.json").exists() else {}
        # the demo stopped the Postgres it started; started again, on the same port, it holds the demo's store
        left_running = embedded_pg.running(home / "postgres") is not None
        printed = json.loads(result.stdout).get("commands", []) if result.returncode == 0 else []
        commands = {command: _run_printed(command, env) for command in printed}
        store_view = _store_view(embedded_pg.ensure_running(home / "postgres").url(LINEAGE_DATABASE)) if state else {}
    finally:
        EmbeddedPostgres(home / "postgres", 0).stop()
    return {"result": result, "home": home, "state": state, "store": store_view, "left_running": left_running,
            "commands": commands}


def _run_printed(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str] | None:
    """A command of the summary, as printed (`spanner-cdc` as this interpreter's module); None for the one that serves
    until Ctrl-C (`make up` / `spanner-cdc up`)."""
    words = shlex.split(command)
    if words[:2] == ["make", "up"] or words[1:2] == ["up"]:
        return None
    assert words[0] == "spanner-cdc", command
    return subprocess.run([sys.executable, "-m", "spanner_cdc", *words[1:]], env=env, capture_output=True, text=True,
                          timeout=300)


def _store_view(url: str) -> dict[str, Any]:
    with MetadataStore.connect(url) as store:
        lineage = store.get_lineage("demo_stream", "live")
        graph = store.graph(lineage.id)
        return {
            "windows": {(w.start, w.end): w for w in store.windows(lineage.id)},
            "states": Counter(str(node.state) for node in graph.nodes),
            "edges": list(graph.edges),
        }


def _published(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.parquet") if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)]


def test_the_demo_ends_with_a_summary_whose_numbers_are_true(demo_run: dict[str, Any]) -> None:
    result = demo_run["result"]
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["ok"] is True
    home: Path = demo_run["home"]
    first = dt.datetime.fromisoformat(demo_run["state"]["first_window"])
    windows = [(first + k * dt.timedelta(hours=1), first + (k + 1) * dt.timedelta(hours=1)) for k in range(HOURS)]

    # Windows: as the store has them.
    store = demo_run["store"]
    assert len(summary["windows"]) == HOURS
    for row, bounds in zip(summary["windows"], windows, strict=True):
        stored = store["windows"][bounds]
        assert (row["state"], row["records"], row["files"]) == (stored.state, stored.records, stored.files)
        assert stored.state == "COMPLETE"
    assert summary["partitions"] == dict(store["states"])
    parents = Counter(child for _, child in store["edges"])
    children = Counter(parent for parent, _ in store["edges"])
    assert summary["merges"] == sum(1 for n in parents.values() if n > 1) >= 1
    assert summary["splits"] == sum(1 for n in children.values() if n > 1) >= 1

    # Rows: read back from the Parquet files, independently of the demo's own reading.
    lake = home / "demo" / "lake" / "demo_stream" / "live"
    assert summary["lake"] == str(lake)
    files = _published(lake)
    assert summary["files"] == len(files)
    stamps = [ts for f in files for ts in pq.read_table(f, columns=["commit_timestamp"]).column(0).to_pylist()]
    in_history = sum(1 for ts in stamps if windows[0][0] <= ts < windows[-1][1])
    assert summary["landed"] == in_history
    assert summary["landed_outside_windows"] == len(stamps) - in_history
    assert sum(store["windows"][w].records for w in windows) == in_history

    # Written: the workload's ground truth.
    truth = load_ground_truth(home / "demo" / "ground_truth.jsonl")
    assert summary["written"] == sum(1 for row in truth if windows[0][0] <= row.commit_timestamp < windows[-1][1])
    assert summary["written"] == summary["landed"] > 0
    assert summary["missing"] == summary["unexpected"] == summary["duplicate_uuids"] == 0

    # Airflow shows each run as long as it took, not from its (past) logical date: under an hour, not hours
    durations = json.loads((home / "demo" / "logs" / "airflow.result.json").read_text())
    assert all(run["airflow_seconds"] is not None and 0 < run["airflow_seconds"] < 3600 for run in durations), durations



def test_the_demo_stops_the_postgres_it_started(demo_run: dict[str, Any]) -> None:
    assert demo_run["result"].returncode == 0, demo_run["result"].stderr[-3000:]
    assert demo_run["left_running"] is False
    # started again (as `make up` does), it listens where the demo's state says and holds its store
    assert demo_run["state"]["lineage_url"].endswith(f"/{LINEAGE_DATABASE}") and demo_run["store"]["windows"]


def test_every_command_the_summary_prints_reads_the_demo(demo_run: dict[str, Any]) -> None:
    """The commands run as printed (with the demo's --home, no metadata URL): they find the demo's store."""
    assert demo_run["result"].returncode == 0, demo_run["result"].stderr[-3000:]
    commands = demo_run["commands"]
    home = str(demo_run["home"])
    assert [c.split(" --")[0] for c in commands] == [
        "spanner-cdc lineage list", "spanner-cdc lineage show", "spanner-cdc lake show", "spanner-cdc up"]
    assert all(f"--home {home}" in c for c in commands)
    ran = {c: r for c, r in commands.items() if r is not None}
    for command, result in ran.items():
        assert result.returncode == 0, (command, result.stderr[-2000:])
    listing, show, lake = (ran[c].stdout for c in list(commands)[:3])
    assert listing.startswith("demo_stream/live\tid ") and "low watermark 20" in listing, listing
    # the lineage the summary showed (its lag figures move with the clock): the same tree, line for line
    summary_tree = json.loads(demo_run["result"].stdout)["lineage_text"].splitlines()
    assert len(show.splitlines()) == len(summary_tree) > 1, show
    assert "FINISHED" in show, show
    # the change log's Iceberg table with a snapshot per window of the history at least
    assert "table live.demo_stream" in lake and lake.count("[20") >= HOURS, lake
