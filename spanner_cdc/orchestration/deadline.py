"""The hourly DAG's deadline: what runs when a window is not complete N minutes after its end."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

# The DAG file names window_missed by its path (names.DEADLINE_CALLBACK); Airflow imports this module when it
# parses the DAG file, so it stays light: the store and the lineage rules are imported when a deadline is missed.
BACKFILL_RUN_TYPE = "backfill"


def _time(value: Any) -> dt.datetime:
    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def missed_line(stream: str, start: dt.datetime, end: dt.datetime, minutes: int, run_id: str,
                pending: Mapping[str, list[str]] | str) -> str:  # fmt: skip
    """The one log line of a missed deadline: the stream, the window and the partitions holding it open."""
    from spanner_cdc.names import short_token

    if isinstance(pending, str):
        holding = pending
    elif pending:
        count = sum(len(tokens) for tokens in pending.values())
        by_state = "; ".join(f"{state}: {', '.join(short_token(t) for t in tokens)}" for state, tokens in pending.items())
        holding = f"{count} partition(s) holding it open: {by_state}"
    else:
        holding = "no partition holds it open (its close has not run yet)"
    return (
        f"stream {stream} window [{start.isoformat()}, {end.isoformat()}) not complete {minutes} min after its end "
        f"(DAG run {run_id}): {holding}"
    )


def pending_partitions(stream_name: str, window_end: dt.datetime) -> dict[str, list[str]] | str:
    """The live lineage's tokens still holding up the window, by state (text: why there are none to show)."""
    from spanner_cdc.errors import NotFound
    from spanner_cdc.lineage.rules import pending_in_window
    from spanner_cdc.names import LIVE_NAMESPACE
    from spanner_cdc.orchestration.connections import stream_settings
    from spanner_cdc.store import MetadataStore
    from spanner_cdc.store.url import require_metadata_url

    config, settings = stream_settings(stream_name)
    with MetadataStore.connect(require_metadata_url(settings.metadata_url)) as store:
        try:
            lineage = store.get_lineage(config.change_stream, LIVE_NAMESPACE)
        except NotFound:
            return "the lineage has not started yet"
        rows = [(p.token, p.state, p.start, p.watermark) for p in store.partitions(lineage.id)]
    return pending_in_window(rows, window_end)


async def window_missed(context: Mapping[str, Any], stream: str, minutes: int) -> None:
    """The default deadline callback (in Airflow's triggerer): one log line naming the partitions left.

    Airflow's own backfill re-runs windows long past their deadline on purpose: those runs are not reported.
    """
    run = context["dag_run"]
    if run.get("run_type") == BACKFILL_RUN_TYPE:
        log.info("stream %s: deadline of backfill run %s passed (not reported)", stream, run.get("dag_run_id"))
        return
    start, end = _time(run["data_interval_start"]), _time(run["data_interval_end"])
    try:
        pending: dict[str, list[str]] | str = await asyncio.to_thread(pending_partitions, stream, end)
    except Exception as exc:  # the line is still due: the store being down is one reason for a missed deadline
        pending = f"partitions unknown ({type(exc).__name__}: {exc})"
    log.warning("%s", missed_line(stream, start, end, minutes, str(run.get("dag_run_id")), pending))
