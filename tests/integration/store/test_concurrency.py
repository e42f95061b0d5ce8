"""Several worker processes land a random lineage of splits and merges with failures and crashes.

At the end every partition was finished exactly once, every child was promoted exactly once and
only after all its parents finished, no watermark went backwards, and the manifest covers every
token's time range exactly once.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections import Counter, defaultdict
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path

import pytest
import sqlalchemy as sa

from spanner_cdc.lineage import rules
from spanner_cdc.model.records import ChildPartition
from spanner_cdc.store import MetadataStore, State
from tests.integration.store import lineage_sim
from tests.integration.store.lineage_sim import CRASH_EXIT, T0, US

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WORKERS = 4
HORIZON = timedelta(minutes=60)
WINDOW = timedelta(minutes=10)
SEED = 20250601
DEADLINE_SECONDS = 150


def run_workers(url: str, lineage_id: int, topology, plan, all_windows, events: Path) -> int:  # type: ignore[no-untyped-def]
    """Run WORKERS processes to the end, replacing each one that crashes; returns how many crashed."""
    ctx = multiprocessing.get_context("spawn")
    running: dict[int, multiprocessing.process.BaseProcess] = {}
    lives = Counter[int]()
    crashes = 0

    def start(slot: int) -> None:
        name = f"w{slot}.{lives[slot]}"
        process = ctx.Process(
            target=lineage_sim.work,
            args=(url, lineage_id, topology, plan, all_windows, name, str(events), SEED + 100 * slot + lives[slot]),
            name=name,
        )
        lives[slot] += 1
        process.start()
        running[process.sentinel] = process

    for slot in range(WORKERS):
        start(slot)
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        while running:
            assert time.monotonic() < deadline, "workers did not land the lineage in time"
            for sentinel in wait(list(running), timeout=5):
                process = running.pop(sentinel)  # type: ignore[arg-type]
                process.join()
                if process.exitcode == CRASH_EXIT:
                    crashes += 1
                    start(int(process.name[1:].split(".")[0]))
                else:
                    assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"
    finally:
        for process in running.values():
            process.kill()
            process.join()
    return crashes


def test_workers_land_a_lineage_exactly_once(pg_url: str, tmp_path: Path) -> None:
    topology = lineage_sim.generate(SEED, roots=4, operations=30, horizon=HORIZON)
    plan = lineage_sim.fault_plan(topology, SEED)
    all_windows = lineage_sim.windows(HORIZON, WINDOW)
    merges = [p for p in topology.values() if len(p.parents) > 1]
    assert merges and any(len(p.children) > 1 for p in topology.values()), "the history must hold splits and merges"

    with MetadataStore.connect(pg_url) as store:
        store.upgrade()
        lineage = store.ensure_lineage("sim", "live")
        roots = [ChildPartition(t, ()) for t, p in topology.items() if not p.parents]
        store.bootstrap(lineage.id, T0, roots)

        events_path = tmp_path / "events.jsonl"
        crashes = run_workers(pg_url, lineage.id, topology, plan, all_windows, events_path)
        events = [json.loads(line) for line in events_path.read_text().splitlines()]

        rows = {p.token: p for p in store.partitions(lineage.id)}
        with store._db.engine.connect() as conn:
            read_from = dict(
                conn.execute(sa.text("SELECT token, read_from FROM cdc_partitions WHERE lineage_id = :l"), {"l": lineage.id})
                .tuples()
                .all()
            )
            history = conn.execute(
                sa.text("SELECT * FROM cdc_attempts WHERE lineage_id = :l ORDER BY token, attempt"), {"l": lineage.id}
            ).all()
        manifest = store.manifest(lineage.id)
        closed = store.windows(lineage.id)

    # the faults really happened: crashed processes, failed attempts, expired leases
    outcomes = Counter(h.outcome for h in history)
    assert crashes >= 1
    assert outcomes["FAILED"] >= 1 and outcomes["EXPIRED"] >= 1
    assert outcomes["RUNNING"] == 0
    zombies = {(e["token"], e["attempt"]) for e in events if e["event"] == "claimed" and e["fault"] == "zombie"}
    lost = {(e["token"], e["attempt"]) for e in events if e["event"] == "lease_lost"}
    assert zombies and zombies <= lost, "a worker that stalled past its lease must not complete"
    # a crashed worker's claims were taken over because it died, a live zombie's only once its lease ran out
    reasons = {(h.token, h.attempt): h.error or "" for h in history}
    crashed = {(e["token"], e["attempt"]) for e in events if e["event"] == "claimed" and e["fault"] == "crash"}
    assert crashed and all(reasons[k].startswith("its run died") for k in crashed), {k: reasons[k] for k in crashed}
    assert all(reasons[k].startswith("lease expired") for k in zombies), {k: reasons[k] for k in zombies}

    # every token known once, with the parents the history gave it
    assert set(rows) == set(topology)
    for token, part in topology.items():
        assert rows[token].parents == part.parents, token
        assert rows[token].start == part.start, token

    # the stored resume point is the rule's, for every token
    assert read_from == {t: rules.read_from(r.watermark, r.start) for t, r in rows.items()}

    # every partition that ended was finished exactly once; the others are landed to the last window
    last = all_windows[-1][1] - US
    finishes = Counter(h.token for h in history if h.outcome == "COMPLETED" and h.finished)
    for token, part in topology.items():
        if part.end is not None:
            assert (rows[token].state, rows[token].end, finishes[token]) == (State.FINISHED, part.end, 1), token
        else:
            assert (rows[token].state, rows[token].watermark, finishes[token]) == (State.READY, last, 0), token

    # every child promoted exactly once (by whichever parent finished last), and only after all parents finished
    promoted = Counter(t for e in events if e["event"] == "completed" for t in e["promoted"])
    assert promoted == Counter(t for t, p in topology.items() if p.parents)
    first_start = {}
    for h in history:
        first_start.setdefault(h.token, h.started_at)
    for token, part in topology.items():
        if part.parents:
            parents_done = max(rows[p].finished_at for p in part.parents)
            assert rows[token].ready_at >= parents_done, token
            assert first_start[token] >= parents_done, token

    # watermarks only moved forward, and each attempt started where the last completed one left off
    by_token = defaultdict(list)
    for h in history:
        by_token[h.token].append(h)
    for token, attempts in by_token.items():
        assert [h.attempt for h in attempts] == list(range(1, len(attempts) + 1)), token
        previous = None
        for h in attempts:
            assert h.watermark_before == previous, (token, h.attempt)
            if h.outcome == "COMPLETED":
                assert previous is None or h.watermark_after >= previous, (token, h.attempt)
                previous = h.watermark_after
    completions = [e for e in events if e["event"] == "completed"]
    assert len(completions) == outcomes["COMPLETED"]

    # the manifest covers each token's range exactly once: no gap, no overlap, no duplicate
    files = defaultdict(list)
    for f in manifest:
        files[f.token].append(f)
    for token, part in topology.items():
        ranges = sorted((f.range_start, f.range_end) for f in files[token])
        expected_end = part.end - US if part.end is not None else last
        if part.start > expected_end:
            assert ranges == [], token
            continue
        assert ranges[0][0] == part.start, token
        assert ranges[-1][1] == expected_end, token
        for (_, end), (start, _) in zip(ranges, ranges[1:], strict=False):
            assert start == end + US, token

    assert [(w.start, w.end, w.state) for w in closed] == [(s, e, "COMPLETE") for s, e in all_windows]
