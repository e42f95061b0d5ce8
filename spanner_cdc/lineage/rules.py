"""Pure partition state rules: allowed transitions, where a re-read starts, window completeness."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum

ONE_MICROSECOND = timedelta(microseconds=1)


class State(StrEnum):
    CREATED = "CREATED"  # known, some parent not finished yet
    READY = "READY"
    SCHEDULED = "SCHEDULED"  # handed to a task, lease held until the task claims it
    RUNNING = "RUNNING"  # lease held by one worker
    FINISHED = "FINISHED"  # child partitions record seen and everything before it landed


# RUNNING -> RUNNING is a reclaim by another worker after the lease expired.
TRANSITIONS: Mapping[State, frozenset[State]] = {
    State.CREATED: frozenset({State.READY}),
    State.READY: frozenset({State.SCHEDULED, State.RUNNING}),
    State.SCHEDULED: frozenset({State.RUNNING, State.READY}),
    State.RUNNING: frozenset({State.RUNNING, State.READY, State.FINISHED}),
    State.FINISHED: frozenset(),
}

# The states a partition is inserted in: CREATED, a child waiting for its parents; READY, a root partition or one a
# MUTABLE_KEY_RANGE partition start record announced (no parent to wait for).
INITIAL: frozenset[State] = frozenset({State.CREATED, State.READY})

# States whose lease, once expired, makes the token claimable again.
LEASED: frozenset[State] = frozenset({State.SCHEDULED, State.RUNNING})


def can_transition(current: State | str, target: State | str) -> bool:
    return State(target) in TRANSITIONS[State(current)]


def sources_of(target: State | str) -> tuple[State, ...]:
    """Every state from which `target` may be entered, in declaration order."""
    return tuple(state for state in State if State(target) in TRANSITIONS[state])


def require_utc(value: datetime, name: str) -> datetime:
    """Timestamps cross the store boundary timezone-aware; a naive one is a caller bug."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value.isoformat()}")
    return value


def inclusive_end(window_end: datetime) -> datetime:
    """A window [S, E) is queried up to E - 1 µs, so consecutive windows never read a timestamp twice."""
    return window_end - ONE_MICROSECOND


def read_from(watermark: datetime | None, partition_start: datetime) -> datetime:
    """Where a (re-)read of a partition starts: just after its watermark, never before its start."""
    if watermark is None:
        return partition_start
    return max(watermark + ONE_MICROSECOND, partition_start)


def effective_watermark(watermark: datetime | None, partition_start: datetime) -> datetime:
    """The watermark of a partition nothing of which is landed yet is just before its start."""
    return partition_start - ONE_MICROSECOND if watermark is None else watermark


def advance_watermark(current: datetime | None, proposed: datetime) -> datetime:
    """Watermarks never go backwards: a late or replayed completion keeps the higher one."""
    return proposed if current is None else max(current, proposed)


def alive_in_window(partition_start: datetime, window_end: datetime) -> bool:
    """A partition can hold changes of [S, E) only if it starts at or before E - 1 µs."""
    return partition_start <= inclusive_end(window_end)


def done_for_window(state: State | str, watermark: datetime | None, window_end: datetime) -> bool:
    """A partition is done with a window when finished, or landed up to E - 1 µs."""
    if State(state) is State.FINISHED:
        return True
    return watermark is not None and watermark >= inclusive_end(window_end)


def needs_read(partition_start: datetime, watermark: datetime | None, window_end: datetime) -> bool:
    """Whether a live partition still has part of the window to read."""
    return alive_in_window(partition_start, window_end) and not done_for_window(State.READY, watermark, window_end)


def claimable(
    state: State | str,
    partition_start: datetime,
    watermark: datetime | None,
    window_end: datetime,
    *,
    lease_expired: bool,
    named: bool = False,
) -> bool:
    """READY tokens are claimable; SCHEDULED ones by the task that names them; leased ones once expired."""
    state = State(state)
    if not needs_read(partition_start, watermark, window_end):
        return False
    if state is State.READY:
        return True
    if state is State.SCHEDULED and named:
        return True
    return state in LEASED and lease_expired


def promotable(parent_states: Mapping[str, State | str | None]) -> bool:
    """A CREATED child becomes READY once every parent it names is known and FINISHED."""
    return bool(parent_states) and all(
        state is not None and State(state) is State.FINISHED for state in parent_states.values()
    )


def pending_in_window(
    partitions: Iterable[tuple[str, State | str, datetime, datetime | None]], window_end: datetime
) -> dict[str, list[str]]:
    """(token, state, start, watermark) rows -> the tokens still holding up window [S, E), by state."""
    pending: dict[str, list[str]] = {}
    for token, state, start, watermark in partitions:
        if alive_in_window(start, window_end) and not done_for_window(state, watermark, window_end):
            pending.setdefault(str(State(state)), []).append(token)
    return {state: sorted(tokens) for state, tokens in sorted(pending.items())}


def window_complete(
    partitions: Iterable[tuple[str, State | str, datetime, datetime | None]], window_end: datetime
) -> bool:
    """Complete iff some partition covers the window and every one alive in it is done with it.

    A lineage with no partition starting before E has not been bootstrapped for this window, so
    nothing proves its changes landed.
    """
    rows = list(partitions)
    covered = any(alive_in_window(start, window_end) for _, _, start, _ in rows)
    return covered and not pending_in_window(rows, window_end)
