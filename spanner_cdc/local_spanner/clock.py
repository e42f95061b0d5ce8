"""Server time of the local Spanner server: may start in the past and run faster than real time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

ONE_MICROSECOND = timedelta(microseconds=1)


class ServerClock:
    """now() = clock_start + (real elapsed) * rate; commit timestamps are unique and increasing (µs)."""

    def __init__(self, start: datetime | None = None, rate: float = 1.0, not_before: datetime | None = None) -> None:
        if rate <= 0:
            raise ValueError("clock rate must be > 0")
        origin = (start or datetime.now(UTC)).astimezone(UTC)
        if not_before is not None and origin <= not_before:
            # after a restart, time must not go back behind what was already committed
            origin = not_before + ONE_MICROSECOND
        # (real origin, server origin, rate) in one tuple: set_rate swaps it whole, so now() never mixes two
        self._anchor = (time.monotonic(), origin, rate)
        self._last_commit = not_before
        self._lock = threading.Lock()

    @property
    def rate(self) -> float:
        return self._anchor[2]

    def now(self) -> datetime:
        origin_real, origin, rate = self._anchor
        elapsed = (time.monotonic() - origin_real) * rate
        return origin + timedelta(microseconds=int(elapsed * 1_000_000))

    def set_rate(self, rate: float) -> datetime:
        """Run at `rate` from now on (time goes on from where it is, never back); returns the server time."""
        if rate <= 0:
            raise ValueError("clock rate must be > 0")
        with self._lock:
            now = max(self.now(), self._last_commit or self.now())
            self._anchor = (time.monotonic(), now, rate)
            return now

    def next_commit_timestamp(self) -> datetime:
        """A commit timestamp greater than every earlier one and not behind now()."""
        with self._lock:
            candidate = self.now()
            if self._last_commit is not None and candidate <= self._last_commit:
                candidate = self._last_commit + ONE_MICROSECOND
            self._last_commit = candidate
            return candidate

    @property
    def last_commit_timestamp(self) -> datetime | None:
        return self._last_commit

    def real_seconds_until(self, when: datetime) -> float:
        """Real seconds to wait until server time reaches `when` (0 if already past)."""
        return max(0.0, (when - self.now()).total_seconds() / self.rate)

    def sleep_until(self, when: datetime, stop: threading.Event | None = None, max_real_seconds: float = 1.0) -> bool:
        """Sleep until `when` (server time), `stop` is set, or max_real_seconds pass; True if `when` was reached."""
        delay = min(self.real_seconds_until(when), max_real_seconds)
        if delay > 0:
            if stop is not None:
                stop.wait(delay)
            else:
                time.sleep(delay)
        return self.now() >= when
