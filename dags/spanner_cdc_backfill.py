"""`spanner_cdc_backfill`: a manual trigger form that extracts a past range of one stream in its own namespace."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Param, task

from spanner_cdc.names import BACKFILL_DAG_ID, SPANNER_POOL
from spanner_cdc.settings import load_settings
from spanner_cdc.stream_config import load_streams

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "spanner-cdc",
    "retries": 3,
    "retry_delay": dt.timedelta(seconds=30),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": dt.timedelta(minutes=15),
}
DOC = """
Re-extracts `[start, end)` of one configured stream, hour by hour, into a lineage namespace of its
own (`backfill_<run id>`), so the live hourly lineage and its checkpoints are not touched. Rows carry
`read_method = spanner-change-stream-backfill`; files land under `<output_root>/<stream>/<namespace>/`.
The first task refuses the form (with the reason) when end is not after start, end is in the
future, or start is outside the change stream's retention.
"""


def _params() -> dict[str, Param]:
    base = load_settings({})
    names = list(load_streams(base))
    stream = Param(
        names[0] if names else None,
        type="string",
        title="Stream",
        description="A configured stream ([streams.<name>] in $SPANNER_CDC_CONFIG).",
        **({"enum": names} if names else {}),
    )
    return {
        "stream": stream,
        "start": Param(
            type="string",
            format="date-time",
            title="Start",
            description="First instant to extract (inclusive), inside the change stream's retention.",
        ),
        "end": Param(
            type="string",
            format="date-time",
            title="End",
            description="Where to stop (exclusive); after start and not in the future.",
        ),
        "heartbeat_ms": Param(
            base.heartbeat_ms,
            type="integer",
            minimum=1000,
            maximum=300_000,
            title="Heartbeat (ms)",
            description="heartbeat_milliseconds of the change stream queries.",
        ),
        "output_root": Param(
            "",
            type="string",
            title="Output root",
            description="Root of the lake to write to; empty means the stream's configured output root.",
        ),
    }


with DAG(
    dag_id=BACKFILL_DAG_ID,
    schedule=None,
    start_date=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    default_args=DEFAULT_ARGS,
    params=_params(),
    tags=["spanner-cdc", "backfill"],
    doc_md=DOC,
):

    @task(task_id="validate", retries=0)
    def validate(params: Any = None, run_id: Any = None) -> dict:
        from spanner_cdc.orchestration import backfill

        return backfill.validate(params, run_id)

    @task(task_id="extract_windows", pool=SPANNER_POOL)
    def extract_windows(spec: dict, run_id: Any = None) -> dict:
        from spanner_cdc.orchestration import backfill

        return backfill.run(spec, run_id)

    extract_windows(validate())
