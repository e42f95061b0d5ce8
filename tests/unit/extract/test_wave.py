"""How a wave of claims is split into Spark jobs (one store commit each)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spanner_cdc.errors import ConfigError
from spanner_cdc.extract import wave
from spanner_cdc.store.models import Claim

T = datetime(2024, 1, 1, tzinfo=UTC)


def claims(n: int) -> list[Claim]:
    return [Claim(1, f"t{i:04d}", T, None, "me", 1, T) for i in range(n)]


def test_a_wave_is_split_into_at_most_concurrency_groups_in_claim_order() -> None:
    assert [len(g) for g in wave.groups(claims(32), 4)] == [8, 8, 8, 8]
    assert [len(g) for g in wave.groups(claims(5), 2)] == [3, 2]
    assert [len(g) for g in wave.groups(claims(3), 8)] == [1, 1, 1]
    assert [c for g in wave.groups(claims(7), 3) for c in g] == claims(7)
    assert wave.groups([], 4) == []


def test_a_huge_wave_commits_in_bounded_groups() -> None:
    sizes = [len(g) for g in wave.groups(claims(1000), 2)]
    assert max(sizes) == wave.MAX_GROUP_TOKENS and sum(sizes) == 1000


def test_the_group_size_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wave.GROUP_TOKENS_ENV, "1")
    assert [len(g) for g in wave.groups(claims(3), 2)] == [1, 1, 1]
    monkeypatch.setenv(wave.GROUP_TOKENS_ENV, "0")
    with pytest.raises(ConfigError, match="SPANNER_CDC_WAVE_GROUP_TOKENS.*an integer in"):
        wave.groups(claims(3), 2)
