"""Crash tests: the extract process is SIGKILLed at named and at random points, run again, and the lake is exact
(on a local path, on an S3 server and on a GCS server)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from spanner_cdc.devstack.object_stores import ObjectStore
from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.extract.failpoints import FAILPOINT_ENV
from spanner_cdc.lake import storage
from spanner_cdc.lake.layout import LakeLayout, published_locations
from spanner_cdc.settings import env_name, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.integration.extract.lake_reading import change_of, rows_of
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(84)]
REPO = Path(__file__).resolve().parents[3]
SEED = 20240501
RERUN_LIMIT_S = 150.0  # half the default lease


def check_env(settings: Any) -> dict[str, str]:
    """The S3 scenarios close their windows with the Spark check (it reads the bucket on the executors), the
    others with the driver's (below its default bound): the default run covers both, and both on a bucket."""
    return {env_name("check_driver_rows"): "0"} if str(settings.output_root).startswith("s3://") else {}


def start_extract(settings: Any, start: datetime, end: datetime, *, lease: str | None = "2", **env: str) -> subprocess.Popen[str]:
    """`spanner-cdc extract --json` of one window in a subprocess; `lease=None` keeps the default 300 s lease."""
    command = [sys.executable, "-m", "spanner_cdc", "extract", "--window-start", start.isoformat(),
               "--window-end", end.isoformat(), "--json"]  # fmt: skip
    extra = {env_name("lease_s"): lease} if lease is not None else {}
    return subprocess.Popen(
        command, env=subprocess_env(settings, **check_env(settings), **extra, **env), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def extract(
    settings: Any, start: datetime, end: datetime, *, kill_after: float | None = None, lease: str | None = "2", **env: str
) -> int:
    """Run `spanner-cdc extract` in a subprocess; SIGKILL it after `kill_after` seconds if still running."""
    process = start_extract(settings, start, end, lease=lease, **env)
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
        # past the last commit too: the server's clock may run a few ms ahead of this process's (it reads the
        # wall clock once at its start, and a busy machine can pause it between that and its monotonic origin)
        bounds.append(max(datetime.now(UTC), max(change[0] for change in work.expected) + timedelta(microseconds=1)))
    return work, bounds


def assert_lake_exact(settings: Any, store: MetadataStore, work: SmallWorkload) -> None:
    """Published files = the manifest = what the windows' markers list; rows = the workload; every window checked."""
    location = LakeLayout(settings.output_root, STREAM, settings.namespace).location
    published = published_locations(location)
    assert set(published) == committed_paths(store, settings)
    lineage = store.get_lineage(STREAM, settings.namespace)
    marked = []
    for window in store.windows(lineage.id):
        assert window.state == "COMPLETE" and window.transaction_check and window.transaction_check["ok"], window
        marker = json.loads(storage.read_bytes(window.marker_path) or b"{}")
        marked += [storage.join(location, f["path"]) for f in marker["files"]]
    assert sorted(marked) == published
    assert Counter(change_of(r) for r in rows_of(published)) == Counter(work.expected)


# The exactly-once scenarios run with the lake on a local path, on the S3 server and on the GCS server. The
# default run rotates the stores over the scenarios (scenario i on store i mod 3, the random kills on a seeded
# choice), so each scenario and each store runs once; the other pairings are opt-in: `make test-stores`.
STORES = ("local", "s3", "gs")
# ordered so that both buckets get a scenario that leaves published objects outside the manifest
FAILPOINT_SCENARIOS = ("after_commit:1", "after_publish:1", "after_job:2", "after_publish:2")
RANDOM_KILL_STORE = random.Random(SEED).choice(STORES)


def rotated(scenarios: tuple[str, ...]) -> list[Any]:
    """(scenario, store) pairs: scenario i on store i mod 3 by default, every other pairing marked `stores`."""
    return [
        pytest.param(scenario, store, id=f"{scenario}-{store}", marks=() if j == i % len(STORES) else pytest.mark.stores)
        for i, scenario in enumerate(scenarios) for j, store in enumerate(STORES)
    ]  # fmt: skip


def lake_settings(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, make: Any, database: Any, where: str) -> Any:
    """Extract settings with the lake `where`: a local path, or the run's S3 / GCS server, its endpoint put in this
    process's environment (which reads the bucket back, and which `subprocess_env` hands to the extracts)."""
    if where == "local":
        return make(database.database_id, STREAM, spark_master=request.getfixturevalue("spark_connect_server").url)
    server: ObjectStore = request.getfixturevalue("s3_server" if where == "s3" else "gcs_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    root = server.root(f"crash-{database.database_id}")
    return make(database.database_id, STREAM, output_root=root, spark_master=request.getfixturevalue("spark_connect_server").url)


NEXT_WINDOW_FIRST = """
import sys
from datetime import datetime
from spanner_cdc.extract.window import run_window
from spanner_cdc.settings import load_settings
sys.exit(0 if run_window(load_settings(), datetime.fromisoformat(sys.argv[1]), datetime.fromisoformat(sys.argv[2])).complete else 1)
"""


def run_next_window_first(settings: Any, start: datetime, end: datetime) -> None:
    """The window through the pipeline API, which (unlike `spanner-cdc extract`) does not finish an open window before it."""
    command = [sys.executable, "-c", NEXT_WINDOW_FIRST, start.isoformat(), end.isoformat()]
    env = subprocess_env(settings, **check_env(settings), **{env_name("lease_s"): "2"})
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.mark.parametrize(("failpoint", "where"), rotated(FAILPOINT_SCENARIOS))
def test_killed_at_a_failpoint_then_rerun(
    failpoint: str, where: str, make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any,
    store: MetadataStore, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = lake_settings(request, monkeypatch, extract_settings, database, where)
    work, bounds = windows(database, local_spanner, 2 if failpoint == "after_publish:1" else 1)
    layout = LakeLayout(settings.output_root, STREAM, settings.namespace)
    location = layout.location
    assert extract(settings, bounds[0], bounds[1], **{FAILPOINT_ENV: failpoint}) == -signal.SIGKILL
    assert not storage.exists(layout.marker_location(bounds[0], bounds[1]))  # the marker is written last
    orphans = set(published_locations(location)) - committed_paths(store, settings)
    if failpoint == "after_publish:1":
        # killed after publishing, before the commit: objects the manifest does not know. The next window runs
        # first: the crashed token is re-read over a longer range, under other names, so its orphans must be
        # deleted rather than replaced
        assert orphans, "the crash should have left published files outside the manifest"
        run_next_window_first(settings, bounds[1], bounds[2])
        assert not orphans & set(published_locations(location))
    assert extract(settings, bounds[0], bounds[1]) == 0
    assert_lake_exact(settings, store, work)
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert len(store.windows(lineage.id)) == len(bounds) - 1


@pytest.mark.parametrize(
    "where", [pytest.param(w, marks=() if w == RANDOM_KILL_STORE else pytest.mark.stores) for w in STORES]
)
def test_killed_at_random_moments_then_rerun(
    where: str, make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    database = make_spanner_database(DDL)
    settings = lake_settings(request, monkeypatch, extract_settings, database, where)
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


def attempt_rows(store: MetadataStore, settings: Any) -> list[Any]:
    lineage = store.get_lineage(STREAM, settings.namespace)
    with store._db.engine.connect() as conn:
        return list(
            conn.execute(
                sa.text("SELECT token, attempt, owner, outcome, error FROM cdc_attempts WHERE lineage_id = :l ORDER BY token, attempt"),
                {"l": lineage.id},
            )
        )


def test_rerun_takes_over_a_killed_runs_tokens_without_waiting_for_the_lease(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore, spark_connect_server: Any
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work, (w0, w1) = windows(database, local_spanner, 1)
    # the default 300 s lease: the killed run's tokens stay RUNNING, leased for minutes
    assert extract(settings, w0, w1, lease=None, **{FAILPOINT_ENV: "after_job:1"}) == -signal.SIGKILL
    orphaned = [r for r in attempt_rows(store, settings) if r.outcome == "RUNNING"]
    assert orphaned, "the kill should have left attempts RUNNING"
    # well inside the lease: a re-run that waited for it would be killed here and fail
    assert extract(settings, w0, w1, lease=None, kill_after=RERUN_LIMIT_S) == 0
    history = {(r.token, r.attempt): r for r in attempt_rows(store, settings)}
    for row in orphaned:
        taken = history[(row.token, row.attempt)]
        assert (taken.outcome, taken.error.split(";")[0]) == ("EXPIRED", "its run died (liveness lock free)"), taken
        assert history[(row.token, row.attempt + 1)].outcome == "COMPLETED"
    assert_lake_exact(settings, store, work)
    lineage = store.get_lineage(STREAM, settings.namespace)
    assert [w.state for w in store.windows(lineage.id)] == ["COMPLETE"]


def test_two_runs_of_one_window_at_once_agree(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore, spark_connect_server: Any
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, spark_master=spark_connect_server.url)
    work, (w0, w1) = windows(database, local_spanner, 1)
    runs = [start_extract(settings, w0, w1, lease=None) for _ in range(2)]
    outputs = [run.communicate(timeout=600) for run in runs]
    for run, (_, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, err[-4000:]
        assert "Traceback" not in err, err[-4000:]
    first, second = (json.loads(out) for out, _ in outputs)
    per_run = ("elapsed_s", "waves", "extracted_tokens", "phases")  # what each run did itself
    assert {k: v for k, v in first.items() if k not in per_run} == {k: v for k, v in second.items() if k not in per_run}
    assert first["complete"] and first["marker_path"] and Path(first["marker_path"]).exists()
    assert first["extracted_tokens"] + second["extracted_tokens"] >= 1
    # neither run took a token from the other: every attempt completed
    assert {r.outcome for r in attempt_rows(store, settings)} == {"COMPLETED"}
    assert_lake_exact(settings, store, work)
    lineage = store.get_lineage(STREAM, settings.namespace)
    [window] = store.windows(lineage.id)
    assert (window.state, window.marker_path) == ("COMPLETE", first["marker_path"])
