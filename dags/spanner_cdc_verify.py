"""A daily DAG per stream with `verify = true`, `spanner_cdc_verify__<name>`: the newest closed window vs the source."""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task

from spanner_cdc.settings import load_settings
from spanner_cdc.stream_config import StreamConfig, load_streams

DOC = """
Verifies, once a day, the newest closed window of change stream **{change_stream}** against the source: each
current-state table's snapshot of the window against a stale read at its end - 1 µs ({fraction:g} of the key buckets),
and the window's change log against a fresh read of the change stream, by uuid. The result is kept with the window
(`spanner_cdc_verify_mismatches` in `/metrics`, `lake show --json`); a mismatch fails the task, without retries, with
the keys in its log. Off unless the `[streams.{name}]` table of `$SPANNER_CDC_CONFIG` says `verify = true`.
"""


def build(config: StreamConfig) -> DAG:
    with DAG(
        dag_id=f"spanner_cdc_verify__{config.name}",
        # daily at 00:30 UTC: the hourly run has closed [23:00, 00:00) by then, and its end is half an hour old, within
        # Spanner's default version_retention_period (1 h) for the stale read of the state part
        schedule="30 0 * * *",
        start_date=config.start_date,
        catchup=False,  # a verify checks the newest closed window: a missed day has nothing of its own to check
        max_active_runs=1,
        default_args={"owner": "spanner-cdc", "retries": 2, "retry_delay": dt.timedelta(minutes=5)},
        tags=["spanner-cdc", config.name],
        doc_md=DOC.format(name=config.name, change_stream=config.change_stream, fraction=config.verify_fraction),
    ) as dag:

        @task(task_id="verify")
        def verify() -> dict:
            from spanner_cdc.orchestration import verify_task

            return verify_task.verify(config.name)

        verify()
    return dag


def _build_all() -> dict[str, DAG]:
    return {f"spanner_cdc_verify__{c.name}": build(c) for c in load_streams(load_settings({})).values() if c.verify}


globals().update(_build_all())
