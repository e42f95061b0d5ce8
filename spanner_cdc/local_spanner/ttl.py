"""Row deletion policies (TTL) of the local server: which rows expired, and the sweeper that deletes them.

As in Spanner ("About time to live (TTL)"): a row expires once its policy's TIMESTAMP column plus the interval is in
the past (never while the column is NULL); a background job of the server deletes expired rows in system transactions,
which change streams record with is_system_transaction = true (left out by streams with exclude_ttl_deletes). Deletes
cascade to interleaved ON DELETE CASCADE tables; a row with NO ACTION children is left until they are gone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from spanner_cdc.local_spanner.keysets import Key, Rows
from spanner_cdc.local_spanner.schema import TableDef
from spanner_cdc.local_spanner.values import parse_timestamp

log = logging.getLogger(__name__)

DEFAULT_TTL_INTERVAL_SECONDS = 5.0  # real seconds between sweeps (Spanner sweeps within days; a test wants seconds)


def expired_keys(table: TableDef, rows: Rows, now: datetime) -> list[Key]:
    """Keys of `rows` whose row deletion policy says they are gone at `now`."""
    if table.ttl is None:
        return []
    column, period = table.ttl.column, timedelta(days=table.ttl.days)
    out = []
    for key, row in rows.items():
        value = row.get(column)
        if value is not None and parse_timestamp(value) + period < now:
            out.append(key)
    return out


class TtlSweeper:
    """Runs `sweep()` every `interval` real seconds on its own thread until stopped."""

    def __init__(self, sweep: Callable[[], int], interval: float) -> None:
        self.sweep = sweep
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ttl-sweeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                deleted = self.sweep()
            except Exception:  # a failed sweep must not end the sweeper: the next one tries again
                log.exception("row deletion policy sweep failed")
                continue
            if deleted:
                log.info("row deletion policies deleted %d expired rows", deleted)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
