"""Current-state tables killed at seeded random moments: every re-run leaves each table at a window, never between,
and the last one gives the exact state at each window end with one snapshot per window."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from google.cloud import spanner

from spanner_cdc.cli.main import main
from spanner_cdc.extract.current_state import state_catalog
from spanner_cdc.extract.snapshot import MICROSECOND, run_snapshot
from spanner_cdc.extract.window import run_window
from spanner_cdc.lake.layout import LakeLayout
from spanner_cdc.lake.state_table import SNAPSHOT_AT, applied_ends, read_state, state_identifier
from spanner_cdc.settings import subprocess_env

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(60)]
SEED = 30
KILLS = 12
STREAM = "ItemsStream"
DDL = [
    "CREATE TABLE Items (Id INT64 NOT NULL, Name STRING(MAX), Qty INT64) PRIMARY KEY (Id)",
    # NEW_VALUES: an update names only the columns it wrote, so the apply must find the row's other columns
    f"CREATE CHANGE STREAM {STREAM} FOR ALL OPTIONS (value_capture_type = 'NEW_VALUES')",
]
APPLY = "from spanner_cdc.extract.current_state import update_current_state as u; from spanner_cdc.settings import load_settings as l; u(l({}))"


def source_at(database: Any, at: datetime) -> list[dict[str, Any]]:
    with database.snapshot(read_timestamp=at) as snap:
        return [
            {"Id": i, "Name": n, "Qty": q}
            for i, n, q in snap.execute_sql("SELECT Id, Name, Qty FROM Items ORDER BY Id")
        ]


def windows_of_changes(database: Any, rng: random.Random, count: int) -> list[datetime]:
    """`count` windows, each of partial updates, deletes and inserts over random keys; their ends."""
    ends, next_id, alive = [], 1000, list(range(200))
    for _ in range(count):
        with database.batch() as b:
            b.update("Items", ["Id", "Qty"], [[i, rng.randrange(10_000)] for i in rng.sample(alive, 15)])
        gone = rng.sample(alive, 5)
        with database.batch() as b:
            b.delete("Items", spanner.KeySet(keys=[[i] for i in gone]))
            b.insert("Items", ["Id", "Name"], [[next_id + i, f"new{next_id + i}"] for i in range(5)])
        alive = [i for i in alive if i not in gone] + [next_id + i for i in range(5)]
        next_id += 5
        ends.append(datetime.now(UTC))
    return ends


def test_killed_at_seeded_random_moments_the_rerun_gives_each_window_exactly_once(
    make_spanner_database: Any, extract_settings: Any, spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    database = make_spanner_database(DDL)
    with database.batch() as b:
        b.insert("Items", ["Id", "Name", "Qty"], [[i, f"n{i}", i] for i in range(200)])
    settings = extract_settings(database.database_id, STREAM, spark_master="local[1]")
    start = run_snapshot(settings).at
    rng = random.Random(SEED)
    ends = windows_of_changes(database, rng, KILLS)
    bounds = [start + MICROSECOND, *ends]
    env = subprocess_env(settings)
    moments: list[Any] = []
    held: list[str] = []
    reach_s = 2.0  # how long the last failpoint run took to reach its commit: the random kills spread around it
    for n in range(KILLS):
        # a window closes before each kill: each finds work left (the seed and the first window, then one or two windows)
        assert run_window(settings, bounds[n], bounds[n + 1]).complete
        # half the kills right before one of the run's commits (its files written, the windows before it committed),
        # half at a random moment around the time such a run takes to reach it (an apply of a few small windows
        # takes about as long as its start)
        if n % 2:
            pending = n + 2 - len(held)  # the seed and the windows closed so far, less those the table holds
            moment: Any = ("failpoint", rng.randint(1, pending))
            began = time.monotonic()
            proc = subprocess.run([sys.executable, "-c", APPLY], env={**env, "SPANNER_CDC_FAILPOINT": f"state_before_commit:{moment[1]}"},
                                  capture_output=True, timeout=300, check=False)  # fmt: skip
            code, reach_s = proc.returncode, time.monotonic() - began
        else:
            moment = ("after", round(rng.uniform(0.5, 1.5) * reach_s, 2))
            child = subprocess.Popen(
                [sys.executable, "-c", APPLY], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            try:
                code = child.wait(timeout=moment[1])
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGKILL)
                code = child.wait()
        moments.append((moment, code))
        assert code in (0, -signal.SIGKILL), moments
        held = check_tables_hold_whole_windows(settings, database, [start, *ends[: n + 1]], moments)
    assert sum(code == -signal.SIGKILL for _, code in moments) >= KILLS // 2, (
        moments
    )  # every other run at least was cut
    proc = subprocess.run([sys.executable, "-c", APPLY], env=env, capture_output=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    held = check_tables_hold_whole_windows(settings, database, [start, *ends], moments)
    # one snapshot per window (and the seed), each once: the windows as they close, in order
    assert held == [start.isoformat(), *(e.isoformat() for e in ends)], moments
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    argv = ["lake", "show", "--stream", STREAM, "--namespace", settings.namespace, "--metadata-url", settings.metadata_url,
            "--output-root", str(settings.output_root), "--json"]  # fmt: skip
    assert main(argv) == 0
    tables = json.loads(capsys.readouterr().out)["tables"]
    assert [(t["identifier"], t["kind"], t["source_table"]) for t in tables] == [
        ([settings.namespace, STREAM], "change_log", None),  # Iceberg is on by default: the change log is a table too
        (list(state_identifier(layout, "Items")), "current_state", "Items"),
    ]
    tables = tables[1:]  # the state table
    assert [s["window_end"] for s in tables[0]["snapshots"]] == held
    # each window: 15 updates and 5 deletes of old rows, 5 inserts (a key changed twice counts once)
    assert all(0 < s["rows_removed"] <= 20 and 5 <= s["rows_added"] <= 20 for s in tables[0]["snapshots"][1:]), tables
    # the last state read by a second reader that shares no code with pyiceberg (Daft's native Iceberg reader)
    import daft

    handle = state_catalog(settings).load_table(state_identifier(layout, "Items"))
    last = handle.current_snapshot()
    assert last is not None
    other = daft.read_iceberg(handle, snapshot_id=last.snapshot_id).to_arrow().sort_by("Id").to_pylist()
    assert other == source_at(database, ends[-1] - MICROSECOND)


def check_tables_hold_whole_windows(
    settings: Any, database: Any, ends: list[datetime], moments: list[Any]
) -> list[str]:
    """Each snapshot the table has is a whole window: equal to the source at its end; no window twice. Its ends."""
    catalog = state_catalog(settings)
    try:
        handle = catalog.load_table(
            state_identifier(LakeLayout(settings.output_root, STREAM, settings.namespace), "Items")
        )
    except Exception:  # not created yet: the kill came before the seed's table
        return []
    held = []
    for snap in handle.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        end = props.get("spanner-cdc.window-end") or props.get(SNAPSHOT_AT)
        assert end is not None, (snap, moments)
        held.append(end)
        at = datetime.fromisoformat(end)
        # the seed is the state at T0; a window's snapshot the source just before its end
        source = source_at(database, at if SNAPSHOT_AT in props else at - MICROSECOND)
        assert read_state(handle, snap.snapshot_id).to_pylist() == source, (end, moments)
    assert held == sorted(set(held)) and held == [e.astimezone(UTC).isoformat() for e in ends[: len(held)]], (
        held,
        moments,
    )
    assert sorted(applied_ends(handle)) == held
    return held
