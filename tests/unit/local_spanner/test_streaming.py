"""Streaming a change stream query: a resume token on every message, exact resume, injected failures, chunks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud.spanner_v1.streamed import StreamedResultSet
from google.cloud.spanner_v1.types import PartialResultSet

from spanner_cdc.local_spanner import streaming
from spanner_cdc.local_spanner.record_bytes import EncodedRecords, FastRecordEncoder
from spanner_cdc.local_spanner.record_encoding import GOOGLESQL_METADATA, pg_metadata
from spanner_cdc.local_spanner.streaming import ChangeStreamSender, FaultInjector, InjectedFailure, Position

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def records(transactions: int = 30, big: int | None = None) -> list[dict[str, Any]]:
    """Data records of `transactions` commits (two records each), a heartbeat and the partition's end."""
    out: list[dict[str, Any]] = []
    for n in range(transactions):
        for sequence in range(2):
            text = "x" * (3 << 20) if n == big and sequence == 0 else f"v{n}"
            out.append({"data_change_record": {
                "commit_timestamp": T0 + timedelta(seconds=n), "record_sequence": f"{sequence:08d}",
                "server_transaction_id": f"tx{n}", "is_last_record_in_transaction_in_partition": sequence == 1,
                "table_name": "T", "column_types": [{"name": "K", "type": {"code": "INT64"}, "is_primary_key": True, "ordinal_position": 1}],
                "mods": [{"keys": {"K": str(n)}, "new_values": {"V": text}, "old_values": {}}], "mod_type": "INSERT",
                "value_capture_type": "NEW_ROW", "number_of_records_in_transaction": 2, "number_of_partitions_in_transaction": 1,
                "transaction_tag": "", "is_system_transaction": False}})
    end = T0 + timedelta(seconds=transactions)
    out.append({"heartbeat_record": {"timestamp": end - timedelta(microseconds=1)}})
    out.append({"child_partitions_record": {"start_timestamp": end, "record_sequence": "00000000",
                                            "child_partitions": [{"token": "child", "parent_partition_tokens": ["p"]}]}})
    return out


def engine_query(all_records: list[dict[str, Any]], start: datetime) -> Iterator[dict[str, Any]]:
    """What the engine returns for a restarted query: everything from `start` on."""
    for record in all_records:
        if streaming.record_position(record).timestamp >= start:
            yield record


def send(all_records: list[dict[str, Any]], resume: bytes = b"", fail_after: int | None = None) -> tuple[list[bytes], bool]:
    position = Position.parse(resume) if resume else None
    start = max(T0, position.timestamp) if position and position.ts_us > 0 else T0
    sender = ChangeStreamSender(engine_query(all_records, start), threading.Event(), False, GOOGLESQL_METADATA, position, fail_after, lambda: True)
    messages: list[bytes] = []
    try:
        for message in sender.messages():
            messages.append(message)
    except InjectedFailure:
        return messages, True
    return messages, False


def decode(messages: list[bytes]) -> list[Any]:
    return list(StreamedResultSet(iter([PartialResultSet.deserialize(m) for m in messages])))


def token(message: bytes) -> bytes:
    return bytes(PartialResultSet.deserialize(message).resume_token)


def test_every_message_carries_a_resume_token_and_only_the_first_the_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "MESSAGE_ROWS", 7)
    messages, failed = send(records())
    assert not failed and len(messages) > 5
    assert all(token(m) for m in messages)
    parsed = [PartialResultSet.deserialize(m) for m in messages]
    assert "metadata" in parsed[0] and not any("metadata" in p for p in parsed[1:])
    assert decode(messages) == decode(send(records())[0])
    assert len(decode(messages)) == 62


@pytest.mark.parametrize("after_rows", [0, 1, 7, 20, 61, 62])
def test_an_injected_failure_resumes_without_loss_or_repeat(after_rows: int) -> None:
    all_records = records()
    expected = decode(send(all_records)[0])
    first, failed = send(all_records, fail_after=after_rows)
    assert failed
    assert len(decode(first)) == after_rows  # the failure comes right after the promised rows
    last_token = token(first[-1]) if first else b""
    rest, failed_again = send(all_records, resume=last_token)
    assert not failed_again
    assert decode(first) + decode(rest) == expected


def test_resume_in_the_middle_of_a_chunked_record() -> None:
    all_records = records(transactions=5, big=2)
    messages, _ = send(all_records)
    chunked = [i for i, m in enumerate(messages) if PartialResultSet.deserialize(m).chunked_value]
    assert len(chunked) >= 3  # a 3 MiB value goes in 1 MiB chunks
    cut = chunked[1]  # the client got two chunks of the big record, then the stream broke
    rest, _ = send(all_records, resume=token(messages[cut]))
    assert decode(messages[: cut + 1] + rest) == decode(messages)


def test_fault_injector_arms_a_number_of_reads() -> None:
    faults = FaultInjector()
    faults.arm(reads=2, after_rows=5)
    assert [faults.take(), faults.take(), faults.take()] == [5, 5, None]


def test_positions_order_records_within_a_timestamp() -> None:
    data = Position(10, 0, "00000002")
    assert Position(10, 0, "00000010").key > data.key  # sequences compare as numbers
    assert Position(10, 1, "").key > data.key  # a heartbeat at the same time comes after the data
    assert Position.parse(data.token()) == data


class CountingEncoder(FastRecordEncoder):
    def __init__(self, postgres: bool) -> None:
        super().__init__(postgres)
        self.encoded = 0

    def encode(self, record: dict[str, Any]) -> bytes:
        self.encoded += 1
        return super().encode(record)


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_a_partition_read_again_sends_the_same_messages_without_encoding_its_data_again(postgres: bool) -> None:
    stream = records()
    cache = EncodedRecords()
    sent, encoders = [], []
    for cached in (None, cache, cache):
        encoder = CountingEncoder(postgres)
        metadata = pg_metadata("s") if postgres else GOOGLESQL_METADATA
        sender = ChangeStreamSender(iter(stream), threading.Event(), postgres, metadata, None, None, lambda: True, encoder, cached)
        sent.append(decode(list(sender.messages())))  # rows, whatever the messages' batching
        encoders.append(encoder.encoded)
    assert sent[0] == sent[1] == sent[2] and len(sent[0]) == len(stream)
    data = sum(1 for r in stream if "data_change_record" in r)
    assert encoders == [len(stream), len(stream), len(stream) - data]  # heartbeats and partition records: per query


def test_encoded_records_are_keyed_by_the_record_object_and_bounded() -> None:
    cache = EncodedRecords(budget=10)
    first, equal = {"a": 1}, {"a": 1}
    cache.put(first, b"12345")
    assert cache.get(first) == b"12345" and cache.get(equal) is None
    cache.put(equal, b"678901")  # past the budget: the cache starts over
    assert cache.get(first) is None and cache.get(equal) == b"678901"
