"""Crash tests: the extract process is SIGKILLed at named and at random points, run again, and the lake is exact."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.extract import FAILPOINT_ENV, LEASE_ENV
from spanner_cdc.lake.layout import LakeLayout, published_files
from spanner_cdc.local_spanner.launcher import LocalSpanner
from spanner_cdc.pipeline import run_window
from spanner_cdc.settings import subprocess_env
from spanner_cdc.store import MetadataStore
from tests.fixtures.spark import LOCAL_MASTER
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]
SEED = 20240501


def extract(settings: Any, start: datetime, end: datetime, *, kill_after: float | None = None, **env: str) -> int:
    """Run `spanner-cdc extract` in a subprocess; SIGKILL it after `kill_after` seconds if still running."""
    command = [sys.executable, "-m", "spanner_cdc", "extract", "--window-start", start.isoformat(),
               "--window-end", end.isoformat(), "--json"]  # fmt: skip
    process = subprocess.Popen(
        command, env=subprocess_env(settings, **{LEASE_ENV: "2"}, **env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=kill_after if kill_after is not None else 600)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        out, err = process.communicate()
    if process.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"extract failed with {process.returncode}:\n{err[-4000:]}")
    return process.returncode


def committed_paths(store: MetadataStore, settings: Any) -> set[str]:
    lineage = store.get_lineage(STREAM, settings.namespace)
    return {f.path for f in store.manifest(lineage.id)}


def windows(database: Any, server: LocalSpanner, count: int) -> tuple[SmallWorkload, list[datetime]]:
    """`count` windows of two phases each, alternately with a split and a merge between the phases."""
    work = SmallWorkload(database)
    bounds = [datetime.now(UTC)]
    for n in range(count):
        work.phase(range(n * 16, n * 16 + 8))
        (server.control.split if n % 2 == 0 else server.control.merge)(database.name, STREAM)
        work.phase(range(n * 16 + 8, n * 16 + 16))
        bounds.append(datetime.now(UTC))
    return work, bounds


def assert_lake_exact(settings: Any, store: MetadataStore, work: SmallWorkload) -> None:
    root = LakeLayout(settings.output_root, STREAM, settings.namespace).root
    assert {str(p) for p in published_files(root)} == committed_paths(store, settings)
    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)


def test_killed_at_each_failpoint_then_rerun(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    spark_connect_server: Any, spark: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work, (w0, w1, w2, w3) = windows(database, local_spanner, 3)
    root = LakeLayout(settings.output_root, STREAM, settings.namespace).root
    # killed after publishing, before the commit: files on disk that the manifest does not know
    assert extract(settings, w0, w1, **{FAILPOINT_ENV: "after_publish:1"}) == -signal.SIGKILL
    orphans = {str(p) for p in published_files(root)} - committed_paths(store, settings)
    assert orphans, "the crash should have left published files outside the manifest"
    # the next window runs first, through the pipeline API, which (unlike `spanner-cdc extract`) does not
    # finish the open window before it: the crashed token is re-read over a longer range, under other
    # names, so its orphans must be deleted rather than replaced
    monkeypatch.setenv(LEASE_ENV, "2")
    assert run_window(replace(settings, spark_master=LOCAL_MASTER), w1, w2).complete  # the run's local session
    assert not orphans & {str(p) for p in published_files(root)}
    assert extract(settings, w0, w1) == 0  # closes: every partition is past it
    for point in ("after_job:2", "after_commit:1", "after_publish:2"):
        assert extract(settings, w2, w3, **{FAILPOINT_ENV: point}) in (0, -signal.SIGKILL)
    assert extract(settings, w2, w3) == 0
    assert_lake_exact(settings, store, work)
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert [w.state for w in store.windows(lineage.id)] == ["COMPLETE"] * 3
    assert all(w.transaction_check and w.transaction_check["ok"] for w in store.windows(lineage.id))


def test_killed_at_random_moments_then_rerun(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore, spark_connect_server: Any
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work, (s, m, e) = windows(database, local_spanner, 2)
    rng = random.Random(SEED)
    outcomes = []
    for window in ((s, m), (m, e)):
        for _ in range(2):
            delay = rng.uniform(1.0, 8.0)
            outcomes.append((round(delay, 2), extract(settings, *window, kill_after=delay)))
        assert extract(settings, *window) == 0, outcomes
    assert any(code == -signal.SIGKILL for _, code in outcomes), f"no run was killed (seed {SEED}): {outcomes}"
    assert_lake_exact(settings, store, work)
