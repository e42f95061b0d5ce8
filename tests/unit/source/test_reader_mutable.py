"""PartitionReader in MUTABLE_KEY_RANGE mode: queries of at most 30 minutes, until the end or the partition's end."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from spanner_cdc.model.records import ChangeRecord, HeartbeatRecord, PartitionEndRecord
from spanner_cdc.source.reader import PartitionReader

T0 = datetime(2030, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


def reader_with(answer: Any) -> tuple[PartitionReader, list[tuple[str | None, datetime, datetime | None]]]:
    reader = PartitionReader(object(), "s", dialect="GOOGLE_STANDARD_SQL", partition_mode="MUTABLE_KEY_RANGE")
    queries: list[tuple[str | None, datetime, datetime | None]] = []

    def query(token: str | None, start: datetime, end: datetime | None) -> Iterator[ChangeRecord]:
        queries.append((token, start, end))
        yield from answer(start, end)

    reader._query = query  # type: ignore[method-assign]
    return reader, queries


def test_a_long_range_is_read_in_consecutive_queries_of_30_minutes() -> None:
    reader, queries = reader_with(lambda start, end: [HeartbeatRecord(end)])
    records = list(reader.read("p", T0, T0 + timedelta(minutes=70)))
    assert queries == [
        ("p", T0, T0 + timedelta(minutes=30)),
        ("p", T0 + timedelta(minutes=30) + US, T0 + timedelta(minutes=60) + US),
        ("p", T0 + timedelta(minutes=60) + 2 * US, T0 + timedelta(minutes=70)),
    ]
    assert [r.timestamp for r in records] == [e for _, _, e in queries]


def test_the_partition_end_record_stops_the_read_and_the_root_query_is_one_query() -> None:
    ended = T0 + timedelta(minutes=40)
    reader, queries = reader_with(lambda start, end: [PartitionEndRecord(ended, "00000000", "p")] if end >= ended else [])
    records = list(reader.read("p", T0, T0 + timedelta(hours=3)))
    assert records == [PartitionEndRecord(ended, "00000000", "p")] and len(queries) == 2

    root_reader, root_queries = reader_with(lambda start, end: [])
    list(root_reader.read(None, T0, None))
    assert root_queries == [(None, T0, T0 + timedelta(minutes=30))]


def test_immutable_mode_is_one_query_whatever_the_range() -> None:
    reader = PartitionReader(object(), "s", dialect="GOOGLE_STANDARD_SQL", partition_mode="IMMUTABLE_KEY_RANGE")
    queries: list[Any] = []
    reader._query = lambda token, start, end: iter(queries.append((start, end)) or ())  # type: ignore[method-assign]
    list(reader.read("p", T0, T0 + timedelta(hours=3)))
    assert queries == [(T0, T0 + timedelta(hours=3))]
