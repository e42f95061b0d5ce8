"""How a wave of claims is split into Spark jobs (one store commit each)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest

from spanner_cdc.errors import ExtractError
from spanner_cdc.extract import wave
from spanner_cdc.extract.wave import wait_for_groups
from spanner_cdc.settings import Settings
from spanner_cdc.store.models import Claim

T = datetime(2024, 1, 1, tzinfo=UTC)


def claims(n: int) -> list[Claim]:
    return [Claim(1, f"t{i:04d}", T, None, "me", 1, T) for i in range(n)]


GROUP = Settings.wave_group_tokens  # the default, 512


def test_a_wave_is_split_into_at_most_concurrency_groups_in_claim_order() -> None:
    assert [len(g) for g in wave.groups(claims(32), 4, GROUP)] == [8, 8, 8, 8]
    assert [len(g) for g in wave.groups(claims(5), 2, GROUP)] == [3, 2]
    assert [len(g) for g in wave.groups(claims(3), 8, GROUP)] == [1, 1, 1]
    assert [c for g in wave.groups(claims(7), 3, GROUP) for c in g] == claims(7)
    assert wave.groups([], 4, GROUP) == []


def test_a_huge_wave_commits_in_bounded_groups() -> None:
    sizes = [len(g) for g in wave.groups(claims(2500), 2, GROUP)]
    assert max(sizes) == 512 and sum(sizes) == 2500


def test_the_group_size_can_be_set() -> None:
    assert [len(g) for g in wave.groups(claims(3), 2, 1)] == [1, 1, 1]


def test_a_wave_job_lands_a_few_tokens_per_task(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from spanner_cdc.spark.wave_task import WaveTasks, split_tasks

    def tasks(tokens: int, per_task: int) -> list[list[int]]:
        shipped = pickle.loads(pickle.dumps(WaveTasks(split_tasks(list(range(tokens)), per_task), 1)))  # what each task receives
        return [shipped.specs(n) for n in range(len(shipped))]

    # every token in exactly one task, at most per_task each, spread evenly
    assert tasks(10, 4) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert tasks(3, 1) == [[0], [1], [2]]
    assert tasks(2, 8) == [[0, 1]]
    assert len(WaveTasks(split_tasks(list(range(300)), 4), 1)) == 75


def test_by_default_a_jobs_tasks_are_as_few_as_fill_its_share_of_sparks_cores() -> None:
    """task_tokens 0 (the default): a task's fixed costs are paid as seldom as the cluster allows; a set task_tokens is
    kept; unknown cores split as before (64 a task)."""
    from spanner_cdc.spark.token_job import plan_tasks

    def sizes(tokens: int, task_tokens: int, share: int | None) -> list[int]:
        return [len(t) for t in plan_tasks(list(range(tokens)), task_tokens, share)]  # type: ignore[arg-type]

    assert Settings.task_tokens == 0
    assert sizes(512, 0, 1) == [512]  # local[2], four groups at once: one task a job
    assert sizes(512, 0, 4) == [128] * 4  # 16 cores, four groups at once: four tasks a job
    assert sizes(1200, 0, 1) == [400] * 3  # at most 512 a task
    assert sizes(3, 0, 8) == [1, 1, 1]
    assert sizes(256, 0, None) == [64] * 4  # a Connect server's cluster: its cores unknown
    assert sizes(256, 16, 1) == [16] * 16  # set: kept whatever the cores


@pytest.mark.parametrize(
    ("master", "cores"), [("local", 1), ("local[2]", 2), ("local[8,3]", 8), ("local[*]", None), ("spark://h:7077", None), (None, None)]
)
def test_a_connect_servers_cores_are_known_from_a_local_master_only(master: str | None, cores: int | None) -> None:
    from spanner_cdc.spark.session import local_cores

    assert local_cores(master) == cores


def test_a_tasks_tokens_share_its_memory_budgets() -> None:
    from spanner_cdc.spark.task_files import (
        HOLD_BYTES,
        SPOOL_MEMORY_BYTES,
        TASK_HOLD_BYTES,
        TASK_SPOOL_MEMORY_BYTES,
        token_budgets,
    )

    assert token_budgets(1) == token_budgets(64) == (SPOOL_MEMORY_BYTES, HOLD_BYTES)
    memory, hold = token_budgets(512)
    assert (memory * 512, hold * 512) == (TASK_SPOOL_MEMORY_BYTES, TASK_HOLD_BYTES)


def test_a_wave_tokens_summary_row_fits_the_jobs_schema_and_carries_the_whole_summary() -> None:
    from datetime import UTC, datetime

    from spanner_cdc.spark.control_file import ControlSummary
    from spanner_cdc.spark.executor import WAVE_SCHEMA, _summary_row
    from spanner_cdc.spark.wave_task import WAVE_FILES_DDL

    assert WAVE_SCHEMA.names == [column.split("`")[1] for column in WAVE_FILES_DDL.split(", ")]
    summary = ControlSummary("tok", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 1, tzinfo=UTC), rows=3, heartbeats=2)
    summary.error_type, summary.error_message = "RetentionError", "too old"
    (row,) = _summary_row(summary).to_pylist()
    assert (row["table"], row["path"], row["rows"], row["token"]) == (None, None, 0, "tok")  # no file: not listed
    assert ControlSummary.from_text(row["control"]) == summary


def test_a_wave_task_lands_its_tokens_with_the_threads_set(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from spanner_cdc.spark.wave_task import WaveTasks

    assert pickle.loads(pickle.dumps(WaveTasks([["t"]], 3))).threads == 3  # type: ignore[list-item]
    assert WaveTasks([["t"]], 0).threads == 1  # type: ignore[list-item]


def test_the_wait_for_groups_runs_its_errand_once_after_the_first_group_while_others_still_run() -> None:
    release, seen = threading.Event(), []
    with ThreadPoolExecutor(max_workers=2) as pool:
        quick, slow = pool.submit(lambda: "quick"), pool.submit(release.wait, 60)

        def errand() -> None:
            seen.append((quick.done(), slow.done()))
            release.set()

        wait_for_groups([slow, quick], errand)
    assert seen == [(True, False)]  # after the quick group, before the slow one ended (the errand let it end)


def test_the_wait_for_groups_has_no_errand_for_one_group_or_when_all_have_ended() -> None:
    errands: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        wait_for_groups([pool.submit(lambda: 1)], lambda: errands.append("one group"))
        ended = [pool.submit(lambda: 2), pool.submit(lambda: 3)]
        for future in ended:
            future.result()
        wait_for_groups(ended, lambda: errands.append("all ended"))
    assert errands == []


def test_the_wait_for_groups_raises_a_groups_failure_after_the_errand() -> None:
    def failing() -> None:
        raise ExtractError("group failed")

    errands: list[str] = []
    release = threading.Event()

    def errand() -> None:
        errands.append("errand")
        release.set()

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(failing), pool.submit(release.wait, 60)]
        with pytest.raises(ExtractError, match="group failed"):
            wait_for_groups(futures, errand)
    assert errands == ["errand"]
