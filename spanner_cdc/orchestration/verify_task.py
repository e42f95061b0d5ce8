"""Task body of the daily verify DAG: the newest closed window compared with the source; a mismatch fails the task."""

from __future__ import annotations

from typing import Any

from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast


@fail_fast
def verify(stream: str) -> dict[str, Any]:
    """`spanner-cdc verify` of the stream's newest closed window with its configured fraction; the result is kept with
    the window (so /metrics shows it) before a mismatch fails the task, without retries."""
    from spanner_cdc.extract.verify import run_verify

    config, settings = stream_settings(stream)
    result = run_verify(settings, fraction=config.verify_fraction)
    if not result.ok:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException("\n".join(result.lines()))
    return result.to_json()
