"""Task body of the hourly DAG's `current_state` task: each table's state as of every closed window's end."""

from __future__ import annotations

import datetime as dt
from typing import Any

from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast
from spanner_cdc.times import utc


@fail_fast
def current_state(stream: str, window_end: dt.datetime) -> list[dict[str, Any]]:
    """The states this run made (one per window closed since the last state, oldest first): one asset event each."""
    from spanner_cdc.extract.current_state import update_current_state

    config, settings = stream_settings(stream)
    return [s.to_json() for s in update_current_state(settings, up_to=utc(window_end), keep=config.current_state_keep)]
