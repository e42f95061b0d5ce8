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
        self.rate = rate
        self._origin_real = time.monotonic()
        self._origin = (start or datetime.now(UTC)).astimezone(UTC)
        if not_before is not None and self._origin <= not_before:
            # after a restart, time must not go back behind what was already committed
            self._origin = not_before + ONE_MICROSECOND
        self._last_commit = not_before
        self._lock = threading.Lock()

    def now(self) -> datetime:
        elapsed = (time.monotonic() - self._origin_real) * self.rate
        return self._origin + timedelta(microseconds=int(elapsed * 1_000_000))

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
