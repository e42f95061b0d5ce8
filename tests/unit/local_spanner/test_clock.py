"""The local server's clock: a new rate goes on from the current time, never back behind a commit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spanner_cdc.local_spanner.clock import ServerClock

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def test_a_new_rate_goes_on_from_the_current_time() -> None:
    clock = ServerClock(T0, rate=600.0)
    committed = clock.next_commit_timestamp()
    at = clock.set_rate(1e-6)  # a microsecond of server time per real second: as good as paused
    assert at >= committed and clock.rate == 1e-6
    assert at <= clock.now() < at + timedelta(seconds=1)
    assert clock.next_commit_timestamp() > committed  # commit timestamps still only increase
    assert clock.set_rate(600.0) >= at


def test_a_rate_must_be_positive() -> None:
    clock = ServerClock(T0)
    with pytest.raises(ValueError, match="rate must be > 0"):
        clock.set_rate(0)
    assert clock.rate == 1.0
