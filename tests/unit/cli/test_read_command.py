"""`spanner-cdc read` pieces without a server: timestamp flags and the output formats."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.cli.commands.read import format_text, parse_timestamp, write_records
from spanner_cdc.errors import ConfigError
from tests.unit.source.test_decode import EXPECTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T09:00:00Z", datetime(2024, 5, 1, 9, tzinfo=UTC)),
        ("2024-05-01t09:00:00z", datetime(2024, 5, 1, 9, tzinfo=UTC)),
        ("2024-05-01T11:00:00.5+02:00", datetime(2024, 5, 1, 9, 0, 0, 500000, tzinfo=UTC)),
        ("2024-05-01T09:00:00.123456789Z", datetime(2024, 5, 1, 9, 0, 0, 123456, tzinfo=UTC)),
        ("2024-05-01T04:00:00-05:00", datetime(2024, 5, 1, 9, tzinfo=UTC)),
    ],
)
def test_rfc3339_with_z_or_offset_is_accepted(text: str, expected: datetime) -> None:
    parsed = parse_timestamp(text, "--start")
    assert parsed == expected and parsed.utcoffset() == timedelta(0)


def test_now_is_the_current_time() -> None:
    before = datetime.now(UTC)
    assert before <= parse_timestamp("now", "--end") <= datetime.now(UTC)


@pytest.mark.parametrize("text", ["2024-05-01T09:00:00", "2024-05-01", "yesterday", "2024-13-01T09:00:00Z", "1714554000", ""])
def test_anything_else_names_the_flag_and_the_format(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_timestamp(text, "--end")
    assert info.value.field == "--end"
    assert "RFC 3339" in str(info.value) and "'now'" in str(info.value)


def test_jsonl_is_one_flushed_object_per_record() -> None:
    records = [("t1", EXPECTED["transfer_1"][1]), ("t1", EXPECTED["heartbeat"][1]), (None, EXPECTED["roots_1"][1])]
    out = io.StringIO()
    assert write_records(records, "jsonl", out) == 3
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["data_change", "heartbeat", "child_partitions"]
    assert [json.loads(line)["partition_token"] for line in lines] == ["t1", "t1", None]
    assert json.loads(lines[0])["mods"][0]["new_values"] == {"LastUpdate": "2022-09-27T12:30:00.123456Z", "Balance": 1000}


def test_text_lines_say_what_happened() -> None:
    assert format_text("t1", EXPECTED["heartbeat"][1]) == "2022-09-27T12:35:00.312486Z t1 heartbeat"
    line = format_text("t1", EXPECTED["transfer_2"][1])
    assert line.startswith("2022-09-27T12:30:00.123456Z t1 data_change UPDATE AccountBalance txn=6329047911 seq=00000001")
    assert 'keys=[{"AccountId":"Id2"}]' in line
    merge = format_text("t2", EXPECTED["merge"][1])
    assert merge == "2022-05-01T09:30:15.000000Z t2 child_partitions seq=1000012389 child_token_4<-[child_token_2,child_token_3]"


def test_the_root_query_s_lines_name_no_token() -> None:
    from spanner_cdc.model.records import PartitionStartRecord

    start = PartitionStartRecord(datetime(2026, 11, 23, 21, 30, 44, 23733, tzinfo=UTC), "00000000", ("a", "b"))
    assert format_text(None, start) == "2026-11-23T21:30:44.023733Z (root) partition_start seq=00000000 a b"
