"""The demo's history on Google's Spanner emulator (`spanner-cdc demo --source emulator`): real time, minute windows."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Callable, Iterator
from typing import Any

MINUTE = dt.timedelta(minutes=1)
# The DAG's schedule on the emulator: its clock is the wall clock, so the history's windows are minutes, not hours.
SCHEDULE = "* * * * *"
Echo = Callable[[str], None] | None
Window = tuple[dt.datetime, dt.datetime]


def say(echo: Echo, text: str) -> None:
    if echo is not None:
        echo(text)


def next_minute(value: dt.datetime) -> dt.datetime:
    floor = value.replace(second=0, microsecond=0)
    return floor if floor == value else floor + MINUTE


def _sleep_until(when: dt.datetime) -> None:
    while (left := (when - dt.datetime.now(dt.UTC)).total_seconds()) > 0:
        time.sleep(min(left, 5.0))


@contextlib.contextmanager
def emulator_history(options: Any, paths: Any, database_id: str, stream: str, echo: Echo) -> Iterator[tuple[str, list[Window], list[Window]]]:
    """Start the emulator, create `database_id` with the workload's tables and `stream`, write `options.hours` minutes
    of the workload in real time and wait for the minute after them to pass; yields the emulator's host, the history's
    windows and the windows to run (one more). The emulator stops on leaving the block."""
    from spanner_cdc.devstack import workload
    from spanner_cdc.devstack.emulator import TOKEN_ALIVE_SECONDS, SpannerEmulator, record_ground_truth_as_the_emulator
    from spanner_cdc.devstack.spanner_server import create_database

    say(echo, f"2/5 Google's Spanner emulator (real time; partitions split and merge every {TOKEN_ALIVE_SECONDS}-"
              f"{2 * TOKEN_ALIVE_SECONDS} s)")
    with SpannerEmulator(log_path=paths.logs / "spanner-emulator.log") as emulator:
        database = create_database(emulator.host, "local-project", "local-instance", database_id)
        workload.setup_database(database, "GOOGLE_STANDARD_SQL", stream, "OLD_AND_NEW_VALUES")
        first = next_minute(dt.datetime.now(dt.UTC))  # the first whole minute with the stream in place
        windows = [(first + k * MINUTE, first + (k + 1) * MINUTE) for k in range(options.hours)]
        _sleep_until(first)
        seconds = options.hours * 60 * 0.9  # the workload ends inside the last window
        say(echo, f"3/5 workload: {options.transactions} transactions from {first:%H:%M:%S} over {seconds:.0f} s")
        workload.run_workload(database, transactions=options.transactions, tx_per_second=options.transactions / seconds,
                              seed=options.seed, ground_truth=paths.ground_truth)  # fmt: skip
        # what the emulator's streams record (TIMESTAMPs in whole seconds, no transaction tag) is what the lake must hold
        record_ground_truth_as_the_emulator(paths.ground_truth)
        # one run more than the history: the next minute's run finishes a window an earlier run left open
        run_windows = [*windows, (windows[-1][1], windows[-1][1] + MINUTE)]
        _sleep_until(run_windows[-1][1] + dt.timedelta(seconds=2))  # every window to run is over
        yield emulator.host, windows, run_windows
