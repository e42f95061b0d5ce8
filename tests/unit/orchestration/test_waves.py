"""Ready tokens as XCom payloads, batching under max_map_length, and the labels the UI shows."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest

from spanner_cdc.orchestration import waves


@dataclass
class Ready:
    token: str
    read_from: dt.datetime
    read_to: dt.datetime


def _payloads(n: int) -> list[dict[str, str]]:
    return [{"token": f"tok{i}", "read_from": "x", "read_to": "y", "label": f"t{i}"} for i in range(n)]


def test_payload_is_json_able_and_labelled_with_short_token_and_range() -> None:
    start = dt.datetime(2024, 1, 1, 10, tzinfo=dt.UTC)
    item = waves.payload(Ready("A" * 30 + "tail123456", start, start + dt.timedelta(minutes=59, seconds=59)))
    assert item["token"] == "A" * 30 + "tail123456"
    assert item["read_from"] == "2024-01-01T10:00:00+00:00"
    assert item["label"] == "…tail123456 10:00:00–10:59:59"


def test_payload_prefers_the_pipelines_own_label() -> None:
    @dataclass
    class Labelled(Ready):
        label: str = "custom"

    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert waves.payload(Labelled("t", start, start))["label"] == "custom"


def test_one_token_per_task_while_under_the_limit() -> None:
    assert waves.batches(_payloads(3), limit=3) == [[p] for p in _payloads(3)]
    assert waves.batches([], limit=3) == []


@pytest.mark.parametrize(("n", "limit"), [(4, 3), (10, 3), (1025, 1024), (7, 1)])
def test_over_the_limit_every_token_lands_in_exactly_one_batch(n: int, limit: int) -> None:
    batches = waves.batches(_payloads(n), limit)
    assert 1 <= len(batches) <= limit
    flat = [item["token"] for batch in batches for item in batch]
    assert flat == [f"tok{i}" for i in range(n)]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        waves.batches(_payloads(1), 0)


def test_batch_label_names_the_first_token_and_how_many_more() -> None:
    assert waves.batch_label(_payloads(1)) == "t0"
    assert waves.batch_label(_payloads(3)) == "t0 (+2 more tokens)"
    assert waves.batch_label(_payloads(2)) == "t0 (+1 more token)"
