"""The fault campaign: three hourly windows extracted by `spanner-cdc extract` through kills, restarts and faults."""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from spanner_cdc.devstack.demo_summary import lake_identities, lake_uuids, published_files
from spanner_cdc.devstack.demo_truth import truth_identities
from spanner_cdc.settings import Settings, subprocess_env
from spanner_cdc.store import MetadataStore
from tests.fixtures.postgres import PrivatePostgres
from tests.integration.extract.fault_campaign import (
    CHANGE_STREAM,
    INSTANCE,
    PROJECT,
    Extracts,
    History,
    Run,
    fail_reads,
    files_containing,
    holds_claim,
    past_history,
    secret_forms,
    store_rows_containing,
    traceback_in,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.heavy(132), pytest.mark.timeout(900)]

SEED_ENV = "SPANNER_CDC_CAMPAIGN_SEED"
DEFAULT_SEED = 20261123
KILLS_PER_WINDOW = 7
IN_FLIGHT_KILLS_PER_WINDOW = 2
# where a run holds a claimed token and has committed nothing of it
HOLDING_POINTS = ("after_claim", "after_job", "after_publish")
BACKSTOP = "before_close:1:stop"


@dataclass
class Figures:
    seed: int
    kills: int = 0
    kills_in_flight: int = 0
    postgres_restarts: int = 0
    postgres_restarts_in_flight: int = 0
    injected_failures: int = 0
    concurrent_runs: int = 0
    runs: int = 0
    rows_expected: int = 0
    rows_landed: int = 0
    elapsed_s: float = 0.0

    def __str__(self) -> str:
        return (
            f"fault campaign (seed {self.seed}, {SEED_ENV}): {self.kills} SIGKILLs of the extract's process group "
            f"({self.kills_in_flight} with a token in flight), {self.postgres_restarts} Postgres restarts "
            f"({self.postgres_restarts_in_flight} in flight), {self.injected_failures} injected UNAVAILABLE, "
            f"{self.concurrent_runs} runs of one window at once, {self.runs} extract runs; rows expected "
            f"{self.rows_expected}, landed {self.rows_landed}; {self.elapsed_s:.0f} s"
        )


@dataclass
class Outcome:
    figures: Figures
    history: History
    settings: Settings
    extracts: Extracts
    concurrent: list[Run] = field(default_factory=list)
    restarted: list[Run] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    @property
    def lake(self) -> Path:
        return self.settings.output_root / CHANGE_STREAM / "live"



@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    with past_history(tmp_path_factory.mktemp("campaign"), hours=3, transactions=450, seed=seed(),
                      workload_seconds=15.0) as history:  # fmt: skip
        yield history


def seed() -> int:
    return int(os.environ.get(SEED_ENV) or DEFAULT_SEED)


def _kill(extracts: Extracts, window: Any, label: str, rng: random.Random, figures: Figures, url: str, *,
          in_flight: bool) -> None:  # fmt: skip
    """Kill one run of the window, at a failpoint of the extract or at a random moment after its start.

    Every kill run stops before its window's close at the latest (BACKSTOP), so however fast it goes it cannot end
    before its kill, and no kill run closes a window. `in_flight` kills stop at a point where the run holds a claimed
    token and nothing of it is committed; the others stop at any point (a commit included) or die at a random moment.
    """
    if in_flight:
        stop_at = f"{rng.choice(HOLDING_POINTS)}:1:stop"
    elif rng.random() < 0.5:
        stop_at = f"{rng.choice((*HOLDING_POINTS, 'after_commit'))}:{rng.randint(1, 3)}:stop"
    else:
        stop_at = ""
    run = extracts.start(window, label, failpoints=",".join(filter(None, (stop_at, BACKSTOP))))
    run.stopped = run.wait_stopped(timeout=300 if stop_at else rng.uniform(0.5, 6.0))
    holding = run.process.poll() is None and holds_claim(url, run)
    if run.kill_group():
        figures.kills += 1
        figures.kills_in_flight += holding
        run.in_flight = holding
    run.wait()


def _finish(extracts: Extracts, window: Any, label: str) -> Run:
    """Runs until one completes the window (a run may end incomplete, e.g. tokens leased by a dead run)."""
    for attempt in range(3):
        run = extracts.start(window, f"{label}-{attempt}")
        if run.wait() == 0:
            return run
    return run


def _campaign(private_postgres: PrivatePostgres, history: History, connect: Any, root: Path) -> Outcome:
    started = time.monotonic()
    figures = Figures(seed=seed())
    print(f"\nfault campaign seed {figures.seed} (set {SEED_ENV} to replay another)")
    rng = random.Random(figures.seed)
    settings = Settings(
        project=PROJECT, instance=INSTANCE, database=history.database, stream=CHANGE_STREAM,
        metadata_url=private_postgres.url, output_root=root / "lake", spark_master=connect.url,
        emulator_host=history.server.host, heartbeat_ms=1000, concurrency=2, home=root / "home",
    )  # fmt: skip
    logs = root / "runs"
    logs.mkdir()
    extracts = Extracts(subprocess_env(settings), logs)
    outcome = Outcome(figures, history, settings, extracts)
    url = private_postgres.url
    with MetadataStore.connect(url) as store:
        store.upgrade()
    for number, window in enumerate(history.windows):
        for k in range(KILLS_PER_WINDOW):
            if k == 2:  # some reads of the next runs fail part-way, the client resumes them
                fail_reads(history.server.host, reads=rng.randint(2, 4), after_rows=rng.randint(0, 40))
            if number == 2 and k == 2:
                # the metadata store goes away and comes back while a run holds a token: the run stops at its first
                # claim (the kills before it committed nothing), Postgres restarts, the run goes on
                run = extracts.start(window, f"w{number}-pg-restart", failpoints="after_claim:1:stop")
                in_flight = run.wait_stopped() and holds_claim(url, run)
                private_postgres.restart()
                figures.postgres_restarts += 1
                figures.postgres_restarts_in_flight += in_flight
                run.resume()
                run.wait()
                outcome.restarted.append(run)
            # the first kills of a window hold a token: nothing before them in the window committed anything
            _kill(extracts, window, f"w{number}-kill{k}", rng, figures, url, in_flight=k < IN_FLIGHT_KILLS_PER_WINDOW)
        if number == 1:  # the same window twice at once
            pair = [extracts.start(window, f"w{number}-concurrent{n}") for n in range(2)]
            figures.concurrent_runs += len(pair)
            outcome.concurrent = pair
            for run in pair:
                run.wait()
        # the finishing run's first reads fail before their first row: whatever is left of the window, the fault
        # fires (a mid-stream fault fires only on a read longer than its row count, which the kills may leave none of)
        fail_reads(history.server.host, reads=rng.randint(1, 3), after_rows=0)
        _finish(extracts, window, f"w{number}-finish")
    for run in extracts.runs:
        print(f"  {run}")
    figures.injected_failures = int(history.server.control.status()["failures_injected"])
    figures.runs = len(extracts.runs)
    figures.elapsed_s = time.monotonic() - started
    outcome.logs = [logs, history.server.log_path, connect.work_dir / "logs", private_postgres.server.data_dir / "server.log"]
    return outcome


@pytest.fixture(scope="module")
def campaign(
    private_postgres: PrivatePostgres, history: History, spark_connect_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Outcome:
    outcome = _campaign(private_postgres, history, spark_connect_server, tmp_path_factory.mktemp("campaign-runs"))
    files = published_files(outcome.lake)
    start, end = history.windows[0][0], history.windows[-1][1]
    expected, _ = truth_identities(history.ground_truth, start, end)
    outcome.figures.rows_expected = len(expected)
    outcome.figures.rows_landed = len(lake_identities(files))
    print(outcome.figures)
    return outcome


def test_the_campaign_suffered_every_fault(campaign: Outcome) -> None:
    figures = campaign.figures
    assert figures.kills >= 20, figures
    assert figures.kills_in_flight >= 5, f"too few kills hit a token being extracted: {figures}"
    assert figures.postgres_restarts_in_flight == 1, figures
    assert figures.concurrent_runs == 2 and figures.injected_failures >= 1, figures
    assert all(run.killed for run in campaign.extracts.runs if "-kill" in run.label and run.returncode != 0), figures


def test_the_lake_equals_the_ground_truth_change_by_change(campaign: Outcome) -> None:
    history, figures = campaign.history, campaign.figures
    files = published_files(campaign.lake)
    expected, outside = truth_identities(history.ground_truth, history.windows[0][0], history.windows[-1][1])
    assert expected and not outside, figures
    landed = Counter(lake_identities(files))
    lost, duplicated = Counter(expected) - landed, landed - Counter(expected)
    assert (sum(lost.values()), sum(duplicated.values())) == (0, 0), (
        f"{sum(lost.values())} lost (e.g. {list(lost)[:2]}), {sum(duplicated.values())} duplicated "
        f"(e.g. {list(duplicated)[:2]}); {figures}"
    )
    uuids = lake_uuids(files)
    assert len(uuids) == len(set(uuids)), figures


def test_every_row_lies_in_the_window_of_its_commit_timestamp(campaign: Outcome) -> None:
    import pyarrow.parquet as pq

    windows = set(campaign.history.windows)
    misplaced = []
    for path in published_files(campaign.lake):
        for row in pq.read_table(path, columns=["commit_timestamp", "window_start", "window_end"]).to_pylist():
            bounds = (row["window_start"], row["window_end"])
            if bounds not in windows or not bounds[0] <= row["commit_timestamp"] < bounds[1]:
                misplaced.append((str(path), row))
    assert not misplaced, f"{len(misplaced)} rows outside their window, e.g. {misplaced[:2]}; {campaign.figures}"


def test_every_window_is_complete_with_a_passing_transaction_check(campaign: Outcome) -> None:
    with MetadataStore.connect(campaign.settings.metadata_url or "") as store:
        rows = {(w.start, w.end): w for w in store.windows(store.get_lineage(CHANGE_STREAM, "live").id)}
    for window in campaign.history.windows:
        row = rows.get(window)
        assert row is not None and row.state == "COMPLETE", f"{window}: {row}; {campaign.figures}"
        assert row.transaction_check and row.transaction_check["ok"], f"{window}: {row}; {campaign.figures}"
        assert row.marker_path and Path(row.marker_path).exists(), f"{window}: {row}; {campaign.figures}"
    summary = campaign.extracts.runs[-1].summary()
    assert summary is not None and summary["complete"], campaign.figures


def test_no_run_ends_in_a_traceback(campaign: Outcome) -> None:
    """Killed runs aside, each run exits 0, or non-zero with its reason on stderr and no traceback."""
    bad = [(run.label, run.returncode, run.err()[-1500:]) for run in campaign.extracts.runs
           if not run.killed and traceback_in(run)]  # fmt: skip
    assert not bad, f"{len(bad)} runs ended in a traceback, e.g. {bad[0]}; {campaign.figures}"


def test_two_runs_of_one_window_at_once_both_end_cleanly(campaign: Outcome) -> None:
    """The loser waits for the winner and reports the same summary, or exits with one clear line."""
    codes = [run.returncode for run in campaign.concurrent]
    assert 0 in codes, [(run.label, run.returncode, run.err()[-1500:]) for run in campaign.concurrent]
    for run in campaign.concurrent:
        if run.returncode != 0:
            assert not traceback_in(run) and run.err().strip(), (run.label, run.returncode, run.err()[-1500:])


def test_the_store_password_appears_in_no_output_log_lake_file_or_store_row(
    campaign: Outcome, private_postgres: PrivatePostgres
) -> None:
    secrets = secret_forms(private_postgres.password)
    assert any(s in campaign.settings.metadata_url for s in secrets)  # the scans look for what the runs were given
    leaked = files_containing([*campaign.logs, campaign.settings.output_root], secrets)
    assert not leaked, f"the store's password is in {leaked}; {campaign.figures}"
    rows = store_rows_containing(private_postgres.url, secrets)
    assert not rows, f"the store's password is in its own tables: {rows[:3]}; {campaign.figures}"
