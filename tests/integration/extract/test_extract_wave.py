"""A wave of tokens in one Spark job and one store commit: a task's tokens share one file per table, a token's failure
stays its own, and a lost claim takes back every token whose rows share a file with it."""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spanner_cdc.devstack.spanner_server import LocalSpanner
from spanner_cdc.errors import ExtractError, SourceError
from spanner_cdc.extract.token import ExtractJob
from spanner_cdc.extract.wave import extract_wave
from spanner_cdc.extract.window import close_window, layout_of, plan_window, run_window
from spanner_cdc.lake.layout import published_files
from spanner_cdc.lineage.rules import inclusive_end
from spanner_cdc.names import LIVE_READ_METHOD
from spanner_cdc.source.client import open_database
from spanner_cdc.source.partition_mode import detect_partition_mode
from spanner_cdc.spark.spec import TokenJobSpec
from spanner_cdc.spark.token_job import run_wave_job
from spanner_cdc.store import MetadataStore
from spanner_cdc.store.models import LeaseLost
from tests.integration.extract.lake_reading import change_of, published_rows
from tests.integration.extract.workload import DDL, STREAM, SmallWorkload

pytestmark = pytest.mark.integration
LEASE = timedelta(seconds=60)


def job_of(settings: Any, store: MetadataStore, spark: Any, lineage_id: int, start: datetime, end: datetime) -> ExtractJob:
    dialect = "GOOGLE_STANDARD_SQL"
    connection = {
        "project": settings.project, "instance": settings.instance, "database": settings.database,
        "emulator_host": settings.emulator_host, "dialect": dialect, "heartbeat_ms": settings.heartbeat_ms,
        "partition_mode": detect_partition_mode(open_database(settings), STREAM, dialect),
    }  # fmt: skip
    return ExtractJob(
        store=store, spark=spark, layout=layout_of(settings), lineage_id=lineage_id, stream=STREAM,
        window_start=start, window_end=end, read_method=LIVE_READ_METHOD, connection=connection,
    )  # fmt: skip


@pytest.mark.parametrize("per_task", ["1", "16"], ids=["a-task-per-token", "tokens-share-a-task"])
def test_a_wave_commits_once_and_a_lost_claim_lands_nothing(
    make_spanner_database: Any, extract_settings: Any, store: MetadataStore, spark: Any, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch, per_task: str,
) -> None:  # fmt: skip
    shared = per_task != "1"
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM)
    work, w0 = SmallWorkload(database), datetime.now(UTC)
    work.phase(range(0, 24))
    w1 = datetime.now(UTC)
    plan = plan_window(settings, w0, w1)
    assert len(plan.ready) >= 2, plan.ready
    first = store.claim(plan.lineage_id, window_end=w1, owner="run-a", lease=LEASE, liveness=False)
    # the second token's claim is lost: its attempt failed and another run holds it now
    kept, lost = first[0], first[1]
    store.fail(lost, "taken away by the test")
    [thief] = store.claim(plan.lineage_id, window_end=w1, owner="run-b", lease=LEASE, tokens=[lost.token], liveness=False)
    job = dataclasses.replace(job_of(settings, store, spark, plan.lineage_id, w0, w1), task_tokens=int(per_task))
    caplog.set_level(logging.INFO, logger="spanner_cdc.extract.wave")
    with pytest.raises(ExtractError if shared else LeaseLost, match=lost.token if not shared else "2 of 2 tokens failed"):
        extract_wave(job, [kept, lost], concurrency=1, lease=LEASE)
    assert f"a wave job landed {0 if shared else 1} token(s)" in caplog.text  # one job, one commit, for both claims
    rows = {p.token: p for p in store.partitions(plan.lineage_id)}
    assert (rows[lost.token].state, rows[lost.token].lease_owner) == ("RUNNING", "run-b")
    if shared:  # the kept token's rows share files with the lost one's: neither is committed, kept is READY again
        assert store.manifest(plan.lineage_id) == []
        assert (rows[kept.token].state, rows[kept.token].watermark) == ("READY", None)
        [kept] = store.claim(plan.lineage_id, window_end=w1, owner="run-a", lease=LEASE, tokens=[kept.token], liveness=False)
        extract_wave(job, [kept], concurrency=1, lease=LEASE)
    files = {f.token for f in store.manifest(plan.lineage_id)}
    assert kept.token in files and lost.token not in files  # the lost claim committed nothing
    assert {p.token: p for p in store.partitions(plan.lineage_id)}[kept.token].watermark == inclusive_end(w1)
    # its holder lands it; what the lost attempt published is in no manifest, and the window's close deletes it
    [result] = extract_wave(job, [thief], concurrency=1, lease=LEASE)
    assert result.token == lost.token
    close_window(settings, w0, w1)
    assert {p.watermark for p in store.partitions(plan.lineage_id) if p.token in (kept.token, lost.token)} == {inclusive_end(w1)}
    assert {str(p) for p in published_files(layout_of(settings).root)} == {f.path for f in store.manifest(plan.lineage_id)}
    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)


def test_a_failing_token_fails_alone_in_its_wave_job(
    make_spanner_database: Any, extract_settings: Any, spark: Any, tmp_path: Path
) -> None:
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM)
    work, w0 = SmallWorkload(database), datetime.now(UTC)
    work.phase(range(0, 8))
    w1 = datetime.now(UTC)
    plan = plan_window(settings, w0, w1)
    connection = job_of(settings, None, spark, plan.lineage_id, w0, w1).connection  # type: ignore[arg-type]

    def spec(token: str) -> TokenJobSpec:
        return TokenJobSpec(
            stream=STREAM, token=token, read_from=w0, read_to=inclusive_end(w1), window_start=w0, window_end=w1,
            read_method=LIVE_READ_METHOD, attempt_dir=str(tmp_path / token[-12:]), lake_root=str(tmp_path / "lake"),
            lineage_id=plan.lineage_id, **connection,
        )  # fmt: skip

    tokens = [t.token for t in plan.ready]
    task = [spec(tokens[0]), spec("no-such-partition-token"), *map(spec, tokens[1:])]
    outcomes = run_wave_job(spark, [task])  # one task: the bad token's rows would share the others' files
    assert [o.spec.token for o in outcomes] == [tokens[0], "no-such-partition-token", *tokens[1:]]
    bad = outcomes[1]
    # an unknown token is INVALID_ARGUMENT, as Google's emulator answers it (the differential test holds the local server to it)
    assert isinstance(bad.error, SourceError) and "(INVALID_ARGUMENT)" in str(bad.error), bad.error
    assert bad.summary is None and bad.listing == []
    good = [o for o in outcomes if o is not bad]
    assert all(o.error is None and o.summary is not None for o in good)
    landed = sum(row["rows"] for o in good for row in o.listing)
    assert landed == sum(o.summary.rows for o in good if o.summary) == len(work.expected)
    paths = {row["path"] for o in good for row in o.listing}
    assert len(paths) == len({row["table"] for o in good for row in o.listing})  # one file per table for the task
    assert sum(pq.read_metadata(p).num_rows for p in paths) == len(work.expected)  # the failed token's rows in none


def test_a_window_of_many_tokens_lands_at_most_tables_times_tasks_files(
    make_spanner_database: Any, local_spanner: LocalSpanner, extract_settings: Any, store: MetadataStore,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Splits in the window give it many tokens over several waves; each task writes one file per table for all its
    tokens, so the window's files are bounded by tables x tasks, not by tokens, and hold exactly its changes."""
    database = make_spanner_database(DDL)
    settings = extract_settings(database.database_id, STREAM, concurrency=1, task_tokens=4)
    work, w0 = SmallWorkload(database), datetime.now(UTC)
    for n in range(6):
        work.phase(range(n * 16, n * 16 + 16))
        local_spanner.control.split(database.name, STREAM)
    work.phase(range(96, 112))
    w1 = max(datetime.now(UTC), max(change[0] for change in work.expected) + timedelta(microseconds=1))
    caplog.set_level(logging.INFO, logger="spanner_cdc.extract.wave")
    summary = run_window(settings, w0, w1)
    assert summary.complete and summary.extracted_tokens >= 10, summary
    tasks = sum(int(m.group(1)) for m in re.finditer(r"a wave job of \d+ token\(s\) in (\d+) task\(s\)", caplog.text))
    files = store.manifest(store.get_lineage(STREAM, settings.namespace).id)
    tables = {f.table_name for f in files}
    assert tables == {"Accounts", "Events"}
    assert tasks < summary.extracted_tokens  # a task per few tokens
    assert len(files) <= len(tables) * tasks < len(tables) * summary.extracted_tokens
    assert {str(p) for p in published_files(layout_of(settings).root)} == {f.path for f in files}
    assert Counter(change_of(r) for r in published_rows(settings.output_root)) == Counter(work.expected)
