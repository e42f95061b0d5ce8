"""PartitionReader against a scripted Database: query shape, laziness, resume without loss or repeat, errors."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from google.api_core import exceptions as gexc
from google.cloud.spanner_v1 import RequestOptions

from spanner_cdc.errors import ConfigError, NotFound, RetentionError, SourceError, UsageError
from spanner_cdc.model.records import DataChangeRecord, HeartbeatRecord
from spanner_cdc.source.reader import PartitionReader
from tests.unit.source.reader_fakes import FakeDatabase, child_partitions, data_change, heartbeat

DIALECTS = ("GOOGLE_STANDARD_SQL", "POSTGRESQL")
START = datetime(2022, 9, 27, 12, 0, tzinfo=UTC)
END = datetime(2022, 9, 27, 13, 0, tzinfo=UTC)
T1, T2, T3 = "2022-09-27T12:30:00.000001Z", "2022-09-27T12:30:00.000002Z", "2022-09-27T12:30:00.000003Z"

# one commit timestamp shared by two transactions, three records: the resume must not go by time alone
HISTORY = [
    data_change(T1, "A", "00"),
    data_change(T1, "A", "01"),
    data_change(T1, "B", "00"),
    heartbeat(T2),
    data_change(T3, "C", "00"),
    child_partitions(T3, "07", "child_1", "child_2"),
    child_partitions(T3, "08", "child_3"),
]


def identity(record: object) -> tuple[object, ...]:
    if isinstance(record, DataChangeRecord):
        return ("data", record.server_transaction_id, record.record_sequence)
    if isinstance(record, HeartbeatRecord):
        return ("heartbeat", record.timestamp)
    return ("children", record.record_sequence)  # type: ignore[attr-defined]


def reader(db: FakeDatabase, **kw: object) -> PartitionReader:
    r = PartitionReader(db, "Orders", dialect=db.dialect, heartbeat_ms=2000, **kw)  # type: ignore[arg-type]
    r._sleep = lambda seconds: None  # backoff is not what these tests are about
    return r


def sent_start(db: FakeDatabase, call: int) -> datetime:
    params = db.calls[call].params
    return params["p1"] if db.dialect == "POSTGRESQL" else params["start_timestamp"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_query_in_a_single_use_snapshot_without_deadline(dialect: str) -> None:
    db = FakeDatabase(dialect, HISTORY)
    records = list(reader(db, request_tag="extract-orders", priority="low").read("tok", START, END))
    assert [identity(r) for r in records] == [identity(r) for r in reader(FakeDatabase(dialect, HISTORY)).read("tok", START, END)]
    assert len(records) == len(HISTORY)
    (call,) = db.calls
    assert call.timeout is None
    assert isinstance(call.request_options, RequestOptions)
    assert call.request_options.request_tag == "extract-orders"
    assert call.request_options.priority == RequestOptions.Priority.PRIORITY_LOW
    token_key = "p3" if dialect == "POSTGRESQL" else "partition_token"
    assert call.params[token_key] == "tok" and sent_start(db, 0) == START
    assert call.lazy_decode  # the reader decodes the values itself (PostgreSQL's JSON text, GoogleSQL's protobuf values)
    assert db.open_snapshots == 0


def test_records_are_yielded_lazily() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY)
    records = reader(db).read("tok", START, END)
    assert db.calls == []  # nothing runs before the first next()
    first = next(records)
    assert identity(first) == ("data", "A", "00")
    assert db.calls[0].rows_sent == 1
    records.close()
    assert db.open_snapshots == 0


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("error", [gexc.DeadlineExceeded("deadline"), gexc.Aborted("aborted"), gexc.Unknown("?"),
                                   gexc.InternalServerError("rst"), gexc.ServiceUnavailable("down")])  # fmt: skip
def test_failure_inside_a_commit_timestamp_resumes_there_without_repeat(dialect: str, error: Exception) -> None:
    db = FakeDatabase(dialect, HISTORY, failures=[(2, error)])
    r = reader(db)
    records = list(r.read("tok", START, END))
    assert [identity(x) for x in records] == [identity(x) for x in reader(FakeDatabase(dialect, HISTORY)).read("tok", START, END)]
    assert len(db.calls) == 2 and r.resumes == 1
    assert sent_start(db, 1) == datetime(2022, 9, 27, 12, 30, 0, 1, tzinfo=UTC)  # T1 itself, not T1 + 1µs


def test_failure_after_a_heartbeat_resumes_just_after_it() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(4, gexc.Aborted("x"))])
    records = list(reader(db).read("tok", START, END))
    assert len(records) == len(HISTORY)
    assert sent_start(db, 1) == datetime(2022, 9, 27, 12, 30, 0, 3, tzinfo=UTC)  # T2 + 1µs


def test_failure_between_child_partitions_records_repeats_neither() -> None:
    db = FakeDatabase("GOOGLE_STANDARD_SQL", HISTORY, failures=[(6, gexc.DeadlineExceeded("x"))])
    records = list(reader(db).read("tok", START, END))
    assert [identity(x) for x in records][-3:] == [("data", "C", "00"), ("children", "07"), ("children", "08")]
    assert len(records) == len(HISTORY)


def test_failure_before_any_record_re_queries_from_the_start() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.Unknown("x")), (0, gexc.Unknown("x"))])
    assert len(list(reader(db).read("tok", START, END))) == len(HISTORY)
    assert [sent_start(db, i) for i in range(3)] == [START, START, START]


def test_heartbeat_at_the_end_needs_no_re_query() -> None:
    history = [data_change(T1, "A", "00"), heartbeat("2022-09-27T13:00:00Z")]
    db = FakeDatabase("POSTGRESQL", history, failures=[(2, gexc.DeadlineExceeded("x"))])
    assert len(list(reader(db).read("tok", START, END))) == 2
    assert len(db.calls) == 1


def test_several_failures_in_a_row_each_resume_from_the_latest_point() -> None:
    failures = [(1, gexc.Aborted("1")), (2, gexc.Aborted("2")), (1, gexc.Aborted("3")), None]
    db = FakeDatabase("GOOGLE_STANDARD_SQL", HISTORY, failures=failures)  # type: ignore[arg-type]
    records = list(reader(db).read("tok", START, END))
    assert [identity(x) for x in records] == [identity(x) for x in reader(FakeDatabase("GOOGLE_STANDARD_SQL", HISTORY)).read("tok", START, END)]
    assert len(db.calls) == 4


def test_gives_up_after_max_resumes_without_progress() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.DeadlineExceeded("stuck"))] * 10)
    with pytest.raises(SourceError, match=r"Orders tok: .*failed 4 times in a row.*stuck"):
        list(reader(db, max_resumes=3).read("tok", START, END))
    assert len(db.calls) == 4


def test_progress_resets_the_failure_count() -> None:
    # every attempt delivers one new record before failing (the replayed ones are skipped, not progress)
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(1, gexc.Aborted("x")), (2, gexc.Aborted("x")), (3, gexc.Aborted("x"))])
    assert len(list(reader(db, max_resumes=1).read("tok", START, END))) == len(HISTORY)
    assert len(db.calls) == 4


def test_out_of_range_is_a_retention_error_that_says_what_to_do() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.OutOfRange("start_timestamp is too far in the past"))])
    with pytest.raises(RetentionError) as info:
        list(reader(db).read("tok", START, END))
    message = str(info.value)
    assert message.startswith("Orders tok: the window start 2022-09-27T12:00:00.000000Z has left the change stream's retention period")
    assert "too far in the past" in message and "within the retention period" in message
    assert len(db.calls) == 1


def test_out_of_range_that_names_the_streams_creation_says_the_stream_was_created_later() -> None:
    said = "start_timestamp 2022-09-27T12:00:00+00:00 is before change stream Orders was created; the earliest allowed is 2022-09-28T08:00:00.5+00:00"
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.OutOfRange(said))])
    with pytest.raises(RetentionError) as info:
        list(reader(db).read("tok", START, END))
    message = str(info.value)
    assert message.startswith("Orders tok: the window start 2022-09-27T12:00:00.000000Z precedes the change stream's creation (at 2022-09-28T08:00:00.500000Z)")
    assert "retention period" not in message and info.value.spanner_message == said


def test_out_of_range_for_a_start_ahead_of_spanners_clock_is_not_a_retention_error() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.OutOfRange("Specified start_timestamp is too far in the future."))])
    with pytest.raises(SourceError, match="is ahead of Spanner's clock") as info:
        list(reader(db).read("tok", START, END))
    assert not isinstance(info.value, RetentionError)  # Spanner's clock gets there: a retry can read it


def test_invalid_argument_and_not_found_carry_spanners_message() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.InvalidArgument("bad token zzz"))])
    with pytest.raises(SourceError, match=r"Orders tok: .*INVALID_ARGUMENT.*bad token zzz"):
        list(reader(db).read("tok", START, END))
    db = FakeDatabase("POSTGRESQL", HISTORY, failures=[(0, gexc.NotFound("change stream Orders not found"))])
    with pytest.raises(NotFound, match="Orders tok: change stream Orders not found"):
        list(reader(db).read("tok", START, END))


def test_bad_arguments_fail_at_the_call_not_at_the_first_record() -> None:
    db = FakeDatabase("POSTGRESQL", HISTORY)
    with pytest.raises(UsageError, match="before start_timestamp"):
        reader(db).read("tok", END, START)
    with pytest.raises(ConfigError, match="heartbeat_ms"):
        PartitionReader(db, "Orders", dialect="POSTGRESQL", heartbeat_ms=999)
    with pytest.raises(ConfigError, match="stream"):
        PartitionReader(db, "Orders'; --", dialect="POSTGRESQL")
    with pytest.raises(ConfigError, match="priority"):
        PartitionReader(db, "Orders", dialect="POSTGRESQL", priority="urgent")
    assert db.calls == []


def test_malformed_record_is_not_retried() -> None:
    broken = [{"partition_event_record": {"timestamp": "2022-09-27T12:30:00Z"}}]
    db = FakeDatabase("POSTGRESQL", broken)
    with pytest.raises(SourceError, match="unknown record kind"):
        list(reader(db).read("tok", START, END))
    assert len(db.calls) == 1


def test_postgresql_reads_through_the_clients_rows_when_its_message_stream_is_not_there(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.source import reader_fakes

    from_messages = list(reader(FakeDatabase("POSTGRESQL", HISTORY)).read("tok", START, END))
    monkeypatch.delattr(reader_fakes.FakeResults, "_response_iterator")  # a client version without the attribute
    from_rows = list(reader(FakeDatabase("POSTGRESQL", HISTORY)).read("tok", START, END))
    assert from_rows == from_messages and len(from_rows) == len(HISTORY)
