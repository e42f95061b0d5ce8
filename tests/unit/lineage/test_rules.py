from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.lineage import rules
from spanner_cdc.lineage.rules import State

T0 = datetime(2025, 1, 1, 12, tzinfo=UTC)
US = timedelta(microseconds=1)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (State.CREATED, State.READY),
        (State.READY, State.SCHEDULED),
        (State.READY, State.RUNNING),
        (State.SCHEDULED, State.RUNNING),
        (State.SCHEDULED, State.READY),
        (State.RUNNING, State.READY),
        (State.RUNNING, State.FINISHED),
        (State.RUNNING, State.RUNNING),
    ],
)
def test_allowed_transitions(current: State, target: State) -> None:
    assert rules.can_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (State.CREATED, State.RUNNING),
        (State.CREATED, State.FINISHED),
        (State.READY, State.FINISHED),
        (State.READY, State.CREATED),
        (State.FINISHED, State.READY),
        (State.FINISHED, State.RUNNING),
        (State.SCHEDULED, State.FINISHED),
    ],
)
def test_forbidden_transitions(current: State, target: State) -> None:
    assert not rules.can_transition(current, target)


def test_finished_is_terminal_and_only_running_finishes() -> None:
    assert rules.TRANSITIONS[State.FINISHED] == frozenset()
    assert rules.sources_of(State.FINISHED) == (State.RUNNING,)
    assert rules.sources_of(State.READY) == (State.CREATED, State.SCHEDULED, State.RUNNING)


def test_transitions_accept_state_names() -> None:
    assert rules.can_transition("READY", "RUNNING")
    with pytest.raises(ValueError):
        rules.can_transition("READY", "DONE")


def test_read_from_starts_just_after_the_watermark_but_never_before_the_start() -> None:
    assert rules.read_from(None, T0) == T0
    assert rules.read_from(T0 + HOUR - US, T0) == T0 + HOUR
    # a child starts later than what an old watermark would suggest
    assert rules.read_from(T0 - HOUR, T0) == T0


def test_inclusive_end_is_one_microsecond_before_the_window_end() -> None:
    assert rules.inclusive_end(T0 + HOUR) == datetime(2025, 1, 1, 12, 59, 59, 999999, tzinfo=UTC)


def test_consecutive_windows_never_read_a_timestamp_twice() -> None:
    first_end = T0 + HOUR
    watermark_after_first = rules.inclusive_end(first_end)
    assert rules.read_from(watermark_after_first, T0) == first_end


def test_effective_watermark_of_an_unread_partition_is_just_before_its_start() -> None:
    assert rules.effective_watermark(None, T0) == T0 - US
    assert rules.effective_watermark(T0 + HOUR, T0) == T0 + HOUR


def test_watermark_never_goes_backwards() -> None:
    assert rules.advance_watermark(None, T0) == T0
    assert rules.advance_watermark(T0 + HOUR, T0) == T0 + HOUR
    assert rules.advance_watermark(T0, T0 + HOUR) == T0 + HOUR


def test_needs_read_within_window() -> None:
    end = T0 + HOUR
    assert rules.needs_read(T0, None, end)
    assert rules.needs_read(T0, end - 2 * US, end)
    assert not rules.needs_read(T0, end - US, end)
    assert not rules.needs_read(end, None, end), "a partition starting at E belongs to the next window"
    assert rules.needs_read(end - US, None, end)


def test_claimable() -> None:
    end = T0 + HOUR
    assert rules.claimable(State.READY, T0, None, end, lease_expired=False)
    assert not rules.claimable(State.READY, T0, end - US, end, lease_expired=False)
    assert not rules.claimable(State.CREATED, T0, None, end, lease_expired=True)
    assert not rules.claimable(State.FINISHED, T0, None, end, lease_expired=True)
    assert not rules.claimable(State.RUNNING, T0, None, end, lease_expired=False)
    assert rules.claimable(State.RUNNING, T0, None, end, lease_expired=True)
    assert not rules.claimable(State.SCHEDULED, T0, None, end, lease_expired=False)
    assert rules.claimable(State.SCHEDULED, T0, None, end, lease_expired=False, named=True)
    assert rules.claimable(State.SCHEDULED, T0, None, end, lease_expired=True)


def test_promotable_only_when_every_named_parent_is_known_and_finished() -> None:
    assert rules.promotable({"a": State.FINISHED})
    assert rules.promotable({"a": "FINISHED", "b": "FINISHED"})
    assert not rules.promotable({"a": State.FINISHED, "b": State.RUNNING})
    assert not rules.promotable({"a": State.FINISHED, "b": None}), "an unknown parent is not finished"
    assert not rules.promotable({})


def test_window_complete_when_every_alive_partition_is_done() -> None:
    end = T0 + HOUR
    last = end - US
    rows = [
        ("finished-long-ago", State.FINISHED, T0 - 5 * HOUR, T0 - 4 * HOUR),
        ("landed", State.READY, T0, last),
        ("landed-beyond", State.RUNNING, T0, last + HOUR),
        ("born-after", State.CREATED, end, None),
    ]
    assert rules.window_complete(rows, end)
    assert rules.pending_in_window(rows, end) == {}


def test_window_incomplete_lists_pending_tokens_by_state() -> None:
    end = T0 + HOUR
    rows = [
        ("a", State.READY, T0, end - 2 * US),
        ("b", State.CREATED, T0 + timedelta(minutes=5), None),
        ("c", State.RUNNING, T0, None),
        ("d", State.READY, T0, None),
        ("e", State.FINISHED, T0, T0),
    ]
    assert not rules.window_complete(rows, end)
    assert rules.pending_in_window(rows, end) == {"CREATED": ["b"], "READY": ["a", "d"], "RUNNING": ["c"]}


def test_window_with_no_partition_covering_it_is_not_complete() -> None:
    end = T0 + HOUR
    assert not rules.window_complete([], end)
    assert not rules.window_complete([("later", State.READY, end, None)], end)


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        rules.require_utc(datetime(2025, 1, 1), "window_end")
    assert rules.require_utc(T0, "window_end") is T0
