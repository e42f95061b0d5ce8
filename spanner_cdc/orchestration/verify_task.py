"""Task body of the daily verify DAG: the newest closed window compared with the source; a mismatch fails the task."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spanner_cdc.orchestration.connections import stream_settings
from spanner_cdc.orchestration.failures import fail_fast

if TYPE_CHECKING:
    from spanner_cdc.settings import Settings


@fail_fast
def verify(stream: str) -> dict[str, Any]:
    """The `verify` task of the stream's daily verify DAG, with the stream's `verify_fraction`."""
    config, settings = stream_settings(stream)
    return verify_newest(settings, config.verify_fraction)


def verify_newest(settings: Settings, fraction: float) -> dict[str, Any]:
    """`spanner-cdc verify` of the newest closed window: the result (kept with the window, so /metrics shows it)
    when clean; a mismatch fails the task without retries (a retry finds the same), the result in its message."""
    from spanner_cdc.extract.verify import run_verify

    result = run_verify(settings, fraction=fraction)
    if not result.ok:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException("\n".join(result.lines()))
    return result.to_json()
