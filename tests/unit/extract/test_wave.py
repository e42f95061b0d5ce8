"""How a wave of claims is split into Spark jobs (one store commit each)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spanner_cdc.extract import wave
from spanner_cdc.settings import Settings
from spanner_cdc.store.models import Claim

T = datetime(2024, 1, 1, tzinfo=UTC)


def claims(n: int) -> list[Claim]:
    return [Claim(1, f"t{i:04d}", T, None, "me", 1, T) for i in range(n)]


GROUP = Settings.wave_group_tokens  # the default, 256


def test_a_wave_is_split_into_at_most_concurrency_groups_in_claim_order() -> None:
    assert [len(g) for g in wave.groups(claims(32), 4, GROUP)] == [8, 8, 8, 8]
    assert [len(g) for g in wave.groups(claims(5), 2, GROUP)] == [3, 2]
    assert [len(g) for g in wave.groups(claims(3), 8, GROUP)] == [1, 1, 1]
    assert [c for g in wave.groups(claims(7), 3, GROUP) for c in g] == claims(7)
    assert wave.groups([], 4, GROUP) == []


def test_a_huge_wave_commits_in_bounded_groups() -> None:
    sizes = [len(g) for g in wave.groups(claims(1000), 2, GROUP)]
    assert max(sizes) == 256 and sum(sizes) == 1000


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
