"""record_to_json: kind, partition_token, the spec's field names, RFC 3339 µs timestamps with Z."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from spanner_cdc.model.record_json import record_to_json, rfc3339
from spanner_cdc.model.records import HeartbeatRecord
from tests.unit.source import test_decode_examples as ex
from tests.unit.source.test_decode import EXPECTED

KINDS = {"data_change_record": "data_change", "heartbeat_record": "heartbeat", "child_partitions_record": "child_partitions"}


@pytest.mark.parametrize("name", ["transfer_1", "transfer_2", "new_values", "new_row", "heartbeat", "child_partitions"])
def test_spec_examples_come_back_as_the_spec_wrote_them(name: str) -> None:
    example, record = EXPECTED[name]
    ((kind, body),) = example.items()
    out = record_to_json(record, "token-7")
    assert out == {"kind": KINDS[kind], "partition_token": "token-7", **body}
    assert json.loads(json.dumps(out)) == out


def test_root_partitions_record_normalises_sequence_timestamp_and_null_parents() -> None:
    out = record_to_json(EXPECTED["roots_1"][1], None)
    assert out == {
        "kind": "child_partitions",
        "partition_token": None,
        "start_timestamp": "2022-05-01T09:00:01.000000Z",
        "record_sequence": "1000012389",
        "child_partitions": [
            {"token": "child_token_1", "parent_partition_tokens": []},
            {"token": "child_token_2", "parent_partition_tokens": []},
        ],
    }
    assert ex.ROOTS_1["child_partitions_record"]["record_sequence"] == 1000012389


def test_field_order_starts_with_kind_and_token() -> None:
    out = record_to_json(EXPECTED["merge"][1], "t")
    assert list(out)[:3] == ["kind", "partition_token", "start_timestamp"]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2022, 9, 27, 12, 30, tzinfo=UTC), "2022-09-27T12:30:00.000000Z"),
        (datetime(2022, 9, 27, 14, 30, 0, 5, tzinfo=timezone(timedelta(hours=2))), "2022-09-27T12:30:00.000005Z"),
        (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00.000000Z"),
    ],
)
def test_rfc3339_is_utc_with_microseconds_and_z(value: datetime, text: str) -> None:
    assert rfc3339(value) == text


def test_heartbeat_shape() -> None:
    out = record_to_json(HeartbeatRecord(datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC)), "p")
    assert out == {"kind": "heartbeat", "partition_token": "p", "timestamp": "2024-01-02T03:04:05.000006Z"}


def test_not_a_record_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        record_to_json("nope", None)  # type: ignore[arg-type]
